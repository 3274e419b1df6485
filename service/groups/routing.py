"""Group requests go to the group's coordinator, whichever broker they reach.

A group's coordinator is the leader of ``__consumer_offsets`` partition ``coordinator_partition(group_id,
n)`` (:mod:`tierlog.service.groups.hashing`). Every group route is wrapped by :func:`group_route`: on the
coordinator (always, on a single broker) the handler runs; elsewhere the request is forwarded whole
(method, path and query, headers minus the hop-by-hop ones, body) to the coordinator's URL and its answer
returned as it came (status, headers, body bytes, still encoded). A forwarded request carries
:data:`FORWARDED_BY`; a broker that receives one and is not the coordinator either (its view and the
sender's differ for a moment) answers 503 ``NotCoordinatorError`` (50312, retriable) naming the
coordinator it knows, and never forwards again: no loops.

The first group request of a cluster creates ``__consumer_offsets`` (with ``offsets.topic.num.partitions``
partitions, spread over the brokers live at that moment), as Kafka creates it on the first coordinator
lookup. Two brokers racing to create it is fine: the loser finds it created.

Errors (all retriable, 503): the coordinator partition has no live leader, ``LeaderNotAvailableError``
(50311); the coordinator cannot be reached or does not answer in time, ``UnavailableError`` (50301); the
coordinator is still loading the partition, ``UnavailableError``.

A forwarded request goes over the broker's one peer client
(:class:`~tierlog.service.cluster.peers.PeerClient`, which the app owns; :data:`FORWARDER` is this
module's thin user of it). It is sent as this broker (its TLS trust and certificate and its own
``Authorization``), never with the client's credentials, and names the client in
:data:`~tierlog.service.security.authn.FORWARDED_PRINCIPAL` and
:data:`~tierlog.service.security.authn.FORWARDED_HOST`
(:meth:`~tierlog.service.cluster.peers.PeerClient.forwarded_headers`): the coordinator authorizes that
user (it honours the two headers only from a caller allowed ClusterAction on the Cluster, i.e. a broker;
Kafka's KIP-590 envelope). Whatever the client sent under those names is dropped first.

Timeouts: connecting to the coordinator gets ``broker.session.timeout.ms`` (a broker that cannot accept a
connection within its session is as good as gone); the whole exchange :data:`MAX_FORWARD_S`, because a
forwarded join or records request long-polls on the coordinator as it would locally.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from yarl import URL

from tierlog.service.cluster.peers import FORWARDED_BY, PEERS, Budget, PeerAnswer, PeerClient, relayed_headers
from tierlog.service.groups.coordinator import check_group_id
from tierlog.service.groups.hashing import coordinator_partition
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.groups.state import LOADER, require_ready
from tierlog.service.web.keys import BROKER
from tierlog.wire.errors import (
    LeaderNotAvailableError,
    NotCoordinatorError,
    UnavailableError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.view import ClusterView

__all__ = [
    "FORWARDED_BY",
    "FORWARDER",
    "base_url_of",
    "Coordinate",
    "Forwarder",
    "from_other_brokers",
    "group_route",
    "is_forwarded",
    "locate",
    "setup_forwarding",
]

log = logging.getLogger("tierlog.groups.routing")

# A forwarded join waits for its generation, up to the rebalance timeout; the coordinator bounds that.
MAX_FORWARD_S = 30 * 60 + 30

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Coordinate:
    """Where a group's coordinator is: the offsets partition and its leader."""

    group_id: str
    partition: int
    leader_id: int
    leader_url: str
    leader_epoch: int


def is_forwarded(request: web.Request) -> bool:
    """The request came from another broker (it is never forwarded again)."""
    return FORWARDED_BY in request.headers


async def locate(app: web.Application, group_id: str) -> Coordinate | None:
    """``None`` when this broker coordinates ``group_id``, else where the coordinator is.

    Creates ``__consumer_offsets`` on the cluster's first group request. On the coordinator, waits
    (bounded) until the partition's groups are loaded. Safe concurrently.

    Raises:
        LeaderNotAvailableError: (50311) the coordinator partition has no live leader now.
        UnavailableError: (50301) the offsets topic or the partition's groups are not ready yet.
        InvalidRequestError: an invalid group id (nothing to route).
    """
    broker = app[BROKER]
    loader = app[LOADER]
    view = broker.cluster_view()
    parts = view.partitions.get(OFFSETS_TOPIC)
    if not parts:
        await loader.ensure_topic()
        view = broker.cluster_view()
        parts = view.partitions.get(OFFSETS_TOPIC)
        if not parts:
            raise LeaderNotAvailableError(f"{OFFSETS_TOPIC} has no partitions yet; retry")
    index = coordinator_partition(group_id, len(parts))
    state = parts[index]
    if state.leader == broker.broker_id:
        await loader.ensure_loaded(index)
        return None
    return _coordinate(view, group_id, index)


def _coordinate(view: ClusterView, group_id: str, index: int) -> Coordinate:
    state = view.partitions[OFFSETS_TOPIC][index]
    registration = view.broker(state.leader) if state.leader >= 0 else None
    if registration is None:
        raise LeaderNotAvailableError(
            f"the coordinator of group {group_id} ({OFFSETS_TOPIC}-{index}) has no live leader now; retry"
        )
    return Coordinate(group_id, index, state.leader, registration.url, state.leader_epoch)


def group_route(handler: Handler) -> Handler:
    """Wrap a route with a ``{group}`` path parameter: refuse an invalid group id (42201), run it on the
    coordinator, forward it elsewhere."""

    @functools.wraps(handler)
    async def routed(request: web.Request) -> web.StreamResponse:
        check_group_id(request.match_info["group"])
        require_ready(request)
        target = await locate(request.app, request.match_info["group"])
        if target is None:
            return await handler(request)
        if is_forwarded(request):
            raise NotCoordinatorError(
                f"broker {request.app[BROKER].broker_id} is not the coordinator of group {target.group_id} "
                f"either: {OFFSETS_TOPIC}-{target.partition} is led by broker {target.leader_id}; "
                "retry there",
                leader_id=target.leader_id,
                leader_url=target.leader_url,
                leader_epoch=target.leader_epoch,
            )
        return await request.app[FORWARDER].forward(request, target)

    return routed


async def from_other_brokers(request: web.Request) -> list[Any]:
    """The JSON answers of every other live broker to this same request, each answering for the groups it
    coordinates (a cluster-wide listing). None when the request was itself forwarded.

    Raises:
        UnavailableError: (50301, retriable) a live broker cannot be reached or answered an error.
    """
    broker = request.app[BROKER]
    if is_forwarded(request):
        return []
    urls = [b.url for b in broker.cluster_view().brokers if b.broker_id != broker.broker_id]
    return await request.app[FORWARDER].gather_json(request, urls)


def base_url_of(request: web.Request) -> str:
    """The base URL of a REST consumer instance created by ``request``: this broker's. Reached directly, as
    the client reached it; forwarded, the URL this broker registered, so a client that created the instance
    through another broker keeps talking to the coordinator."""
    broker = request.app[BROKER]
    if is_forwarded(request):
        registration = broker.cluster_view().broker(broker.broker_id)
        if registration is not None:
            return registration.url.rstrip("/")
    return f"{request.scheme}://{request.host}"


class Forwarder:
    """Forwards requests to other brokers over the broker's :class:`PeerClient`. Safe to use concurrently
    while the peer client is open (the app's cleanup context opens and closes it)."""

    def __init__(self, peers: PeerClient) -> None:
        self._peers = peers
        self._budget = Budget(MAX_FORWARD_S, peers.budget.connect_s)

    async def forward(self, request: web.Request, target: Coordinate) -> web.Response:
        """Send ``request`` to ``target``'s broker and answer what it answered.

        Raises:
            UnavailableError: (50301) the coordinator cannot be reached or did not answer in time.
        """
        body = await request.read()
        url = URL(target.leader_url.rstrip("/") + request.raw_path, encoded=True)
        peer = (
            f"the coordinator of group {target.group_id} (broker {target.leader_id} at {target.leader_url})"
        )
        answer = await self._exchange(request.method, url, peer, self._peers.forwarded_headers(request), body)
        return web.Response(status=answer.status, body=answer.body, headers=relayed_headers(answer.headers))

    async def gather_json(self, request: web.Request, urls: list[str]) -> list[Any]:
        """The JSON answers of every broker at ``urls`` to the same request (marked as forwarded, so each
        answers for itself).

        Raises:
            UnavailableError: (50301) a broker cannot be reached or answered an error.
        """
        body = await request.read()
        headers = self._peers.forwarded_headers(request)

        async def one(base: str) -> Any:
            url = URL(base.rstrip("/") + request.raw_path, encoded=True)
            answer = await self._exchange(request.method, url, f"broker at {base}", headers, body)
            if answer.status != 200:
                raise UnavailableError(
                    f"broker at {base} answered {answer.status}: {answer.body[:200]!r}; retry"
                )
            return json.loads(answer.body)

        return list(await asyncio.gather(*(one(url) for url in urls)))

    async def _exchange(
        self, method: str, url: URL, peer: str, headers: dict[str, str], body: bytes
    ) -> PeerAnswer:
        return await self._peers.exchange(
            method, url, peer=peer, headers=headers, data=body or None, budget=self._budget, relay=True
        )


FORWARDER: web.AppKey[Forwarder] = web.AppKey("tierlog.groups.forwarder", Forwarder)


def setup_forwarding(app: web.Application) -> None:
    """Give ``app`` its :class:`Forwarder`, a user of the app's :class:`PeerClient` (:data:`PEERS`, set up
    first by the app factory). Call once."""
    app[FORWARDER] = Forwarder(app[PEERS])
