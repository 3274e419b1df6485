"""The replication routes on real brokers (an in-process cluster of three apps sharing one
LocalMetadataStore), called directly over HTTP and through :class:`ReplicationClient`: what the leader
serves a follower, how it fences a stale or unknown epoch, a non-replica and a non-leader, the out-of-range
answers, the epoch end offsets, the controller's alter-partition, and the produce answer's leader epoch. A
broker running alone answers every replication route 404.

Waits are on conditions (the caches, the fetchers' ``caught_up``) bounded by :data:`DEADLINE_S`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import Brokers, RunningBroker
from tests.integration.cluster.inproc import DEADLINE_S, InprocCluster
from tierlog.service.cluster.model import AlterPartitionRequest, PartitionState
from tierlog.service.cluster.peers import PeerClient
from tierlog.service.replication.client import ReplicationClient
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import decode_header
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    NotControllerError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    UnavailableError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
)

BATCHES = "application/vnd.tierlog.batches"
TOPIC = "rt"
REPLICATION = f"/native/v1/replication/topics/{TOPIC}/partitions/0"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path) as running:
        yield running


@pytest.fixture
async def peers() -> AsyncIterator[PeerClient]:
    """A peer client as a broker's app owns one (opened here, closed after the test)."""
    started = PeerClient(lambda: 99, connect_ms=10_000, request_ms=10_000)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
async def client(peers: PeerClient) -> AsyncIterator[ReplicationClient]:
    peer = ReplicationClient(peers, broker_id=99, timeout_s=10)
    try:
        yield peer
    finally:
        await peer.close()


def partition_state(cluster: InprocCluster) -> PartitionState:
    node = next(iter(cluster.brokers.values())).broker.cluster
    assert node is not None
    found = node.cache.partition_state(TOPIC, 0)
    assert found is not None
    return found


def replicas(cluster: InprocCluster) -> tuple[int, ...]:
    node = next(iter(cluster.brokers.values())).broker.cluster
    assert node is not None
    assignment = node.cache.topic(TOPIC)
    assert assignment is not None
    return assignment.replicas[0]


async def two_replica_topic(cluster: InprocCluster) -> tuple[int, int, int]:
    """Three brokers, topic ``rt`` with one partition on two of them, its ISR full: (leader, follower,
    outsider)."""
    await cluster.start(3)
    await cluster.brokers[1].broker.create_topic(TOPIC, 1, {}, replication_factor=2)
    await cluster.wait_for(
        lambda: cluster.converged(TOPIC) and len(partition_state(cluster).isr) == 2, "an ISR of two"
    )
    leader = partition_state(cluster).leader
    (follower,) = [b for b in replicas(cluster) if b != leader]
    (outsider,) = [b for b in cluster.brokers if b not in replicas(cluster)]
    return leader, follower, outsider


async def produce(running: RunningBroker, *values: bytes) -> dict[str, Any]:
    resp = await running.client.post(
        f"/native/v1/topics/{TOPIC}/partitions/0/batches",
        params={"acks": "all", "timeout_ms": "20000"},
        data=build_batch([Record(None, v) for v in values]),
        headers={"Content-Type": BATCHES},
    )
    assert resp.status == 200, await resp.text()
    answer: dict[str, Any] = await resp.json()
    return answer


async def caught_up(running: RunningBroker) -> None:
    manager = running.broker.replication
    assert manager is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while (fetcher := manager.fetcher(TOPIC, 0)) is None:
        assert loop.time() < deadline, "no fetcher started"
        await asyncio.sleep(0.02)
    await asyncio.wait_for(fetcher.caught_up.wait(), DEADLINE_S)


async def error(resp: Any) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = await resp.json()
    return resp.status, body


def fetch_params(replica_id: int, offset: int, leader_epoch: int) -> dict[str, str]:
    return {"replica_id": str(replica_id), "offset": str(offset), "leader_epoch": str(leader_epoch)}


async def test_leader_serves_a_follower_and_fences_everyone_else(cluster: InprocCluster) -> None:
    leader, follower, outsider = await two_replica_topic(cluster)
    epoch = partition_state(cluster).leader_epoch
    lead, other = cluster.brokers[leader], cluster.brokers[follower]
    first = await produce(lead, b"a", b"b")
    second = await produce(lead, b"c", b"d")
    assert (first["broker_id"], first["leader_epoch"]) == (leader, epoch)
    assert (second["base_offset"], second["leader_epoch"]) == (2, epoch)
    await caught_up(other)

    resp = await lead.client.get(f"{REPLICATION}/batches", params=fetch_params(follower, 0, epoch))
    assert resp.status == 200
    assert resp.headers["Content-Type"] == BATCHES
    assert resp.headers["Tierlog-High-Watermark"] == "4"
    assert resp.headers["Tierlog-Log-End-Offset"] == "4"
    assert resp.headers["Tierlog-Log-Start-Offset"] == "0"
    assert resp.headers["Tierlog-Local-Log-Start-Offset"] == "0"
    assert resp.headers["Tierlog-Leader-Epoch"] == str(epoch)
    body = await resp.read()
    first_header = decode_header(body, 0)
    second_header = decode_header(body, first_header.size)
    assert (first_header.base_offset, second_header.base_offset) == (0, 2)
    assert first_header.partition_leader_epoch == second_header.partition_leader_epoch == epoch
    assert first_header.size + second_header.size == len(body)

    # the follower's own copy of the partition is not served to a replica: 50310 names the leader
    status, answer = await error(
        await other.client.get(f"{REPLICATION}/batches", params=fetch_params(leader, 0, epoch))
    )
    assert (status, answer["error_code"], answer["leader_id"]) == (503, 50310, leader)

    status, answer = await error(
        await lead.client.get(f"{REPLICATION}/batches", params=fetch_params(follower, 0, epoch + 1))
    )
    assert (status, answer["error_code"]) == (503, 50316)

    status, answer = await error(
        await lead.client.get(f"{REPLICATION}/batches", params=fetch_params(outsider, 0, epoch))
    )
    assert (status, answer["error_code"]) == (404, 40402)

    status, answer = await error(
        await lead.client.get(f"{REPLICATION}/batches", params=fetch_params(follower, 9, epoch))
    )
    assert (status, answer["error_code"], answer["log_end_offset"]) == (416, 41601, 4)

    resp = await lead.client.get(
        f"{REPLICATION}/epochs/{epoch}", params={"replica_id": str(follower), "leader_epoch": str(epoch)}
    )
    assert resp.status == 200
    assert await resp.json() == {"leader_epoch": epoch, "end_offset": 4}
    status, answer = await error(
        await other.client.get(
            f"{REPLICATION}/epochs/{epoch}", params={"replica_id": str(leader), "leader_epoch": str(epoch)}
        )
    )
    assert (status, answer["error_code"]) == (503, 50310)


async def test_replication_client_against_a_cluster(
    cluster: InprocCluster, peers: PeerClient, client: ReplicationClient
) -> None:
    leader, follower, _ = await two_replica_topic(cluster)
    state = partition_state(cluster)
    lead, other = cluster.brokers[leader], cluster.brokers[follower]
    await produce(lead, b"x")
    await caught_up(other)
    as_follower = ReplicationClient(peers, broker_id=follower, timeout_s=10)
    try:
        fetched = await as_follower.fetch(
            lead.url, TOPIC, 0, offset=1, leader_epoch=state.leader_epoch, max_bytes=1 << 20, max_wait_ms=0
        )
        assert (fetched.data, fetched.log_end_offset, fetched.high_watermark) == (b"", 1, 1)
        assert fetched.leader_epoch == state.leader_epoch
        assert await as_follower.epoch_end_offset(
            lead.url, TOPIC, 0, leader_epoch=state.leader_epoch, epoch=state.leader_epoch
        ) == (state.leader_epoch, 1)
        with pytest.raises(UnknownLeaderEpochError):
            await as_follower.epoch_end_offset(
                lead.url, TOPIC, 0, leader_epoch=state.leader_epoch + 1, epoch=state.leader_epoch
            )
        with pytest.raises(NotLeaderOrFollowerError) as not_leader:
            await as_follower.fetch(
                other.url, TOPIC, 0, offset=1, leader_epoch=state.leader_epoch, max_bytes=1024, max_wait_ms=0
            )
        assert not_leader.value.leader_id == leader
        with pytest.raises(OffsetOutOfRangeError) as out_of_range:
            await as_follower.fetch(
                lead.url, TOPIC, 0, offset=5, leader_epoch=state.leader_epoch, max_bytes=1024, max_wait_ms=0
            )
        assert out_of_range.value.log_end_offset == 1
    finally:
        await as_follower.close()
    with pytest.raises(UnavailableError, match="is closing"):  # closed for good: no new session is opened
        await as_follower.fetch(
            lead.url, TOPIC, 0, offset=0, leader_epoch=state.leader_epoch, max_bytes=1024, max_wait_ms=0
        )
    with pytest.raises(UnknownPartitionError):  # broker 99 is no replica
        await client.fetch(
            lead.url, TOPIC, 0, offset=0, leader_epoch=state.leader_epoch, max_bytes=1024, max_wait_ms=0
        )

    # alter-partition: only the active controller decides; an unchanged ISR answers the current state
    node = lead.broker.cluster
    assert node is not None
    controller_id = node.cache.view().controller_id
    controller = cluster.brokers[controller_id]
    elsewhere = next(r for b, r in cluster.brokers.items() if b != controller_id)
    same = AlterPartitionRequest(
        TOPIC, 0, leader, state.leader_epoch, state.partition_epoch, tuple(state.isr)
    )
    with pytest.raises(NotControllerError):
        await client.alter_partition(elsewhere.url, same)
    assert await client.alter_partition(controller.url, same) == state
    stale = AlterPartitionRequest(TOPIC, 0, leader, state.leader_epoch, state.partition_epoch + 5, (leader,))
    resp = await controller.client.post(
        "/native/v1/replication/alter-partition",
        data=stale.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert (await error(resp))[1]["error_code"] == 40904
    resp = await controller.client.post(
        "/native/v1/replication/alter-partition", data=b"{}", headers={"Content-Type": "application/json"}
    )
    assert (await error(resp))[0] == 400

    # the leader goes: its successor fences a follower still on the old epoch, and the old URL is unreachable
    await cluster.stop_broker(leader)
    await cluster.wait_for(
        lambda: partition_state(cluster).leader == follower and cluster.converged(TOPIC),
        "the follower to lead",
    )
    with pytest.raises(FencedLeaderEpochError):
        await client.epoch_end_offset(
            other.url, TOPIC, 0, leader_epoch=state.leader_epoch, epoch=state.leader_epoch
        )
    with pytest.raises(UnavailableError) as unreachable:
        await client.fetch(lead.url, TOPIC, 0, offset=0, leader_epoch=0, max_bytes=1024, max_wait_ms=0)
    assert lead.url in unreachable.value.message


async def test_a_single_broker_is_a_cluster_of_one_for_the_replication_routes(brokers: Brokers) -> None:
    running = await brokers.start()
    await running.broker.create_topic(TOPIC, 1)
    # no broker 1 in this cluster: its replica fetch is refused by the leader, not by a missing route
    resp = await running.client.get(f"{REPLICATION}/batches", params=fetch_params(1, 0, 0))
    status, answer = await error(resp)
    assert answer["error_code"] != 40400, (status, answer)
    # the produce answer of a cluster of one: this broker, the partition's current leader epoch
    resp = await running.client.post(
        f"/native/v1/topics/{TOPIC}/partitions/0/batches",
        params={"acks": "all", "timeout_ms": "1"},
        data=build_batch([Record(None, b"v")]),
        headers={"Content-Type": BATCHES},
    )
    answer = await resp.json()
    state = running.broker.cluster.cache.partition_state(TOPIC, 0)
    assert state is not None
    assert (resp.status, answer["leader_epoch"], answer["broker_id"]) == (
        200,
        state.leader_epoch,
        running.broker.broker_id,
    )


async def test_a_tiered_leader_sends_a_follower_below_its_local_log_to_the_remote_tier(
    tmp_path: Path, peers: PeerClient
) -> None:
    """A follower that was away while the leader uploaded and deleted local segments catches up; a replica
    fetch below the leader's local log start answers 41602 with that start (KIP-405), and the whole log's
    start (the remote tier's) in the range; a fetch at the local start is served."""
    defaults = {
        "remote.uri": (tmp_path / "remote").as_uri(),
        "remote.upload.interval.ms": "50",
        "log.retention.check.interval.ms": "50",
    }
    configs = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "4096"}
    async with InprocCluster(tmp_path, defaults=defaults) as cluster:
        await cluster.start(2)
        await cluster.brokers[1].broker.create_topic(TOPIC, 1, configs, replication_factor=2)
        await cluster.wait_for(
            lambda: cluster.converged(TOPIC) and len(partition_state(cluster).isr) == 2, "an ISR of two"
        )
        leader = partition_state(cluster).leader
        follower = 3 - leader
        epoch = partition_state(cluster).leader_epoch
        await cluster.stop_broker(follower)
        await cluster.wait_for(
            lambda: partition_state(cluster).isr == (leader,), "the ISR to drop the follower"
        )
        lead = cluster.brokers[leader]
        for n in range(60):
            await produce(lead, n.to_bytes(2, "big") * 40, n.to_bytes(2, "big") * 40)
        partition = lead.broker.topic(TOPIC).partition(0)
        await cluster.wait_for(lambda: partition.local_log_start_offset > 0, "local retention after upload")

        back = await cluster.start_broker(follower)
        await caught_up(back)
        copy = back.broker.local_topics[TOPIC].local(0)
        assert copy is not None
        assert copy.log_end_offset == partition.log_end_offset == 120
        await cluster.wait_for(
            lambda: partition_state(cluster).isr == (leader, follower), "the ISR to grow back"
        )

        peer = ReplicationClient(peers, broker_id=follower, timeout_s=10)
        try:
            with pytest.raises(OffsetMovedToTieredStorageError) as moved:
                await peer.fetch(
                    lead.url, TOPIC, 0, offset=0, leader_epoch=epoch, max_bytes=1 << 20, max_wait_ms=0
                )
            local_start = moved.value.local_log_start_offset
            assert 0 < local_start <= partition.local_log_start_offset
            assert (moved.value.log_start_offset, moved.value.log_end_offset) == (0, 120)
            served = await peer.fetch(
                lead.url,
                TOPIC,
                0,
                offset=partition.local_log_start_offset,
                leader_epoch=epoch,
                max_bytes=1 << 20,
                max_wait_ms=0,
            )
            assert decode_header(served.data, 0).base_offset == partition.local_log_start_offset
            assert (served.log_start_offset, served.log_end_offset) == (0, 120)
            assert served.local_log_start_offset == partition.local_log_start_offset
        finally:
            await peer.close()
