"""Replication inside the broker (design 0010), on in-process clusters of three real broker apps sharing one
LocalMetadataStore: every replica opens the partition, followers fetch from the leader over the replication
routes, ``acks=all`` answers once every in-sync replica has the batch, consumers read below the high
watermark only, ``min.insync.replicas`` refuses a small ISR, a restarted follower catches up, a deposed
leader's un-replicated records are truncated away (KIP-101), and no acknowledged ``acks=all`` record is lost
when the leader goes.

Waits are on conditions (fetchers' ``caught_up``, the caches' ISR), bounded by :data:`DEADLINE_S`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.cluster.inproc import DEADLINE_S, InprocCluster
from tierlog.service.topics.partition import Partition
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log.checkpoint import read_offset_checkpoint
from tierlog.tiering.log.naming import HIGH_WATERMARK_FILE

BATCHES = "application/vnd.tierlog.batches"
TOPIC = "r"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path) as running:
        yield running


def batch(*values: bytes) -> bytes:
    return build_batch([Record(None, v) for v in values])


async def produce(
    running: RunningBroker, *values: bytes, acks: str = "all", topic: str = TOPIC
) -> tuple[int, dict[str, Any]]:
    resp = await running.client.post(
        f"/native/v1/topics/{topic}/partitions/0/batches",
        params={"acks": acks, "timeout_ms": "20000"},
        data=batch(*values),
        headers={"Content-Type": BATCHES, "Accept": "application/json"},
    )
    return resp.status, await resp.json()


def state(cluster: InprocCluster, topic: str = TOPIC) -> tuple[int, int, tuple[int, ...]]:
    """(leader, leader_epoch, isr) of partition 0 as the first running broker's cache shows it."""
    node = next(iter(cluster.brokers.values())).broker.cluster
    assert node is not None
    found = node.cache.partition_state(topic, 0)
    assert found is not None
    return found.leader, found.leader_epoch, found.isr


def local(running: RunningBroker, topic: str = TOPIC) -> Partition:
    found = running.broker.local_topics[topic].local(0)
    assert found is not None
    return found


def leads(cluster: InprocCluster, broker_id: int, topic: str = TOPIC) -> bool:
    """The cache says ``broker_id`` leads and that broker leads at the current epoch."""
    leader, epoch, _ = state(cluster, topic)
    running = cluster.brokers.get(broker_id)
    if leader != broker_id or running is None:
        return False
    topic_obj = running.broker.local_topics.get(topic)
    partition = None if topic_obj is None else topic_obj.local(0)
    return partition is not None and partition.role == "leader" and partition.leader_epoch == epoch


async def caught_up(running: RunningBroker, topic: str = TOPIC) -> None:
    """Wait until the broker's fetcher for partition 0 has fetched to the leader's end once."""
    manager = running.broker.replication
    assert manager is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while (fetcher := manager.fetcher(topic, 0)) is None:
        assert loop.time() < deadline, "no fetcher started"
        await asyncio.sleep(0.02)
    await asyncio.wait_for(fetcher.caught_up.wait(), DEADLINE_S)


def batches_of(data: bytes) -> list[tuple[int, int, bytes]]:
    """``(base offset, last offset, bytes)`` of every v2 batch in ``data``."""
    found = []
    position = 0
    while position + 61 <= len(data):
        base = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True) + 12
        last_delta = int.from_bytes(data[position + 23 : position + 27], "big", signed=True)
        found.append((base, base + last_delta, data[position : position + length]))
        position += length
    return found


async def log_bytes(partition: Partition) -> bytes:
    """Every batch of the local log, from its start to its end offset, as stored."""

    def read_all() -> bytes:
        engine = partition.log
        out = bytearray()
        offset, end = int(engine.log_start_offset), int(engine.log_end_offset)
        while offset < end:
            data = engine.read(offset, 1 << 24).data
            batches = batches_of(data)
            assert batches, f"no batch at {offset} below the end {end}"
            for _, last, raw in batches:
                out += raw
                offset = last + 1
        return bytes(out)

    return await asyncio.to_thread(read_all)


async def replicated_topic(cluster: InprocCluster, configs: dict[str, str] | None = None) -> int:
    """Create ``r`` (1 partition, RF 3) and wait until its ISR is all three and each replica has its role;
    returns the leader."""
    first = cluster.brokers[1]
    await first.broker.create_topic(TOPIC, 1, configs or {}, replication_factor=3)
    await cluster.wait_for(lambda: cluster.converged(TOPIC) and len(state(cluster)[2]) == 3, "ISR of 3")
    leader = state(cluster)[0]
    await cluster.wait_for(lambda: leads(cluster, leader), "the leader to lead")
    await cluster.wait_for(lambda: all(fetching(cluster.brokers[f]) for f in followers(cluster, leader)))
    return leader


def fetching(running: RunningBroker, topic: str = TOPIC) -> bool:
    """The broker follows partition 0 of ``topic`` (its fetcher runs)."""
    manager = running.broker.replication
    return manager is not None and manager.fetcher(topic, 0) is not None


def followers(cluster: InprocCluster, leader: int) -> list[int]:
    return [b for b in sorted(cluster.brokers) if b != leader]


# ---- tests -------------------------------------------------------------------------------------------------


async def test_acks_all_answers_after_every_replica_has_the_batch(cluster: InprocCluster) -> None:
    await cluster.start(3)
    leader = await replicated_topic(cluster)
    status, body = await produce(cluster.brokers[leader], b"a", b"b", b"c")
    assert status == 200, body
    assert body["last_offset"] == 2
    # answered only once the HW passed the batch: every in-sync follower had fetched past it
    for follower in followers(cluster, leader):
        assert local(cluster.brokers[follower]).log_end_offset >= 3
        assert local(cluster.brokers[follower]).role == "follower"
    for follower in followers(cluster, leader):
        await caught_up(cluster.brokers[follower])
    expected = await log_bytes(local(cluster.brokers[leader]))
    assert [b[0] for b in batches_of(expected)] == [0]
    for follower in followers(cluster, leader):
        assert await log_bytes(local(cluster.brokers[follower])) == expected  # byte-identical, epoch stamped
    # the stamped leader epoch (bytes 12..15) is the leader's
    assert int.from_bytes(expected[12:16], "big") == state(cluster)[1]


async def test_a_follower_refuses_produce_naming_the_leader(cluster: InprocCluster) -> None:
    await cluster.start(3)
    leader = await replicated_topic(cluster)
    follower = followers(cluster, leader)[0]
    status, body = await produce(cluster.brokers[follower], b"x")
    assert status == 503
    assert body["error_code"] == 50310
    assert str(leader) in body["message"]


async def test_consumers_read_below_the_high_watermark_only(cluster: InprocCluster) -> None:
    await cluster.start(3)
    leader = await replicated_topic(cluster)
    running = cluster.brokers[leader]
    held = followers(cluster, leader)[0]
    manager = cluster.brokers[held].broker.replication
    assert manager is not None
    assert await manager.stop_fetching(TOPIC, 0)  # the ISR still lists it: the HW cannot pass its LEO
    status, body = await produce(running, b"uncommitted", acks="1")
    assert status == 200, body
    partition = local(running)
    assert partition.log_end_offset == 1
    assert partition.high_watermark == 0
    # a consumer's fetch at 0 finds nothing committed, and its long poll waits for the HW
    empty = await partition.read(0, 1 << 20)
    assert empty.data == b""
    resp = await running.client.get(f"/native/v1/topics/{TOPIC}/partitions/0/offsets?timestamp=-1")
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["offset"] == 0  # latest = the HW, not the LEO
    poll = asyncio.ensure_future(partition.read(0, 1 << 20, max_wait_ms=int(DEADLINE_S * 1000)))
    await asyncio.sleep(0)
    assert not poll.done()
    node = cluster.brokers[held].broker.cluster
    assert node is not None
    await node.reconcile()  # the next apply starts a new fetcher
    result = await asyncio.wait_for(poll, DEADLINE_S)
    assert [b[0] for b in batches_of(result.data)] == [0]
    assert partition.high_watermark == 1


async def test_min_insync_replicas_refuses_acks_all_with_a_small_isr(cluster: InprocCluster) -> None:
    await cluster.start(3)
    leader = await replicated_topic(cluster, {"min.insync.replicas": "2"})
    for follower in followers(cluster, leader):
        await cluster.stop_broker(follower)
    await cluster.wait_for(lambda: state(cluster)[2] == (leader,), "the ISR to shrink to the leader")
    running = cluster.brokers[leader]

    def alone() -> bool:
        leader_state = local(running).leader
        return leader_state is not None and leader_state.isr == (leader,)

    await cluster.wait_for(alone, "the leader to see the ISR of itself")
    metrics = await (await running.client.get("/metrics")).text()
    assert 'tierlog_under_replicated{partition="0",topic="r"} 1' in metrics
    status, body = await produce(running, b"refused")
    assert status == 503, body
    assert body["error_code"] == 50313
    assert local(running).log_end_offset == 0  # nothing appended
    status, body = await produce(running, b"acks-1", acks="1")
    assert status == 200, body


async def test_a_restarted_follower_catches_up_and_rejoins_the_isr(cluster: InprocCluster) -> None:
    await cluster.start(3)
    leader = await replicated_topic(cluster)
    running = cluster.brokers[leader]
    follower = followers(cluster, leader)[0]
    status, _ = await produce(running, b"before")
    assert status == 200
    await cluster.stop_broker(follower)
    await cluster.wait_for(lambda: follower not in state(cluster)[2], "the stopped follower to leave the ISR")
    for i in range(5):
        status, body = await produce(running, f"while-down-{i}".encode())
        assert status == 200, body
    restarted = await cluster.start_broker(follower)
    await caught_up(restarted)
    await cluster.wait_for(lambda: follower in state(cluster)[2], "the follower to rejoin the ISR")
    await cluster.wait_for(lambda: local(restarted).log_end_offset == local(running).log_end_offset)
    assert await log_bytes(local(restarted)) == await log_bytes(local(running))


async def test_a_deposed_leader_truncates_its_unreplicated_records(cluster: InprocCluster) -> None:
    await cluster.start(3)
    old = await replicated_topic(cluster)
    status, _ = await produce(cluster.brokers[old], b"committed")
    assert status == 200
    for follower in followers(cluster, old):
        manager = cluster.brokers[follower].broker.replication
        assert manager is not None
        await manager.stop_fetching(TOPIC, 0)
    status, _ = await produce(cluster.brokers[old], b"lost-1", b"lost-2", acks="1")  # only on the old leader
    assert status == 200
    assert local(cluster.brokers[old]).log_end_offset == 3
    _, old_epoch, _ = state(cluster)
    await cluster.stop_broker(old)
    await cluster.wait_for(
        lambda: state(cluster)[0] not in (old, -1) and state(cluster)[1] > old_epoch, "a new leader"
    )
    new = state(cluster)[0]
    await cluster.wait_for(lambda: leads(cluster, new), "the new leader to lead")
    status, body = await produce(cluster.brokers[new], b"after")
    assert status == 200, body
    assert body["base_offset"] == 1  # the new leader never had the un-replicated records
    returned = await cluster.start_broker(old)
    await cluster.wait_for(
        lambda: local(returned).role == "follower" or leads(cluster, old), "the old leader to get a role"
    )
    current = state(cluster)[0]
    await cluster.wait_for(
        lambda: local(returned).log_end_offset == local(cluster.brokers[current]).log_end_offset == 2,
        "the returned broker to converge",
    )
    expected = await log_bytes(local(cluster.brokers[new]))
    assert await log_bytes(local(returned)) == expected
    assert [b[0] for b in batches_of(expected)] == [0, 1]
    assert b"lost-1" not in expected


async def test_no_acknowledged_record_is_lost_when_the_leader_goes(cluster: InprocCluster) -> None:
    await cluster.start(3)
    old = await replicated_topic(cluster)
    acknowledged: dict[int, bytes] = {}
    for i in range(20):
        value = f"record-{i}".encode()
        status, body = await produce(cluster.brokers[old], value)
        assert status == 200, body
        acknowledged[body["base_offset"]] = value
    _, old_epoch, _ = state(cluster)
    await cluster.stop_broker(old)
    await cluster.wait_for(lambda: state(cluster)[1] > old_epoch and state(cluster)[0] != -1, "a new leader")
    new = state(cluster)[0]
    await cluster.wait_for(lambda: leads(cluster, new), "the new leader to lead")
    partition = local(cluster.brokers[new])
    assert partition.high_watermark >= 20 or partition.log_end_offset >= 20
    stored = await log_bytes(partition)
    offsets = [b[0] for b in batches_of(stored)]
    assert offsets[:20] == sorted(acknowledged)
    for (base, _, raw), (offset, value) in zip(
        batches_of(stored), sorted(acknowledged.items()), strict=False
    ):
        assert base == offset
        assert value in raw


def hw_is(partition: Partition, offset: int) -> bool:
    return partition.high_watermark == offset


async def test_replicas_checkpoint_their_high_watermark_periodically(cluster: InprocCluster) -> None:
    await cluster.start(3, {"replica.high.watermark.checkpoint.interval.ms": "100"})
    leader = await replicated_topic(cluster)
    status, _ = await produce(cluster.brokers[leader], b"a", b"b")
    assert status == 200
    for broker_id, running in cluster.brokers.items():
        partition = local(running)
        if broker_id != leader:
            await caught_up(running)
            await cluster.wait_for(functools.partial(hw_is, partition, 2), "the follower's HW")
        maintenance = running.app[MAINTENANCE]
        await maintenance.wait_for_pass("checkpoint", maintenance.passes["checkpoint"] + 2)
        path = partition.path / HIGH_WATERMARK_FILE
        assert await asyncio.to_thread(read_offset_checkpoint, path) == 2


async def test_a_follower_ahead_of_the_new_leader_truncates_its_extra_records(cluster: InprocCluster) -> None:
    await cluster.start(3)
    old = await replicated_topic(cluster)
    node = cluster.brokers[old].broker.cluster
    assert node is not None
    assignment = node.cache.topic(TOPIC)
    assert assignment is not None
    replicas = assignment.replicas[0]
    assert replicas[0] == old
    next_leader, ahead = replicas[1], replicas[2]  # the controller elects the first live ISR member in order
    status, _ = await produce(cluster.brokers[old], b"committed")
    assert status == 200
    held = cluster.brokers[next_leader].broker.replication
    assert held is not None
    assert await held.stop_fetching(TOPIC, 0)
    status, _ = await produce(cluster.brokers[old], b"extra", acks="1")
    assert status == 200
    ahead_partition = local(cluster.brokers[ahead])
    await cluster.wait_for(
        lambda: ahead_partition.log_end_offset == 2, "the follower to fetch the extra record"
    )
    assert local(cluster.brokers[next_leader]).log_end_offset == 1
    _, old_epoch, _ = state(cluster)
    await cluster.stop_broker(old)
    await cluster.wait_for(lambda: state(cluster)[1] > old_epoch and state(cluster)[0] != -1, "a new leader")
    assert state(cluster)[0] == next_leader
    await cluster.wait_for(lambda: leads(cluster, next_leader), "the new leader to lead")
    status, body = await produce(cluster.brokers[next_leader], b"after")  # acks=all: the follower has it
    assert status == 200, body
    assert body["base_offset"] == 1
    expected = await log_bytes(local(cluster.brokers[next_leader]))
    assert ahead_partition.log_end_offset == 2
    assert await log_bytes(ahead_partition) == expected  # "extra" at offset 1 was truncated away
    assert b"extra" not in expected


async def test_every_replica_of_a_tiered_topic_attaches_the_remote_tier_and_only_the_leader_uploads(
    tmp_path: Path,
) -> None:
    defaults = {"remote.uri": (tmp_path / "remote").as_uri(), "remote.upload.interval.ms": "100"}
    async with InprocCluster(tmp_path, defaults=defaults) as cluster:
        await cluster.start(3)
        old = await replicated_topic(cluster, {"remote.storage.enable": "true", "segment.bytes": "400"})
        for i in range(6):
            status, body = await produce(cluster.brokers[old], f"tiered-{i}".encode() * 20)
            assert status == 200, body

        def roles_applied(leader: int) -> bool:
            for broker_id, running in cluster.brokers.items():
                remote = local(running).remote
                if remote is None or remote.remote_log.leading != (broker_id == leader):
                    return False
            return True

        await cluster.wait_for(
            lambda: roles_applied(old), "the remote roles: the leader leads, others follow"
        )

        def uploaded() -> bool:
            remote = local(cluster.brokers[old]).remote
            return remote is not None and (remote.remote_log.remote_next_offset or 0) > 0

        await cluster.wait_for(uploaded, "the leader to upload a segment")
        _, old_epoch, _ = state(cluster)
        await cluster.stop_broker(old)
        await cluster.wait_for(
            lambda: state(cluster)[1] > old_epoch and state(cluster)[0] != -1, "a new leader"
        )
        new = state(cluster)[0]
        await cluster.wait_for(lambda: leads(cluster, new), "the new leader to lead")
        await cluster.wait_for(lambda: roles_applied(new), "the new leader to lead the remote tier")
        first = await local(cluster.brokers[new]).read(0, 1 << 20)
        assert batches_of(first.data)[0][0] == 0
        assert b"tiered-0" in first.data
