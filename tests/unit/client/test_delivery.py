"""FutureRecordMetadata: a record's future resolved from its batch, usable wherever asyncio takes a
future (await, gather, wait, wait_for, done callbacks), never cancelling the batch."""

from __future__ import annotations

import asyncio
import contextvars
import traceback

import pytest

from tierlog.client.accumulator import PendingRecord, ProducerBatch, RecordAccumulator
from tierlog.client.delivery import FutureRecordMetadata
from tierlog.client.errors import ClientClosedError
from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.tiering.codec.records import Record

TP = TopicPartition("t", 2)


def queued(count: int) -> tuple[ProducerBatch, list[FutureRecordMetadata]]:
    """``count`` records in one batch, each with its future, as ``send`` answers them."""
    acc = RecordAccumulator(
        batch_size=1 << 20, linger_ms=0, buffer_memory=1 << 20, delivery_timeout_ms=1000, clock=lambda: 0.0
    )
    futures = []
    for n in range(count):
        batch, index = acc.append(TP, PendingRecord(Record(None, b"v", (), 1000 + n), 30))
        futures.append(FutureRecordMetadata(batch, index))
    return batch, futures


async def test_each_record_reads_its_metadata_from_the_settled_batch() -> None:
    batch, futures = queued(3)
    assert asyncio.isfuture(futures[0]) and not any(f.done() for f in futures)
    with pytest.raises(asyncio.InvalidStateError):
        futures[0].result()
    with pytest.raises(asyncio.InvalidStateError):
        futures[0].exception()
    waiting = asyncio.gather(*futures)
    await asyncio.sleep(0)
    batch.complete(70, -1)
    assert await waiting == [RecordMetadata("t", 2, 70 + n, 1000 + n) for n in range(3)]
    assert await futures[1] == futures[1].result() and futures[1].exception() is None
    assert "#1 done" in repr(futures[1])


async def test_log_append_time_and_acks_zero_follow_the_batch() -> None:
    batch, futures = queued(2)
    batch.complete(-1, 5555)  # acks=0 has no offsets; a LogAppendTime topic answers one time
    assert [f.result() for f in futures] == [RecordMetadata("t", 2, -1, 5555)] * 2


async def test_a_failed_batch_fails_every_record() -> None:
    batch, futures = queued(2)
    awaiting = asyncio.gather(futures[0])
    await asyncio.sleep(0)
    batch.fail(ClientClosedError("closed"))
    with pytest.raises(ClientClosedError):
        await awaiting
    assert all(f.done() and isinstance(f.exception(), ClientClosedError) for f in futures)
    with pytest.raises(ClientClosedError):
        futures[1].result()


async def test_done_callbacks_run_on_the_loop_once_and_can_be_removed() -> None:
    batch, futures = queued(2)
    seen: list[FutureRecordMetadata] = []
    futures[0].add_done_callback(seen.append)
    futures[1].add_done_callback(seen.append)
    assert futures[1].remove_done_callback(seen.append) == 1
    assert futures[0].remove_done_callback(print) == 0
    batch.complete(0, -1)
    assert seen == []  # scheduled, not called inline
    await asyncio.sleep(0)
    assert seen == [futures[0]]
    futures[1].add_done_callback(seen.append)  # done already: scheduled at once
    await asyncio.sleep(0)
    assert seen == [futures[0], futures[1]]


async def test_cancelling_a_future_or_a_wait_never_touches_the_batch() -> None:
    batch, futures = queued(4)
    assert asyncio.ensure_future(futures[0]) is futures[0]  # a future already: asyncio takes it as is
    seen: list[FutureRecordMetadata] = []
    futures[0].add_done_callback(seen.append)

    async def wait(future: FutureRecordMetadata) -> RecordMetadata:
        return await future

    task = asyncio.create_task(wait(futures[0]))
    await asyncio.sleep(0)
    assert futures[0].cancel() and futures[0].cancelled() and futures[0].done()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert seen == [futures[0]] and not futures[0].cancel()  # done: a second cancel does nothing
    with pytest.raises(asyncio.CancelledError):
        futures[0].result()
    with pytest.raises(TimeoutError):  # asyncio's timeouts cancel the future they wait for
        await asyncio.wait_for(futures[1], 0.01)
    gathering = asyncio.create_task(wait(asyncio.gather(*futures[2:])))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    gathering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathering
    assert all(f.cancelled() for f in futures) and not batch.settled  # gather cancelled its children
    batch.complete(10, -1)  # the batch outlived every cancel: the records are sent, their offsets known
    assert batch.metadata(3).offset == 13
    done, pending = await asyncio.wait(futures)
    assert done == set(futures) and not pending


async def test_a_settled_batch_keeps_no_records_and_errors_keep_their_traceback() -> None:
    batch, futures = queued(2)
    batch.encoded = b"x" * 100
    batch.complete(5, -1)
    assert batch.records == [] and batch.encoded is None  # a kept future holds only the timestamps
    assert [f.result() for f in futures] == [RecordMetadata("t", 2, 5, 1000), RecordMetadata("t", 2, 6, 1001)]
    failed, others = queued(1)
    try:
        raise ClientClosedError("closed")
    except ClientClosedError as err:
        failed.fail(err)
    depths = []
    for _ in range(3):
        try:
            await others[0]
        except ClientClosedError as err:
            depths.append(len(traceback.extract_tb(err.__traceback__)))
    assert depths[0] == depths[1] == depths[2]  # re-raising does not grow the shared error's traceback


async def test_done_callbacks_run_in_the_context_they_were_added_in() -> None:
    batch, futures = queued(1)
    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="sender")
    seen: list[str] = []
    where.set("caller")
    futures[0].add_done_callback(lambda _: seen.append(where.get()))
    where.set("elsewhere")
    batch.complete(0, -1)
    await asyncio.sleep(0)
    assert seen == ["caller"]
