"""Consumer groups in a cluster: a group's coordinator is the leader of its ``__consumer_offsets`` partition
(Kafka's hash), and a group request reaching another broker is forwarded there.

Three in-process brokers share one metadata store (``tests/integration/cluster/inproc.py``); the offsets
topic and the data topic have three partitions each, one led by every broker.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.broker import Brokers, RunningBroker
from tests.integration.cluster.inproc import InprocCluster
from tests.integration.groups.helpers import BINARY, call, decoded, produce
from tierlog.service.cluster.peers import PeerClient
from tierlog.service.groups.hashing import coordinator_partition, java_string_hash, kafka_abs
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.groups.routing import FORWARDED_BY, Coordinate, Forwarder
from tierlog.service.groups.state import CONSUMERS, GROUPS_READY
from tierlog.service.web.errors import error_middleware
from tierlog.tiering.codec.batch import iter_records
from tierlog.wire.errors import ConsumerInstanceNotFoundError

SETTINGS = {"num.partitions": "3", "offsets.topic.num.partitions": "3"}
VALUES = {0: ["a0", "a1"], 1: ["b0", "b1"], 2: ["c0", "c1"]}


# ---- the coordinator hash is Kafka's -----------------------------------------------------------------


def reference_hash(text: str) -> int:
    """Java's ``String.hashCode`` from its documented definition, ``s[0]*31^(n-1) + ... + s[n-1]`` over the
    UTF-16 code units in exact integers, then taken as a signed 32-bit int (independent of the broker's
    Horner loop)."""
    raw = text.encode("utf-16-be", "surrogatepass")
    units: tuple[int, ...] = struct.unpack(f">{len(raw) // 2}H", raw)
    total, weight = 0, 1  # weight = 31^(n-1-i), from the last unit backwards
    for unit in reversed(units):
        total += unit * weight
        weight *= 31
    total %= 2**32
    return total - 2**32 if total >= 2**31 else total


def test_the_hash_is_javas_string_hash_code() -> None:
    known = {
        "": 0,
        "a": 97,
        "Aa": 2112,  # the classic collision with "BB"
        "BB": 2112,
        "hello": 99162322,
        "polygenelubricants": -(2**31),  # Integer.MIN_VALUE: Math.abs of it is still negative
        "\U0001f600": 0xD83D * 31 + 0xDE00,  # outside the BMP: two UTF-16 code units
    }
    for text, expected in known.items():
        assert java_string_hash(text) == expected == reference_hash(text), text
    ids = ["console-consumer-40213", "my-group", "grüppe", "グループ", "g" * 255, "\U0001f600-group"]
    ids += [f"group-{i}" for i in range(200)]
    for group_id in ids:
        assert java_string_hash(group_id) == reference_hash(group_id), group_id


def test_the_partition_is_kafkas_utils_abs_modulo_the_count() -> None:
    assert coordinator_partition("polygenelubricants", 50) == 0  # its hash is MIN_VALUE: Utils.abs gives 0
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-1) == 1 and kafka_abs(7) == 7
    assert coordinator_partition("my-group", 50) == 12  # negative hash: abs, not a bit mask (that gives 36)
    negative = [g for g in (f"group-{i}" for i in range(500)) if reference_hash(g) < 0]
    assert negative, "some ids hash negative"
    for group_id in [*negative, "hello", "my-group"]:
        for count in (1, 3, 50):
            expected = abs(reference_hash(group_id)) % count  # Math.abs; MIN_VALUE is covered above
            assert coordinator_partition(group_id, count) == expected, (group_id, count)


# ---- three brokers ------------------------------------------------------------------------------------


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path / "cluster") as started:
        brokers = await started.start(3, SETTINGS)
        for running in brokers:
            await running.app[GROUPS_READY].wait()
        # The first group request creates __consumer_offsets: 404 (no such group), or 503 (retriable) while
        # its partitions wait for leaders.
        first = await brokers[0].client.get("/native/v1/groups/warm-up")
        assert first.status in (404, 503), await first.text()
        await started.wait_for(lambda: started.converged(OFFSETS_TOPIC))
        assert sorted(started.leaders(OFFSETS_TOPIC)) == [1, 2, 3]
        await brokers[0].broker.create_topic("t", 3)
        await started.wait_for(lambda: started.converged("t"))
        assert sorted(started.leaders("t")) == [1, 2, 3]
        for partition, leader in enumerate(started.leaders("t")):
            await produce(started.brokers[leader].client, "t", partition, VALUES[partition])
        yield started


def group_coordinated_by_another(cluster: InprocCluster, entry: int) -> tuple[str, int]:
    """A group id whose coordinator is not broker ``entry``, and that coordinator's id."""
    leaders = cluster.leaders(OFFSETS_TOPIC)
    for i in itertools.count():
        group = f"group-{i}"
        leader = leaders[coordinator_partition(group, len(leaders))]
        if leader != entry:
            return group, leader
    raise AssertionError("unreachable")


def roles(cluster: InprocCluster) -> tuple[str, RunningBroker, RunningBroker, RunningBroker]:
    """``(group, a, b, c)``: the group is coordinated by ``b``; ``a`` and ``c`` are the others."""
    group, coordinator = group_coordinated_by_another(cluster, 1)
    third = next(i for i in cluster.brokers if i not in (1, coordinator))
    return group, cluster.brokers[1], cluster.brokers[coordinator], cluster.brokers[third]


def committed_body(offsets: dict[int, int]) -> dict[str, Any]:
    return {"offsets": [{"topic": "t", "partition": p, "offset": o} for p, o in offsets.items()]}


async def test_a_rest_consumer_created_through_another_broker_lives_on_the_coordinator(
    cluster: InprocCluster,
) -> None:
    group, a, b, c = roles(cluster)
    answer = await call(
        a.client,
        "POST",
        f"/consumers/{group}",
        {"name": "c1", "format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    path = f"/consumers/{group}/instances/c1"
    assert answer == {"instance_id": "c1", "base_uri": b.url + path}
    assert b.app[CONSUMERS].get(group, "c1").name == "c1"
    with pytest.raises(ConsumerInstanceNotFoundError):
        a.app[CONSUMERS].get(group, "c1")

    await call(a.client, "POST", f"{path}/subscription", {"topics": ["t"]}, status=204)
    assignment = await call(c.client, "GET", f"{path}/assignments")
    assert sorted(p["partition"] for p in assignment["partitions"]) == [0, 1, 2]

    records: list[dict[str, Any]] = []
    for client in itertools.islice(itertools.cycle([c.client, a.client, b.client]), 12):
        records += await call(client, "GET", f"{path}/records?timeout=1000", headers={"Accept": BINARY})
        if len(records) == 6:
            break
    by_partition = {p: decoded([r for r in records if r["partition"] == p]) for p in range(3)}
    assert by_partition == VALUES  # partitions led by a, b and c, all read through the coordinator

    committed = await call(a.client, "POST", f"{path}/offsets")
    assert sorted((e["partition"], e["committed"]) for e in committed) == [(0, 2), (1, 2), (2, 2)]
    partitions = {"partitions": [{"topic": "t", "partition": p} for p in range(3)]}
    read = await call(c.client, "GET", f"{path}/offsets", partitions)
    assert sorted((e["partition"], e["offset"]) for e in read["offsets"]) == [(0, 2), (1, 2), (2, 2)]

    await call(c.client, "DELETE", path, status=204)
    await call(b.client, "GET", f"{path}/subscription", status=404)


async def test_a_native_member_joins_and_commits_through_non_coordinators(cluster: InprocCluster) -> None:
    group, a, b, c = roles(cluster)
    joined = await call(
        a.client, "POST", f"/native/v1/groups/{group}/join", {"member_id": "", "topics": ["t"]}
    )
    assert sorted(p["partition"] for p in joined["assignment"]) == [0, 1, 2]
    member = {"member_id": joined["member_id"], "generation": joined["generation"]}

    await call(c.client, "POST", f"/native/v1/groups/{group}/heartbeat", member, status=204)
    commit = {**member, **committed_body({0: 1, 2: 2})}
    await call(c.client, "POST", f"/native/v1/groups/{group}/offsets/commit", commit, status=204)
    fetched = await call(a.client, "POST", f"/native/v1/groups/{group}/offsets/fetch", {})
    assert [(o["partition"], o["offset"]) for o in fetched["offsets"]] == [(0, 1), (2, 2)]

    described = await call(c.client, "GET", f"/native/v1/groups/{group}")
    assert [m["member_id"] for m in described["members"]] == [joined["member_id"]]
    assert {(row["partition"], row["lag"]) for row in described["lag"]} == {(0, 1), (1, 2), (2, 0)}

    for running in (a, b, c):  # every broker lists every group of the cluster
        listed = await call(running.client, "GET", "/native/v1/groups")
        assert {"group_id": group, "state": "Stable"} in listed["groups"]
    cluster_id = b.broker.cluster_id
    v3 = await call(a.client, "GET", f"/v3/clusters/{cluster_id}/consumer-groups/{group}")
    assert v3["coordinator"]["related"].endswith(f"/brokers/{b.broker.broker_id}")

    await call(
        a.client, "POST", f"/native/v1/groups/{group}/leave", {"member_id": joined["member_id"]}, status=204
    )


async def test_a_forwarded_request_is_never_forwarded_again(cluster: InprocCluster) -> None:
    group, a, b, _ = roles(cluster)
    response = await a.client.post(
        f"/native/v1/groups/{group}/offsets/fetch", data="{}", headers={FORWARDED_BY: "99"}
    )
    body = await response.json()
    assert response.status == 503
    assert body["error_code"] == 50312
    assert (body["leader_id"], body["leader_url"]) == (b.broker.broker_id, b.url)


async def test_committed_offsets_survive_the_coordinators_restart(cluster: InprocCluster) -> None:
    group, a, b, c = roles(cluster)
    coordinator = b.broker.broker_id
    await call(
        a.client,
        "POST",
        f"/native/v1/groups/{group}/offsets/commit",
        committed_body({0: 2, 1: 1}),
        status=204,
    )

    await cluster.stop_broker(coordinator)
    await cluster.wait_for(lambda: coordinator not in {r.broker_id for r in a.broker.cluster_view().brokers})
    gone = await a.client.post(f"/native/v1/groups/{group}/offsets/fetch", data="{}")
    assert gone.status == 503  # no live leader for its offsets partition: retriable, never a wrong answer

    restarted = await cluster.start_broker(coordinator, SETTINGS)
    await restarted.app[GROUPS_READY].wait()
    await cluster.wait_for(lambda: cluster.converged(OFFSETS_TOPIC))
    assert cluster.leaders(OFFSETS_TOPIC)[coordinator_partition(group, 3)] == coordinator

    for running in (a, c, restarted):
        fetched = await call(running.client, "POST", f"/native/v1/groups/{group}/offsets/fetch", {})
        assert [(o["partition"], o["offset"]) for o in fetched["offsets"]] == [(0, 2), (1, 1)]


# ---- the forwarder against real servers on 127.0.0.1 --------------------------------------------------


async def echo(request: web.Request) -> web.Response:
    """What the coordinator received, with an answer header and a status of its own."""
    seen = {
        "method": request.method,
        "raw_path": request.raw_path,
        "headers": {k.lower(): v for k, v in request.headers.items()},
        "body": (await request.read()).decode(),
    }
    return web.json_response(seen, status=201, headers={"X-Answer": "yes"})


@pytest.fixture
async def forwarder() -> AsyncIterator[Forwarder]:
    peers = PeerClient(lambda: 7, connect_ms=5_000, request_ms=10_000)
    await peers.start()
    try:
        yield Forwarder(peers)
    finally:
        await peers.close()


async def front(forwarder: Forwarder, target_url: str) -> TestClient[web.Request, web.Application]:
    """A broker-like app (the broker's error middleware) forwarding every request to ``target_url``."""

    async def forward(request: web.Request) -> web.StreamResponse:
        return await forwarder.forward(request, Coordinate("g", 0, 3, target_url, 0))

    app = web.Application(middlewares=[error_middleware])
    app.router.add_route("*", "/{tail:.*}", forward)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


async def test_a_request_is_forwarded_whole_without_hop_by_hop_headers(forwarder: Forwarder) -> None:
    target = web.Application()
    target.router.add_route("*", "/{tail:.*}", echo)
    async with TestClient(TestServer(target, host="127.0.0.1")) as coordinator:
        client = await front(forwarder, str(coordinator.make_url("")).rstrip("/"))
        try:
            response = await client.post(
                "/consumers/g/instances/i/offsets?a=1&b=%26",
                data=b'{"x": 1}',
                headers={
                    "Content-Type": "application/vnd.kafka.v2+json",
                    "X-Custom": "kept",
                    "TE": "trailers",
                },
            )
            seen = await response.json()
        finally:
            await client.close()
    assert response.status == 201 and response.headers["X-Answer"] == "yes"
    assert (seen["method"], seen["raw_path"], seen["body"]) == (
        "POST",
        "/consumers/g/instances/i/offsets?a=1&b=%26",
        '{"x": 1}',
    )
    assert seen["headers"]["content-type"] == "application/vnd.kafka.v2+json"
    assert seen["headers"]["x-custom"] == "kept"
    assert seen["headers"][FORWARDED_BY.lower()] == "7"
    assert "te" not in seen["headers"]


async def test_an_unreachable_coordinator_answers_retriable_503(forwarder: Forwarder) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    client = await front(forwarder, f"http://127.0.0.1:{port}")
    try:
        response = await client.get("/native/v1/groups/g")
        body = await response.json()
    finally:
        await client.close()
    assert response.status == 503
    assert body["error_code"] == 50301 and "unreachable" in body["message"]


# ---- one embedded broker with several offsets partitions ----------------------------------------------


async def groups_in_partition(running: RunningBroker, index: int) -> set[str]:
    """The group ids of the commit records stored in ``__consumer_offsets`` partition ``index``."""
    partition = running.broker.topic(OFFSETS_TOPIC).partition(index)
    data = (await partition.read(0, 1 << 20)).data
    return {json.loads(record.key or b"{}")["group"] for _, record in iter_records(data)}


async def test_an_embedded_broker_shards_groups_over_its_offsets_partitions(brokers: Brokers) -> None:
    running = await brokers.start(SETTINGS, wait_groups=True)
    await running.broker.create_topic("t", 3)
    groups = {coordinator_partition(g, 3): g for g in (f"group-{i}" for i in range(30))}
    assert sorted(groups) == [0, 1, 2]
    for group in groups.values():
        await call(
            running.client,
            "POST",
            f"/native/v1/groups/{group}/offsets/commit",
            committed_body({1: 5}),
            status=204,
        )
    for index, group in groups.items():
        assert await groups_in_partition(running, index) == {group}
    await running.stop()

    # a different setting later does not change an existing topic (every group would move)
    again = await brokers.start({**SETTINGS, "offsets.topic.num.partitions": "5"}, wait_groups=True)
    assert len(again.broker.topic(OFFSETS_TOPIC).partitions) == 3
    for group in groups.values():
        fetched = await call(again.client, "POST", f"/native/v1/groups/{group}/offsets/fetch", {})
        assert [(o["partition"], o["offset"]) for o in fetched["offsets"]] == [(1, 5)]
    listed = await call(again.client, "GET", "/native/v1/groups")
    assert [g["group_id"] for g in listed["groups"]] == sorted(groups.values())
