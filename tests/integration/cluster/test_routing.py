"""Routing on the HTTP APIs: cluster metadata from any broker, not-leader refusals on the native API, the
REST v2 API forwarding each partition's operation to its leader, and the v3 brokers/partitions/replicas.

The proxy's own tests run it against a real broker on 127.0.0.1 (a leader is just a broker whose native
API the proxy calls); the cluster tests run three in-process brokers sharing one metadata store.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import Brokers, RunningBroker
from tests.integration.cluster.inproc import InprocCluster
from tierlog.service.cluster.peers import PeerClient
from tierlog.service.cluster.proxy import LeaderClient, LeaderPartition
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import LeaderNotAvailableError, OffsetOutOfRangeError, UnknownTopicError

BATCHES = "application/vnd.tierlog.batches"


def batch(*values: bytes, timestamp: int = -1) -> bytes:
    return build_batch([Record(None, v, timestamp=timestamp) for v in values])


@pytest.fixture
async def leader_client() -> AsyncIterator[LeaderClient]:
    peers = PeerClient(lambda: 0, connect_ms=5000, request_ms=10_000)
    await peers.start()
    try:
        yield LeaderClient(peers)
    finally:
        await peers.close()


@pytest.fixture
async def single(brokers: Brokers) -> RunningBroker:
    running = await brokers.start({"num.partitions": "2"})
    await running.broker.create_topic("t", 2)
    return running


# ---- the proxy against a real leader ---------------------------------------------------------------


async def test_the_proxy_appends_reads_and_lists_offsets_on_the_leader(
    single: RunningBroker, leader_client: LeaderClient
) -> None:
    proxied = LeaderPartition(leader_client, "t", 1, leader_id=0, url=single.url)
    first = await proxied.append(batch(b"a", b"b", timestamp=1_000))
    second = await proxied.append(batch(b"c", timestamp=2_000))
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 1, 2)
    assert (second.base_offset, second.batch_base_offsets) == (2, [2])

    local = single.broker.topic("t").partition(1)
    read = await proxied.read(0, 1 << 20)
    assert read.data == (await local.read(0, 1 << 20)).data
    assert (read.high_watermark, read.log_start_offset, read.log_end_offset) == (3, 0, 3)
    offsets = await proxied.offsets()
    assert (offsets.log_start_offset, offsets.high_watermark) == (0, 3)
    assert await proxied.offset_for_timestamp(1_500) == (2, 2_000)
    assert await proxied.offset_for_timestamp(9_000) is None
    assert single.broker.topic("t").partition(0).log_end_offset == 0


async def test_the_leaders_errors_come_back_as_the_same_classes(
    single: RunningBroker, leader_client: LeaderClient
) -> None:
    proxied = LeaderPartition(leader_client, "t", 0, leader_id=0, url=single.url)
    await proxied.append(batch(b"x"))
    with pytest.raises(OffsetOutOfRangeError) as out_of_range:
        await proxied.read(5, 1024)
    assert (out_of_range.value.log_start_offset, out_of_range.value.log_end_offset) == (0, 1)
    missing = LeaderPartition(leader_client, "gone", 0, leader_id=0, url=single.url)
    with pytest.raises(UnknownTopicError):
        await missing.offsets()


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_unreachable_leader_is_leader_not_available(leader_client: LeaderClient) -> None:
    proxied = LeaderPartition(leader_client, "t", 0, leader_id=7, url=f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(LeaderNotAvailableError) as refused:
        await proxied.append(batch(b"x"))
    assert refused.value.retriable and refused.value.code == 50311
    assert "broker 7" in refused.value.message
    with pytest.raises(LeaderNotAvailableError):
        await proxied.read(0, 1024)


# ---- one embedded broker: a one-broker cluster ---------------------------------------------------------


async def test_an_embedded_broker_answers_metadata_as_a_one_broker_cluster(single: RunningBroker) -> None:
    client, broker = single.client, single.broker
    answer: dict[str, Any] = await (await client.get("/native/v1/metadata")).json()
    assert answer["cluster_id"] == broker.cluster_id
    assert answer["controller_id"] == broker.broker_id
    assert answer["brokers"] == [{"broker_id": broker.broker_id, "url": broker.advertised_url, "rack": None}]
    topics = {t["topic"]: t for t in answer["topics"]}
    assert topics["t"]["partitions"] == [
        {"partition": p, "leader": 0, "leader_epoch": 0, "replicas": [0], "isr": [0]} for p in (0, 1)
    ]

    response = await client.get("/native/v1/metadata", params=[("topic", "nope"), ("topic", "t")])
    assert response.status == 200
    answer = await response.json()
    assert [t["topic"] for t in answer["topics"]] == ["nope", "t"]
    assert answer["topics"][0] == {"topic": "nope", "error_code": 40401}
    assert "nope" not in broker.topic_names()

    bad = await client.get("/native/v1/metadata", params={"topic": "a/b"})
    assert bad.status == 400 and (await bad.json())["error_code"] == 40001


# ---- three in-process brokers sharing one metadata store -------------------------------------------

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path / "cluster") as started:
        brokers = await started.start(3, {"num.partitions": "3"})
        await brokers[0].broker.create_topic("t", 6)
        await started.wait_for(lambda: started.converged("t"))
        yield started


def _leaders(cluster: InprocCluster, topic: str = "t") -> list[int]:
    return cluster.leaders(topic)


def _not_leading(cluster: InprocCluster, partition: int, topic: str = "t") -> RunningBroker:
    """A running broker that does not lead ``partition``."""
    leader = _leaders(cluster, topic)[partition]
    return next(r for i, r in cluster.brokers.items() if i != leader)


async def _values(running: RunningBroker, partition: int, topic: str = "t") -> list[bytes | None]:
    """The values in ``partition`` read from the broker's own log (it must lead the partition)."""
    local = running.broker.topic(topic).partition(partition)
    data = (await local.read(0, 1 << 20)).data
    return [record.value for _, record in iter_records(data)]


async def test_metadata_is_the_same_from_every_broker(cluster: InprocCluster) -> None:
    answers = []
    for running in cluster.brokers.values():
        response = await running.client.get("/native/v1/metadata")
        assert response.status == 200
        answers.append(await response.json())
    assert answers[0] == answers[1] == answers[2]
    answer = answers[0]
    urls = {i: r.url for i, r in cluster.brokers.items()}
    assert answer["brokers"] == [{"broker_id": i, "url": urls[i], "rack": None} for i in (1, 2, 3)]
    assert answer["controller_id"] in (1, 2, 3)
    (topic,) = [t for t in answer["topics"] if t["topic"] == "t"]
    assert [p["leader"] for p in topic["partitions"]] == _leaders(cluster)
    for p in topic["partitions"]:
        assert p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]]
    assert sorted({p["leader"] for p in topic["partitions"]}) == [1, 2, 3]


async def test_native_requests_to_a_non_leader_are_refused_naming_the_leader(cluster: InprocCluster) -> None:
    leader = _leaders(cluster)[0]
    other = _not_leading(cluster, 0)
    view = other.broker.cluster_view()
    epoch = view.partitions["t"][0].leader_epoch
    path = "/native/v1/topics/t/partitions/0"
    produced = await other.client.post(
        f"{path}/batches", data=batch(b"x"), headers={"Content-Type": BATCHES}, params={"acks": "1"}
    )
    assert produced.status == 503
    body = await produced.json()
    assert body["error_code"] == 50310
    assert (body["leader_id"], body["leader_url"], body["leader_epoch"]) == (
        leader,
        cluster.brokers[leader].url,
        epoch,
    )
    assert cluster.brokers[leader].broker.topic("t").partition(0).log_end_offset == 0
    for params in ({"offset": "0"},):
        fetched = await other.client.get(f"{path}/batches", params=params, headers={"Accept": BATCHES})
        assert fetched.status == 503 and (await fetched.json())["leader_id"] == leader
    offsets = await other.client.get(f"{path}/offsets")
    assert offsets.status == 503 and (await offsets.json())["error_code"] == 50310


async def test_a_rest_produce_through_a_non_leader_lands_on_each_leader(cluster: InprocCluster) -> None:
    receiver = cluster.brokers[1]
    leaders = _leaders(cluster)
    assert any(leader != 1 for leader in leaders)
    records = [{"value": base64.b64encode(f"v{p}".encode()).decode(), "partition": p} for p in range(6)]
    response = await receiver.client.post(
        "/topics/t", json={"records": records}, headers={"Content-Type": BINARY_V2, "Accept": V2}
    )
    assert response.status == 200, await response.text()
    offsets = (await response.json())["offsets"]
    assert [(o["partition"], o["offset"], o["error_code"]) for o in offsets] == [
        (p, 0, None) for p in range(6)
    ]
    for p, leader in enumerate(leaders):
        assert await _values(cluster.brokers[leader], p) == [f"v{p}".encode()]

    again = await receiver.client.post(
        "/topics/t/partitions/4",
        json={"records": [{"value": base64.b64encode(b"w").decode()}]},
        headers={"Content-Type": BINARY_V2, "Accept": V2},
    )
    assert [o["offset"] for o in (await again.json())["offsets"]] == [1]
    assert await _values(cluster.brokers[leaders[4]], 4) == [b"v4", b"w"]


async def test_rest_reads_through_a_non_leader_answer_the_leaders_data(cluster: InprocCluster) -> None:
    leader = cluster.brokers[_leaders(cluster)[2]]
    await leader.broker.topic("t").partition(2).append(batch(b"one", b"two"))
    other = _not_leading(cluster, 2)

    records = await other.client.get(
        "/topics/t/partitions/2/records", params={"offset": "0"}, headers={"Accept": BINARY_V2}
    )
    assert records.status == 200, await records.text()
    got = [(r["offset"], base64.b64decode(r["value"])) for r in await records.json()]
    assert got == [(0, b"one"), (1, b"two")]
    offsets = await other.client.get("/topics/t/partitions/2/offsets", headers={"Accept": V2})
    assert await offsets.json() == {"beginning_offset": 0, "end_offset": 2}
    late = await other.client.get(
        "/topics/t/partitions/2/records", params={"offset": "9"}, headers={"Accept": BINARY_V2}
    )
    assert late.status == 416 and (await late.json())["error_code"] == 41601


async def test_v3_describes_brokers_partitions_and_replicas(cluster: InprocCluster) -> None:
    running = cluster.brokers[2]
    client, broker = running.client, running.broker
    v3 = f"/v3/clusters/{broker.cluster_id}"
    view = broker.cluster_view()

    described = await (await client.get(v3)).json()
    assert described["controller"]["related"].endswith(f"/brokers/{view.controller_id}")
    listed = await (await client.get(f"{v3}/brokers")).json()
    assert [b["broker_id"] for b in listed["data"]] == [1, 2, 3]
    one = await (await client.get(f"{v3}/brokers/3")).json()
    url = cluster.brokers[3].url
    assert (one["kind"], one["host"], f"http://{one['host']}:{one['port']}") == (
        "KafkaBroker",
        "127.0.0.1",
        url,
    )
    assert (await client.get(f"{v3}/brokers/9")).status == 404

    leaders = _leaders(cluster)
    partitions = await (await client.get(f"{v3}/topics/t/partitions")).json()
    for p, entry in enumerate(partitions["data"]):
        assert entry["leader"]["related"].endswith(f"/topics/t/partitions/{p}/replicas/{leaders[p]}")
        assert entry["replicas"]["related"].endswith(f"/topics/t/partitions/{p}/replicas")

    created = await client.post(
        f"{v3}/topics", json={"topic_name": "r2", "partitions_count": 2, "replication_factor": 2}
    )
    assert created.status == 201, await created.text()
    assert (await created.json())["replication_factor"] == 2
    await cluster.wait_for(lambda: cluster.converged("r2"))
    state = broker.cluster_view().partitions["r2"][0]
    replicas = await (await client.get(f"{v3}/topics/r2/partitions/0/replicas")).json()
    assert [(r["broker_id"], r["is_leader"], r["is_in_sync"]) for r in replicas["data"]] == [
        (b, b == state.leader, b in state.isr) for b in state.replicas
    ]
    follower = next(b for b in state.replicas if b != state.leader)
    replica = await (await client.get(f"{v3}/topics/r2/partitions/0/replicas/{follower}")).json()
    assert (replica["kind"], replica["broker_id"], replica["is_leader"]) == ("KafkaReplica", follower, False)

    too_many = await client.post(f"{v3}/topics", json={"topic_name": "r4", "replication_factor": 4})
    assert too_many.status == 400 and (await too_many.json())["error_code"] == 40002


async def test_a_partition_whose_leader_is_gone_answers_retriable_503(cluster: InprocCluster) -> None:
    leaders = _leaders(cluster)
    gone = leaders[0]
    survivor = next(r for i, r in cluster.brokers.items() if i != gone)
    await cluster.stop_broker(gone)
    await cluster.wait_for(
        lambda: survivor.broker.cluster_view().partitions["t"][0].leader == -1,
        "partition 0 to lose its leader",
    )
    produced = await survivor.client.post(
        "/topics/t/partitions/0",
        json={"records": [{"value": base64.b64encode(b"x").decode()}]},
        headers={"Content-Type": BINARY_V2, "Accept": V2},
    )
    assert produced.status == 503
    assert (await produced.json())["error_code"] == 50311
    fetched = await survivor.client.get(
        "/topics/t/partitions/0/records", params={"offset": "0"}, headers={"Accept": BINARY_V2}
    )
    assert fetched.status == 503 and (await fetched.json())["error_code"] == 50311
