"""A role change waits for the leader appends already past the leader check (Kafka's ``leaderIsrUpdateLock``).

The partition's log I/O executor is held by a gate, so an append is caught between its leader check and its
write. Without the drain, the write would land after the replica started following (or leading a newer
epoch), stamping a batch of the old epoch at an offset the new leader may have filled differently.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.unit.tiering.log.support import NOW
from tierlog.service.metrics import Metrics
from tierlog.service.replication.leader import LeaderState
from tierlog.service.topics.partition import Partition
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.wire.errors import LeaderNotAvailableError, NotLeaderOrFollowerError

pytestmark = pytest.mark.integration


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(1, thread_name_prefix="test-log-io")
    yield pool
    pool.shutdown(wait=True)


def leading_partition(tmp_path: Path, executor: ThreadPoolExecutor, epoch: int) -> Partition:
    clock = ManualClock(NOW)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), clock=clock, topic="t")
    spawned: list[Any] = []
    partition = Partition(
        "t", 0, log, tmp_path / "t-0", Metrics(), lambda coro, _name: spawned.append(coro), LogConfig(),
        executor=executor,
    )  # fmt: skip
    state = LeaderState(
        topic="t", partition=0, broker_id=1, replicas=(1, 2), isr=(1,), leader_epoch=epoch,
        partition_epoch=0, leader_epoch_start_offset=0, log_end_offset=lambda: partition.log_end_offset,
        high_watermark=0, clock=clock, replica_lag_time_max_ms=30_000,
    )  # fmt: skip
    partition.lead(state, epoch)
    return partition


def batch(value: bytes) -> bytes:
    return build_batch([Record(None, value, timestamp=NOW)], now_ms=NOW)


async def hold(executor: ThreadPoolExecutor) -> threading.Event:
    """Occupy the executor's only thread until the returned event is set."""
    gate = threading.Event()
    started = threading.Event()

    def blocked() -> None:
        started.set()
        gate.wait(30)

    asyncio.get_running_loop().run_in_executor(executor, blocked)
    await asyncio.to_thread(started.wait, 30)
    return gate


async def test_follow_waits_for_an_append_past_its_leader_check(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    partition = leading_partition(tmp_path, executor, epoch=3)
    gate = await hold(executor)
    append = asyncio.create_task(partition.append(batch(b"late"), acks=1))
    await asyncio.sleep(0)  # let it pass the leader check and queue its write behind the gate
    partition.follow(4, NotLeaderOrFollowerError("broker 2 leads now"))
    drained = asyncio.create_task(partition.drain_leader_appends())
    await asyncio.sleep(0)
    assert not drained.done()  # the write has not happened: the role change must not go on yet
    gate.set()
    await drained
    assert partition.log_end_offset == 1  # what a fetcher started now sees and truncates from
    info = await append
    assert info.leader_epoch == 3
    with pytest.raises(NotLeaderOrFollowerError):
        await partition.append(batch(b"refused"), acks=1)
    await partition.close()


async def test_a_newer_epoch_starts_after_the_older_epochs_appends(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    partition = leading_partition(tmp_path, executor, epoch=3)
    gate = await hold(executor)
    append = asyncio.create_task(partition.append(batch(b"old epoch"), acks=1))
    await asyncio.sleep(0)
    partition.follow(3, LeaderNotAvailableError("moving to leader epoch 5"))
    drained = asyncio.create_task(partition.drain_leader_appends())
    await asyncio.sleep(0)
    assert not drained.done()  # the new epoch must not be assigned while an old-epoch write is pending
    gate.set()
    await drained
    await append
    start = await partition.assign_leader_epoch(5)
    assert start == 1  # the new epoch begins after the old epoch's batch, never before it
    data = (await asyncio.to_thread(partition.log.read, 0, 1 << 20)).data
    assert [header.partition_leader_epoch for _, header in iter_batches(data, verify=True)] == [3]
    assert [(e.epoch, e.start_offset) for e in partition.log.epochs.entries()] == [(3, 0), (5, 1)]
    await partition.close()
