"""The broker's one peer client against real aiohttp servers on 127.0.0.1: the three callers share its
connections, it sends the broker's own ``Authorization``, error answers come back typed, an unreachable or
silent peer is the caller's retriable error, and it refuses calls before it is opened and after it closed.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tierlog.client.security import ClientSecurity
from tierlog.service.cluster.peers import FORWARDED_BY, Budget, PeerClient
from tierlog.service.cluster.proxy import LeaderClient, LeaderPartition
from tierlog.service.groups.routing import Coordinate, Forwarder
from tierlog.service.replication.client import ReplicationClient
from tierlog.service.web.errors import error_middleware
from tierlog.wire.errors import (
    LeaderNotAvailableError,
    UnavailableError,
    UnknownTopicError,
)

BASIC = ClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_plain_username="b", sasl_plain_password="p")


class Peer:
    """A stand-in broker: answers every request with what it saw (the client's port, its headers)."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.authorizations: list[str | None] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peername = request.transport.get_extra_info("peername") if request.transport else None
        self.ports.append(peername[1] if peername else -1)
        self.authorizations.append(request.headers.get("Authorization"))
        if request.path.startswith("/slow"):
            await self.release.wait()
        if request.path.startswith("/missing"):
            raise UnknownTopicError("no topic missing")
        return web.json_response(
            {"offset": 3, "timestamp": 4, "leader_epoch": 0, "end_offset": 9},
            headers={"Tierlog-Answered": "yes"},
        )


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, str]]:
    seen = Peer()
    app = web.Application(middlewares=[error_middleware])
    app.router.add_route("*", "/{tail:.*}", seen.handle)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield seen, str(client.make_url("")).rstrip("/")
        seen.release.set()


@pytest.fixture
async def peers() -> AsyncIterator[PeerClient]:
    started = PeerClient(lambda: 5, connect_ms=5_000, request_ms=10_000, security=BASIC)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_the_three_callers_share_one_connection_and_the_brokers_identity(
    peer: tuple[Peer, str], peers: PeerClient
) -> None:
    seen, url = peer
    replication = ReplicationClient(peers, broker_id=5, timeout_s=10)
    assert await replication.epoch_end_offset(url, "t", 0, leader_epoch=0, epoch=0) == (0, 9)
    proxied = LeaderPartition(LeaderClient(peers), "t", 0, leader_id=2, url=url)
    assert await proxied.offset_for_timestamp(1) == (3, 4)

    front = web.Application(middlewares=[error_middleware])

    async def forward(request: web.Request) -> web.StreamResponse:
        return await Forwarder(peers).forward(request, Coordinate("g", 0, 2, url, 0))

    front.router.add_route("*", "/{tail:.*}", forward)
    async with TestClient(TestServer(front, host="127.0.0.1")) as client:
        response = await client.get("/native/v1/groups/g", headers={"Authorization": "Basic client"})
        assert response.status == 200 and response.headers["Tierlog-Answered"] == "yes"

    assert len(seen.ports) == 3 and len(set(seen.ports)) == 1  # one kept-alive connection for all three
    assert set(seen.authorizations) == {BASIC.headers()["Authorization"]}  # never the client's


async def test_error_answers_are_typed_and_exchange_reads_any_status(
    peer: tuple[Peer, str], peers: PeerClient
) -> None:
    _, url = peer
    with pytest.raises(UnknownTopicError):
        await peers.call("GET", f"{url}/missing", peer="broker 2")
    answer = await peers.exchange("GET", f"{url}/missing", peer="broker 2")
    assert answer.status == 404 and b"40401" in answer.body


async def test_an_unreachable_peer_is_the_callers_retriable_error(peers: PeerClient) -> None:
    url = f"http://127.0.0.1:{closed_port()}/x"
    with pytest.raises(UnavailableError) as default:
        await peers.call("GET", url, peer="broker 9")
    assert default.value.retriable and "broker 9 is unreachable" in default.value.message
    with pytest.raises(LeaderNotAvailableError) as leader:
        await peers.call("GET", url, peer="broker 9", unreachable=LeaderNotAvailableError)
    assert leader.value.code == 50311 and leader.value.retriable


async def test_a_silent_peer_times_out_as_unavailable(peer: tuple[Peer, str], peers: PeerClient) -> None:
    _, url = peer
    with pytest.raises(UnavailableError) as silent:
        await peers.call("GET", f"{url}/slow", peer="broker 2", budget=Budget(0.2, 5.0))
    assert silent.value.code == 50301 and "did not answer within 0.2 s" in silent.value.message


def test_a_budget_adds_the_long_poll_wait() -> None:
    budget = Budget(30.0, 9.0)
    assert budget.timeout(0) is budget.timeout(0)  # made once for calls that do not wait
    assert (budget.timeout(0).total, budget.timeout(0).sock_connect) == (30.0, 9.0)
    assert budget.timeout(500).total == 30.5
    assert Budget(30.0).timeout(0).sock_connect is None


async def test_calls_before_start_and_after_close_are_refused(peer: tuple[Peer, str]) -> None:
    _, url = peer
    client = PeerClient(lambda: 5, connect_ms=1_000, request_ms=1_000)
    with pytest.raises(UnavailableError, match="not serving yet"):
        await client.call("GET", url, peer="broker 2")
    await client.start()
    await client.call("GET", url, peer="broker 2")
    await client.close()
    await client.start()  # closed for good: no new session
    with pytest.raises(UnavailableError, match="broker 5 is closing"):
        await client.call("GET", url, peer="broker 2")


async def test_forwarded_headers_name_this_broker_and_drop_the_clients_credentials(
    peers: PeerClient,
) -> None:
    seen: dict[str, str] = {}

    async def capture(request: web.Request) -> web.StreamResponse:
        seen.update(peers.forwarded_headers(request))
        return web.Response()

    app = web.Application()
    app.router.add_get("/", capture)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        await client.get(
            "/",
            headers={
                "Authorization": "Basic client",
                "Tierlog-Forwarded-Principal": "User:admin",
                "Connection": "keep-alive",
                "X-Kept": "1",
            },
        )
    assert seen[FORWARDED_BY] == "5" and seen["X-Kept"] == "1"
    assert not {"authorization", "tierlog-forwarded-principal", "connection"} & {k.lower() for k in seen}
