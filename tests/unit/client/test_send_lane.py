"""The producer's send lane (client/_sendlane.c): the common ``send`` in C, doing what the Python path
does with the same accumulator state, and answering None (changing nothing) whenever it would not."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from tierlog.client.accumulator import RECORD_OVERHEAD, ProducerBatch, RecordAccumulator
from tierlog.client.delivery import FutureRecordMetadata
from tierlog.client.errors import ClientClosedError
from tierlog.client.idempotence import IdempotenceState
from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.records import Record

try:
    from tierlog.client import _sendlane
except ImportError:  # pragma: no cover - no compiler at install
    _sendlane = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(
    _sendlane is None or _accel.available is None,
    reason="the compiled extensions are not built (no C compiler at install, or TIERLOG_PURE_CODEC)",
)

TP = TopicPartition("t", 1)
VALUE = b"v" * 100
SIZE = RECORD_OVERHEAD + len(VALUE)


@dataclass
class FakeRouter:
    """What the lane reads of the router: its current metadata snapshot."""

    _snapshot: object


@dataclass
class Setup:
    acc: RecordAccumulator
    router: FakeRouter
    idempotence: IdempotenceState
    lane: Any
    batch: ProducerBatch


async def armed(*, batch_size: int = 1 << 20, memory: int = 1 << 20, record_limit: int = 1 << 20) -> Setup:
    """A lane over a real accumulator, armed for topic "t" with a batch of TP holding one record."""
    assert _sendlane is not None and _accel.available is not None
    acc = RecordAccumulator(
        batch_size=batch_size,
        linger_ms=5,
        buffer_memory=memory,
        delivery_timeout_ms=60_000,
        clock=lambda: 0.0,
    )
    router, idempotence = FakeRouter(object()), IdempotenceState()
    lane = _sendlane.SendLane(
        acc,
        router,
        idempotence,
        FutureRecordMetadata,
        _accel.available.make_record,
        batch_size=batch_size,
        buffer_memory=memory,
        record_limit=record_limit,
        overhead=RECORD_OVERHEAD,
    )
    assert acc.try_reserve(SIZE)
    batch, _ = acc.append_record(TP, Record(None, VALUE, (), 1), SIZE)
    lane.arm("t", batch, router._snapshot)
    return Setup(acc, router, idempotence, lane, batch)


def state(s: Setup) -> tuple[int, int, int, bool, dict[str, Any]]:
    return s.acc.buffered_bytes, len(s.batch.records), s.batch.size, s.batch.full, dict(s.lane.batches)


def send(s: Setup, value: object = VALUE, *rest: object) -> Any:
    args = list(rest) + [None] * (5 - len(rest))
    return s.lane.send("t", value, *args)


async def test_a_record_goes_into_the_armed_batch_as_the_python_path_puts_it() -> None:
    s = await armed()
    before = int(time.time() * 1000)
    handles = [send(s) for _ in range(3)]
    after = int(time.time() * 1000)
    assert [type(h) for h in handles] == [FutureRecordMetadata] * 3
    assert [(h._batch, h._index, h._cancelled) for h in handles] == [(s.batch, i, False) for i in (1, 2, 3)]
    assert s.acc.buffered_bytes == 4 * SIZE and s.batch.size == 4 * SIZE and not s.batch.full
    for record in s.batch.records[1:]:
        assert (record.key, record.value, record.headers, record.offset) == (None, VALUE, (), -1)
        assert before <= record.timestamp <= after
    stamps = [record.timestamp for record in s.batch.records]
    assert not any(h.done() for h in handles)
    s.batch.complete(40, -1)
    assert [h.result() for h in handles] == [RecordMetadata("t", 1, 40 + i, stamps[i]) for i in (1, 2, 3)]


@pytest.mark.parametrize(
    "args",
    [
        ("text",),  # a str value: the Python path encodes it
        (bytearray(b"v"),),
        (None,),  # a tombstone
        (VALUE, b"key"),
        (VALUE, None, 0),  # an explicit partition
        (VALUE, None, None, [("h", b"1")]),
        (VALUE, None, None, None, 123),  # a timestamp
        (VALUE, None, None, None, None, print),  # a callback
    ],
    ids=["str", "bytearray", "none", "key", "partition", "headers", "timestamp", "callback"],
)
async def test_anything_but_a_plain_keyless_record_of_bytes_takes_the_python_path(
    args: tuple[object, ...],
) -> None:
    s = await armed()
    before = state(s)
    assert send(s, *args) is None
    assert state(s) == before


async def test_an_unarmed_topic_takes_the_python_path() -> None:
    s = await armed()
    before = state(s)
    assert s.lane.send("other", VALUE, None, None, None, None, None) is None
    assert state(s) == before


async def test_new_metadata_disarms_every_topic() -> None:
    s = await armed()
    s.router._snapshot = object()
    assert send(s) is None
    assert len(s.batch.records) == 1 and s.lane.batches == {}
    s.lane.arm("t", s.batch, s.router._snapshot)  # the Python path arms it again under the new snapshot
    assert send(s) is not None and len(s.batch.records) == 2


async def test_a_fatal_producer_takes_the_python_path_which_raises() -> None:
    s = await armed()
    s.idempotence.fail_fatally(ClientClosedError("fenced"))
    before = state(s)
    assert send(s) is None
    assert state(s) == before


@pytest.mark.parametrize("how", ["drained", "expired", "aborted"])
async def test_a_batch_out_of_its_queue_takes_no_more_records(how: str) -> None:
    s = await armed()
    if how == "drained":
        assert s.acc.drain(TP, 1 << 20) == [s.batch]
    elif how == "expired":
        assert s.acc.expired(now=10**9) == [s.batch]
    else:
        assert s.acc.abort_all(ClientClosedError("closed")) == [s.batch]
    assert s.batch.full
    held, used = len(s.batch.records), s.acc.buffered_bytes
    assert send(s) is None
    assert (len(s.batch.records), s.acc.buffered_bytes, s.lane.batches) == (held, used, {})


async def test_a_record_that_does_not_fit_the_batch_takes_the_python_path() -> None:
    s = await armed(batch_size=2 * SIZE + 10)
    assert send(s) is not None
    before = state(s)
    assert send(s) is None  # the Python path seals this batch and opens the next
    assert state(s) == before


async def test_the_record_that_fills_the_batch_seals_it_and_wakes_the_sender() -> None:
    s = await armed(batch_size=2 * SIZE)
    s.acc.wakeup.clear()
    assert send(s) is not None
    assert s.batch.full and s.acc.wakeup.is_set() and s.lane.batches == {}
    assert send(s) is None


async def test_no_buffer_room_or_a_waiting_sender_takes_the_python_path() -> None:
    s = await armed(memory=2 * SIZE + 10)
    assert send(s) is not None
    before = state(s)
    assert send(s) is None  # over buffer_memory: the Python path waits for room
    assert state(s) == before
    s = await armed()
    s.acc._waiting = 1  # another send waits for room: this one queues behind it
    before = state(s)
    assert send(s) is None
    assert state(s) == before


async def test_a_record_over_the_limit_takes_the_python_path_which_raises() -> None:
    s = await armed(record_limit=SIZE - 1)
    before = state(s)
    assert send(s) is None
    assert state(s) == before


async def test_a_closed_lane_takes_nothing() -> None:
    s = await armed()
    s.lane.close()
    assert s.lane.closed and s.lane.batches == {}
    assert send(s) is None
    s.lane.arm("t", s.batch, s.router._snapshot)
    assert s.lane.batches == {} and send(s) is None


async def test_the_handle_class_must_be_a_plain_slotted_class() -> None:
    assert _sendlane is not None and _accel.available is not None
    acc = RecordAccumulator(
        batch_size=1024, linger_ms=5, buffer_memory=1024, delivery_timeout_ms=1000, clock=lambda: 0.0
    )

    class WithDict:
        _batch = _index = _cancelled = None

    for handle_type in (WithDict, RecordMetadata):
        with pytest.raises(TypeError):
            _sendlane.SendLane(
                acc,
                FakeRouter(None),
                None,
                handle_type,
                _accel.available.make_record,
                batch_size=1024,
                buffer_memory=1024,
                record_limit=1024,
                overhead=RECORD_OVERHEAD,
            )


async def test_an_uninitialised_lane_raises_and_a_refused_init_keeps_the_lane_as_it_was() -> None:
    assert _sendlane is not None and _accel.available is not None
    bare = _sendlane.SendLane.__new__(_sendlane.SendLane)
    with pytest.raises(RuntimeError, match="__init__"):
        bare.send("t", VALUE, None, None, None, None, None)
    with pytest.raises(RuntimeError, match="__init__"):
        bare.arm("t", None, None)
    s = await armed()

    class HalfHandle:  # _batch but no _index: refused, and nothing of it is kept
        __slots__ = ("_batch", "_padding")

    class Inherited(FutureRecordMetadata):  # its slots are its base's, not its own
        __slots__ = ()

    for handle_type in (HalfHandle, Inherited):
        with pytest.raises(TypeError):
            s.lane.__init__(
                s.acc, s.router, s.idempotence, handle_type, _accel.available.make_record,
                batch_size=1 << 20, buffer_memory=1 << 20, record_limit=1 << 20, overhead=RECORD_OVERHEAD,
            )  # fmt: skip
    handle = send(s)
    assert type(handle) is FutureRecordMetadata and (handle._batch, handle._index) == (s.batch, 1)
