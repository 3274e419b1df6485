"""The producer's per-partition batches and its ``buffer_memory`` budget.

Records wait here until their partition's head batch is *ready*: full (``batch_size``), older than
``linger_ms``, more than one batch queued, or a flush or close is under way. The sender drains ready
partitions, at most one request in flight per partition so records of a partition are stored in send order
(retries put a batch back at the head of its queue). A batch's records keep their share of ``buffer_memory``
until the batch completes; ``reserve`` blocks senders while the budget is spent.

Everything here runs on the producer's event loop and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import itertools
from array import array
from asyncio import InvalidStateError
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from tierlog.client.errors import BufferExhaustedError
from tierlog.client.idempotence import Stamp, increment_sequence
from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import TierlogError

__all__ = ["DeliveryFuture", "PendingRecord", "ProducerBatch", "RecordAccumulator", "record_size"]

# length, attributes, deltas and the key/value/header-count varints of one record, at worst.
RECORD_OVERHEAD = 21
# Batches of one partition in one idempotent request: the partition leader remembers the last five batches
# of each producer, so a retried request of at most five is answered as a duplicate with its offsets.
MAX_IDEMPOTENT_BATCHES = 5
Callback = Callable[[RecordMetadata | None, Exception | None], object]


def record_size(record: Record) -> int:
    """An upper estimate of the bytes ``record`` takes inside an uncompressed batch. Pure."""
    size = RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += 10 + len(key.encode()) + len(value or b"")
    return size


class DeliveryFuture(Protocol):
    """What the sender completes: an ``asyncio.Future`` or a ``concurrent.futures.Future`` of the metadata."""

    def done(self) -> bool: ...

    def set_result(self, result: RecordMetadata) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


@dataclass(slots=True)
class PendingRecord:
    """A record waiting for its batch, and an optional future to complete when the batch is answered
    (:meth:`AsyncProducer.enqueue`: the sync producer's futures; ``send`` returns a
    :class:`~tierlog.client.delivery.FutureRecordMetadata` instead, which needs none)."""

    record: Record
    size: int
    future: DeliveryFuture | None = None
    callback: Callback | None = None


_ids = itertools.count()
_new_tuple = tuple.__new__
DoneCallback = tuple[Callable[[Any], object], Any, contextvars.Context]


@dataclass(eq=False)
class ProducerBatch:
    """Records of one partition sent as one v2 record batch.

    An idempotent producer's batch gets its ``stamp`` (producer id, epoch, base sequence) when it is first
    drained; ``encoded`` then caches its bytes, so every retry resends the same batch.

    The batch is settled once, by :meth:`complete` (``outcome``: base offset and log append time) or
    :meth:`fail` (``error``). Records carry no future of their own unless one was given (``futures``, by
    index); ``FutureRecordMetadata`` handles read the outcome when asked, so completing a batch costs
    nothing per record without futures or callbacks (``callbacks``, by index). Settling drops the records
    and the encoded bytes (a handle kept for later holds only the record timestamps it may need), and the
    handles' waiters and done callbacks (by index) are woken.

    ``full`` means the batch takes no more records: sealed at ``batch_size``, or out of its queue (drained,
    expired, aborted). A batch that is not full is the tail of its partition's queue; the producer's send
    lane (``client/_sendlane.c``) relies on that to append to an armed batch.
    """

    tp: TopicPartition
    created: float
    deadline: float
    records: list[Record] = field(default_factory=list)
    size: int = 0
    attempts: int = 0
    retry_at: float = 0.0
    full: bool = False
    encoded: bytes | None = None
    last_error: Exception | None = None
    stamp: Stamp | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    batch_id: int = field(default_factory=lambda: next(_ids))
    loop: asyncio.AbstractEventLoop | None = None
    futures: dict[int, DeliveryFuture] = field(default_factory=dict)
    callbacks: dict[int, Callback] = field(default_factory=dict)
    outcome: tuple[int, int] | None = None
    error: Exception | None = None
    error_traceback: TracebackType | None = None
    timestamps: array[int] | None = None
    waiters: dict[int, list[asyncio.Future[None]]] = field(default_factory=dict)
    done_callbacks: dict[int, list[DoneCallback]] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        """Whether the batch completed or failed."""
        return self.outcome is not None or self.error is not None

    def metadata(self, index: int) -> RecordMetadata:
        """The metadata of record ``index`` of a completed batch."""
        assert self.outcome is not None
        base_offset, log_append_time = self.outcome
        offset = base_offset + index if base_offset >= 0 else -1
        if log_append_time >= 0:
            timestamp = log_append_time
        else:
            timestamp = (
                self.timestamps[index] if self.timestamps is not None else self.records[index].timestamp
            )
        # the tuple's own constructor: RecordMetadata(...) goes through a generated Python __new__
        return _new_tuple(RecordMetadata, (self.tp.topic, self.tp.partition, offset, timestamp))

    def append(
        self, record: Record, size: int, future: DeliveryFuture | None, callback: Callback | None
    ) -> int:
        """Add a record (the caller checked the room); answer its index in the batch."""
        index = len(self.records)
        self.records.append(record)
        self.size += size
        if future is not None:
            self.futures[index] = future
        if callback is not None:
            self.callbacks[index] = callback
        return index

    def complete(self, base_offset: int, log_append_time: int) -> None:
        """Resolve every given future with its record's metadata, run callbacks, wake the handles.
        Idempotent: only the first settlement counts."""
        if self.settled:
            return
        self.outcome = (base_offset, log_append_time)
        for index in self._indexes_to_tell():
            metadata = self.metadata(index)
            future = self.futures.get(index)
            if future is not None and not future.done():
                with contextlib.suppress(InvalidStateError, concurrent.futures.InvalidStateError):
                    future.set_result(metadata)  # unless cancelled meanwhile (from another thread)
            _run_callback(self.callbacks.get(index), metadata, None)
        if log_append_time < 0:  # what a handle kept for later still needs, once the records are gone
            self.timestamps = array("q", [record.timestamp for record in self.records])
        self._wake()

    def fail(self, error: Exception) -> None:
        """Fail every given future with ``error``, run callbacks, wake the handles. Idempotent: only the
        first settlement counts."""
        if self.settled:
            return
        self.error, self.error_traceback = error, error.__traceback__
        for index in self._indexes_to_tell():
            future = self.futures.get(index)
            if future is not None and not future.done():
                with contextlib.suppress(InvalidStateError, concurrent.futures.InvalidStateError):
                    future.set_exception(error)  # unless cancelled meanwhile (from another thread)
                    if isinstance(future, asyncio.Future):
                        # A fire-and-forget caller may never look at the future: do not warn about it.
                        future.exception()
            _run_callback(self.callbacks.get(index), None, error)
        self._wake()

    def _indexes_to_tell(self) -> Iterable[int]:
        """Indexes of the records with a future or a callback, in record order."""
        if not self.callbacks:
            return self.futures.keys()
        if not self.futures:
            return self.callbacks.keys()
        return sorted(self.futures.keys() | self.callbacks.keys())

    def wake(self, index: int) -> None:
        """Wake the waiters and run the done callbacks of the handle of record ``index``."""
        for waiter in self.waiters.pop(index, ()):
            if not waiter.done():
                waiter.set_result(None)
        for fn, handle, context in self.done_callbacks.pop(index, ()):
            assert self.loop is not None  # a handle's callback was added on the batch's loop
            self.loop.call_soon(fn, handle, context=context)

    def _wake(self) -> None:
        for index in list(self.waiters.keys() | self.done_callbacks.keys()):
            self.wake(index)
        self.records, self.encoded, self.futures, self.callbacks = [], None, {}, {}
        self.done.set()


def _follows(previous: ProducerBatch, batch: ProducerBatch) -> bool:
    """Whether ``batch`` may share an idempotent request with ``previous``: both new, or both stamped with
    one identity and consecutive sequences."""
    if previous.stamp is None or batch.stamp is None:
        return previous.stamp is None and batch.stamp is None and batch.attempts == 0
    a, b = previous.stamp, batch.stamp
    return (a.producer_id, a.producer_epoch) == (b.producer_id, b.producer_epoch) and (
        b.base_sequence == increment_sequence(a.base_sequence, len(previous.records))
    )


def _run_callback(
    callback: Callback | None, metadata: RecordMetadata | None, error: Exception | None
) -> None:
    if callback is None:
        return
    try:
        callback(metadata, error)
    except Exception:  # a user callback must not stop the sender
        import logging

        logging.getLogger("tierlog.client.producer").exception("delivery callback raised")


class RecordAccumulator:
    """Per-partition queues of batches and the memory budget."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        delivery_timeout_ms: int,
        clock: Callable[[], float],
    ) -> None:
        self._batch_size = batch_size
        self._linger = linger_ms / 1000
        self._delivery_timeout = delivery_timeout_ms / 1000
        self._clock = clock
        self._loop = asyncio.get_running_loop()  # the loop everything here runs on
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._memory = buffer_memory
        self._used = 0
        self._waiting = 0
        self._space = asyncio.Condition()
        self.wakeup = asyncio.Event()
        self.incomplete: set[ProducerBatch] = set()
        self.flushing = 0
        self.closing = False

    @property
    def buffered_bytes(self) -> int:
        return self._used

    def try_reserve(self, size: int) -> bool:
        """Take ``size`` bytes of the budget if there is room and nobody waits; answer whether it did."""
        if self._waiting or self._used + size > self._memory:
            return False
        self._used += size
        return True

    async def reserve(self, size: int, deadline: float) -> None:
        """Take ``size`` bytes of the budget, waiting until ``deadline`` (loop clock) for room.

        Raises:
            BufferExhaustedError: no room by the deadline.
        """
        if self.try_reserve(size):
            return
        self._waiting += 1
        try:
            await self._wait_for_room(size, deadline)
        finally:
            self._waiting -= 1

    async def _wait_for_room(self, size: int, deadline: float) -> None:
        async with self._space:
            while self._used + size > self._memory:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise BufferExhaustedError(
                        f"buffer_memory ({self._memory} bytes) stayed full for max_block_ms: "
                        f"{self._used} bytes wait for the broker"
                    )
                if not await wait_signalled(self._space, remaining):
                    continue
            self._used += size

    async def release(self, size: int) -> None:
        """Give back ``size`` bytes and wake waiting senders."""
        self._used -= size
        if self._waiting:
            async with self._space:
                self._space.notify_all()

    def open_batch_takes(self, tp: TopicPartition, size: int) -> bool:
        """Whether ``tp``'s queue ends in an open batch with room for a record of ``size`` bytes. An open
        batch without that room is sealed (full: ready to send) and the answer is False."""
        queue = self._queues.get(tp)
        if not queue or queue[-1].full:
            return False
        tail = queue[-1]
        if tail.size + size <= self._batch_size or not tail.records:
            return True
        tail.full = True
        self.wakeup.set()
        return False

    def append(self, tp: TopicPartition, pending: PendingRecord) -> tuple[ProducerBatch, int]:
        """Add a record (its memory already reserved) to the last open batch of ``tp``, or a new one;
        answer the batch and the record's index in it."""
        return self.append_record(tp, pending.record, pending.size, pending.future, pending.callback)

    def append_record(
        self,
        tp: TopicPartition,
        record: Record,
        size: int,
        future: DeliveryFuture | None = None,
        callback: Callback | None = None,
    ) -> tuple[ProducerBatch, int]:
        """:meth:`append` without a :class:`PendingRecord` (``send``'s path: one object fewer per record)."""
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = queue[-1] if queue and not queue[-1].full else None
        if batch is not None and batch.size + size > self._batch_size:
            batch.full = True
            batch = None
        if batch is None:
            now = self._clock()
            batch = ProducerBatch(tp, now, now + self._delivery_timeout, loop=self._loop)
            queue.append(batch)
            self.incomplete.add(batch)
            self.wakeup.set()
        index = batch.append(record, size, future, callback)
        if batch.size >= self._batch_size:
            batch.full = True
            self.wakeup.set()
        return batch, index

    def ready(self, now: float, busy: set[TopicPartition]) -> tuple[list[TopicPartition], float | None]:
        """Partitions whose head batch may be sent now, and the delay until the next one may be."""
        ready: list[TopicPartition] = []
        next_delay: float | None = None
        hurry = self.flushing > 0 or self.closing
        for tp, queue in self._queues.items():
            if not queue or tp in busy:
                continue
            head = queue[0]
            due = head.retry_at if head.attempts else head.created + (0 if hurry else self._linger)
            if head.full or len(queue) > 1:
                due = max(head.retry_at, now) if head.attempts else now
            due = min(due, head.deadline)
            if due <= now:
                ready.append(tp)
            else:
                next_delay = due - now if next_delay is None else min(next_delay, due - now)
        return ready, next_delay

    def drain(
        self, tp: TopicPartition, max_request_size: int, *, idempotent: bool = False
    ) -> list[ProducerBatch]:
        """Pop the head batches of ``tp`` that fit one request (always at least one).

        With ``idempotent``, one request holds at most :data:`MAX_IDEMPOTENT_BATCHES` and never mixes
        stamped batches (a retried request: resent as the same consecutive batches) with new ones.
        """
        queue = self._queues[tp]
        taken = [queue.popleft()]
        total = taken[0].size
        while queue and total + queue[0].size <= max_request_size:
            if idempotent:
                if len(taken) >= MAX_IDEMPOTENT_BATCHES or not _follows(taken[-1], queue[0]):
                    break
            elif queue[0].attempts != 0:
                break
            total += queue[0].size
            taken.append(queue.popleft())
        if not queue:
            del self._queues[tp]
        for batch in taken:
            batch.full = True
        return taken

    def requeue(self, batches: list[ProducerBatch]) -> None:
        """Put batches that will be retried back at the head of their partition's queue, in order."""
        for batch in reversed(batches):
            self._queues.setdefault(batch.tp, deque()).appendleft(batch)
        self.wakeup.set()

    def expired(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches past their delivery deadline."""
        gone: list[ProducerBatch] = []
        for tp in list(self._queues):
            queue = self._queues[tp]
            keep = deque(b for b in queue if b.deadline > now)
            for batch in queue:
                if batch.deadline <= now:
                    batch.full = True  # out of its queue: takes no more records
                    gone.append(batch)
            if keep:
                self._queues[tp] = keep
            else:
                del self._queues[tp]
        return gone

    def abort_all(self, error: TierlogError) -> list[ProducerBatch]:
        """Remove every queued batch (on close without flush) and return them."""
        gone = [b for queue in self._queues.values() for b in queue]
        self._queues.clear()
        for batch in gone:
            batch.full = True  # out of its queue: takes no more records
            batch.fail(error)
        return gone

    def __iter__(self) -> Iterator[ProducerBatch]:
        return (b for queue in self._queues.values() for b in queue)

    def empty(self) -> bool:
        return not self._queues
