"""The producer accumulator: batching by size and linger, draining, retry order, expiry, memory budget."""

from __future__ import annotations

import asyncio

import pytest

from tierlog.client.accumulator import PendingRecord, RecordAccumulator, record_size
from tierlog.client.errors import BufferExhaustedError, ClientClosedError
from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.tiering.codec.records import Record

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **overrides: int) -> RecordAccumulator:
    options = {
        "batch_size": 100,
        "linger_ms": 50,
        "buffer_memory": 10_000,
        "delivery_timeout_ms": 1000,
        **overrides,
    }
    return RecordAccumulator(clock=clock, **options)


def pending(value: bytes = b"v" * 10) -> PendingRecord:
    record = Record(None, value, (), 1)
    return PendingRecord(record, record_size(record), asyncio.get_running_loop().create_future())


def future_of(record: PendingRecord) -> asyncio.Future[RecordMetadata]:
    """The asyncio future the test gave ``record``."""
    assert isinstance(record.future, asyncio.Future)
    return record.future


async def test_a_batch_is_ready_when_full_or_lingered() -> None:
    clock = Clock()
    acc = make(clock)
    acc.append(TP, pending())
    ready, delay = acc.ready(clock(), set())
    assert ready == [] and delay == pytest.approx(0.05)
    clock.now += 0.05
    assert acc.ready(clock(), set())[0] == [TP]
    for _ in range(4):
        acc.append(OTHER, pending())
    assert OTHER in acc.ready(clock(), set())[0]
    assert acc.ready(clock(), {TP, OTHER})[0] == []


async def test_flush_and_close_ignore_linger() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=60_000)
    acc.append(TP, pending())
    assert acc.ready(clock(), set())[0] == []
    acc.flushing += 1
    assert acc.ready(clock(), set())[0] == [TP]


async def test_records_fill_batches_up_to_batch_size() -> None:
    clock = Clock()
    acc = make(clock)
    for _ in range(7):
        acc.append(TP, pending())
    batches = acc.drain(TP, max_request_size=10_000)
    assert [len(b.records) for b in batches] == [3, 3, 1]
    assert all(b.size <= 100 for b in batches)
    assert acc.empty()


async def test_drain_stops_at_the_request_size_but_takes_at_least_one_batch() -> None:
    clock = Clock()
    acc = make(clock)
    for _ in range(9):
        acc.append(TP, pending())
    assert len(acc.drain(TP, max_request_size=1)) == 1
    assert len(acc.drain(TP, max_request_size=150)) == 1
    assert len(acc.drain(TP, max_request_size=1000)) == 1
    assert acc.empty()


async def test_retried_batches_go_back_to_the_head_in_order() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0)
    for _ in range(6):
        acc.append(TP, pending())
    first = acc.drain(TP, max_request_size=150)
    acc.append(TP, pending())
    for batch in first:
        batch.attempts, batch.retry_at = 1, clock.now + 1
    acc.requeue(first)
    assert acc.ready(clock(), set())[0] == []
    clock.now += 1
    again = acc.drain(TP, max_request_size=10_000)
    assert again[0] is first[0]
    assert not acc.open_batch_takes(TP, 1)


async def test_a_batch_without_room_for_a_keyless_record_is_sealed() -> None:
    acc = make(Clock())
    batch, _ = acc.append(TP, pending())  # 31 of 100 bytes
    acc.wakeup.clear()
    assert acc.open_batch_takes(TP, 69) and not batch.full and not acc.wakeup.is_set()
    assert not acc.open_batch_takes(TP, 70)  # the sticky partitioner moves on; the batch is ready now
    assert batch.full and acc.wakeup.is_set()
    assert acc.ready(acc._clock(), set())[0] == [TP]


async def test_expired_batches_are_removed() -> None:
    clock = Clock()
    acc = make(clock)
    acc.append(TP, pending())
    clock.now += 0.5
    acc.append(OTHER, pending())
    clock.now += 0.6
    gone = acc.expired(clock())
    assert [b.tp for b in gone] == [TP]
    assert acc.open_batch_takes(OTHER, 1) and not acc.open_batch_takes(TP, 1)


async def test_batch_completion_sets_offsets_and_runs_callbacks() -> None:
    clock = Clock()
    acc = make(clock)
    seen: list[tuple[RecordMetadata | None, Exception | None]] = []
    records = [pending() for _ in range(3)]
    for record in records[:2]:
        record.callback = lambda m, e: seen.append((m, e))
    records[2].future = None  # a record with neither: nothing to tell
    assert [acc.append(TP, record)[1] for record in records] == [0, 1, 2]
    (batch,) = acc.drain(TP, 10_000)
    batch.complete(40, -1)
    assert [future_of(p).result().offset for p in records[:2]] == [40, 41]
    assert seen == [(RecordMetadata("t", 0, 40, 1), None), (RecordMetadata("t", 0, 41, 1), None)]
    assert batch.metadata(2) == RecordMetadata("t", 0, 42, 1)
    assert batch.done.is_set()
    batch.complete(90, -1)  # settled once: a second answer changes nothing
    batch.fail(ClientClosedError("late"))
    assert batch.metadata(0).offset == 40 and batch.error is None and len(seen) == 2


async def test_failed_batches_fail_every_future() -> None:
    clock = Clock()
    acc = make(clock)
    records = [pending(), pending()]
    for record in records:
        acc.append(TP, record)
    gone = acc.abort_all(ClientClosedError("closed"))
    assert all(isinstance(future_of(p).exception(), ClientClosedError) for p in records)
    assert [isinstance(b.error, ClientClosedError) for b in gone] == [True]


async def test_reserve_blocks_until_memory_is_released() -> None:
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(
        batch_size=100, linger_ms=0, buffer_memory=100, delivery_timeout_ms=1000, clock=loop.time
    )
    await acc.reserve(80, loop.time() + 5)
    waiting = asyncio.create_task(acc.reserve(50, loop.time() + 30))
    await asyncio.sleep(0)
    assert not waiting.done()
    await acc.release(80)
    await waiting
    assert acc.buffered_bytes == 50
    with pytest.raises(BufferExhaustedError, match="buffer_memory"):
        await acc.reserve(60, loop.time() + 0.01)
