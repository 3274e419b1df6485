"""The synchronous producer: :class:`~tierlog.client.producer.AsyncProducer` on a loop thread it owns.

``send`` returns a :class:`RecordFuture` (a ``concurrent.futures.Future``) at once, waiting only while the
buffers are full (``max_block_ms``), as Kafka's producer does:

    producer.send("t", b"v")                          # fire and forget
    producer.send("t", b"v").get(timeout=10)           # synchronous send: wait for the metadata
    producer.send("t", b"v").add_callback(on_ok).add_errback(on_error)   # asynchronous send

A producer its user leaves open stays alive (its I/O thread holds it) and is closed at interpreter exit with
a bounded wait, warning how many records were not delivered (:mod:`tierlog.client.exit_close`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierlog.client import exit_close
from tierlog.client.accumulator import Callback
from tierlog.client.errors import BufferExhaustedError, ClientClosedError
from tierlog.client.loop_thread import LoopThread
from tierlog.client.producer import AsyncProducer, HeadersArg
from tierlog.client.types import RecordMetadata
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import TierlogError

__all__ = ["HANDOFF_BYTES", "Producer", "RecordFuture"]

HANDOFF_BYTES = 4 * 2**20


class RecordFuture(concurrent.futures.Future[RecordMetadata]):
    """The future of one record's metadata, with kafka-python's ``get``, ``add_callback`` and ``add_errback``.

    Callbacks run on the producer's I/O thread: keep them short, and do not call blocking producer methods
    from them.
    """

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the metadata. Raises the delivery error, or TimeoutError after ``timeout`` seconds."""
        try:
            return self.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no acknowledgement within {timeout} s") from None

    def add_callback(self, fn: Callable[..., object], *args: Any) -> RecordFuture:
        """Call ``fn(*args, metadata)`` on success. Returns self for chaining."""

        def done(future: concurrent.futures.Future[RecordMetadata]) -> None:
            if not future.cancelled() and future.exception() is None:
                fn(*args, future.result())

        self.add_done_callback(done)
        return self

    def add_errback(self, fn: Callable[..., object], *args: Any) -> RecordFuture:
        """Call ``fn(*args, error)`` on failure. Returns self for chaining."""

        def done(future: concurrent.futures.Future[RecordMetadata]) -> None:
            if not future.cancelled() and future.exception() is not None:
                fn(*args, future.exception())

        self.add_done_callback(done)
        return self


@dataclass(slots=True)
class _Handoff:
    topic: str
    record: Record
    size: int
    partition: int | None
    callback: Callback | None
    target: RecordFuture


class Producer:
    """Sends records to tierlog from synchronous code; the options are :class:`AsyncProducer`'s.

    ``send`` serializes the record in the calling thread and hands it to the I/O thread through a queue of
    at most :data:`HANDOFF_BYTES` (or ``buffer_memory``, if smaller) without waiting for the loop; the I/O
    thread moves records into the producer's buffer. When both are full, ``send`` blocks up to
    ``max_block_ms`` and then raises BufferExhaustedError. Errors found on the I/O thread (unknown topic or
    partition, no metadata) fail the record's future and run its callback.

    Every method is thread-safe (several threads may ``send`` at once). ``close`` flushes, stops the I/O
    thread and joins it; it is idempotent. A producer never closed is closed at interpreter exit, waiting at
    most :func:`~tierlog.client.exit_close.exit_close_timeout` seconds (``delivery_timeout_ms``, at most
    5 s), and an :class:`~tierlog.client.exit_close.UnclosedProducerWarning` names the records it lost.

    Raises (from the constructor): InvalidRequestError for an unknown option or a bad value.
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None, **configs: Any) -> None:
        self._core = AsyncProducer(bootstrap_servers, **configs)
        self.config = self._core.config
        self._handoff: deque[_Handoff] = deque()
        self._handoff_limit = min(self.config.buffer_memory, HANDOFF_BYTES)
        self._handoff_bytes = 0
        self._handoff_failures = 0
        self._blocked = 0
        self._room = threading.Condition()
        self._closed = False
        self._wake = asyncio.Event()
        self._drain_lock = asyncio.Lock()
        self._drainer: asyncio.Task[None] | None = None
        self._thread = LoopThread("tierlog-producer")
        try:
            self._thread.run(self._start())
        except BaseException:
            self._thread.close()
            raise
        exit_close.track(self)

    async def _start(self) -> None:
        await self._core.start()
        # The I/O thread keeps the task, and through it this producer, alive until close: a producer
        # dropped without close is closed at exit (exit_close) rather than collected with pending tasks.
        self._drainer = self._thread.keep(
            asyncio.create_task(self._drain_forever(), name="tierlog producer hand-off")
        )

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue one record and answer the future of its :class:`RecordMetadata`.

        Blocks only while the hand-off queue is full, at most ``max_block_ms``. Not idempotent.

        Raises:
            ClientClosedError: the producer is closed.
            ProducerFencedError: another instance took over this idempotent producer's id (fatal).
            BufferExhaustedError: no room within ``max_block_ms``.
            RecordTooLargeError: the record alone exceeds ``max_request_size`` or ``buffer_memory``.
            TypeError: key, value or a header value is neither bytes nor str and no serializer is set.
        """
        if self._closed:
            raise ClientClosedError("the producer is closed")
        fatal = self._core.fatal_error
        if fatal is not None:
            raise fatal
        record, size = self._core.build_record(value, key, headers, timestamp)
        target = RecordFuture()
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        with self._room:
            while self._handoff_bytes and self._handoff_bytes + size > self._handoff_limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferExhaustedError(
                        f"buffer_memory stayed full for max_block_ms={self.config.max_block_ms}"
                    )
                self._blocked += 1
                try:
                    self._room.wait(remaining)
                finally:
                    self._blocked -= 1
            if self._closed:
                raise ClientClosedError("the producer is closed")
            self._handoff_bytes += size
            wake = not self._handoff
            self._handoff.append(_Handoff(topic, record, size, partition, callback, target))
        if wake:
            self._thread.loop.call_soon_threadsafe(self._wake.set)
        return target

    async def _drain_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            async with self._drain_lock:
                await self._drain()

    async def _drain(self) -> None:
        while self._handoff:
            item = self._handoff.popleft()
            try:
                await self._core.enqueue(
                    item.topic, item.record, item.size, item.target, item.partition, item.callback
                )
            except TierlogError as err:
                self._fail_handoff(item, err)
            except asyncio.CancelledError:  # close's deadline passed while the record waited
                self._fail_handoff(item, ClientClosedError("the producer closed before the record was sent"))
                raise
            finally:
                with self._room:
                    self._handoff_bytes -= item.size
                    if self._blocked:
                        self._room.notify_all()

    def _fail_handoff(self, item: _Handoff, err: TierlogError) -> None:
        self._handoff_failures += 1
        if not item.target.done():
            item.target.set_exception(err)
        if item.callback is not None:
            item.callback(None, err)

    async def _flush(self, timeout: float | None) -> None:  # noqa: ASYNC109 - passed on to flush()
        async with self._drain_lock:
            await self._drain()
        await self._core.flush(timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until it completes. Raises TimeoutError after ``timeout`` s."""
        self._thread.run(self._flush(timeout))

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic``. Raises as :meth:`AsyncProducer.partitions_for`."""
        return self._thread.run(self._core.partitions_for(topic))

    async def _drain_locked(self) -> None:
        async with self._drain_lock:
            await self._drain()

    async def _close(self, timeout: float | None) -> None:  # noqa: ASYNC109 - passed on to close()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        with contextlib.suppress(TimeoutError):  # records still waiting for metadata or room fail below
            await asyncio.wait_for(self._drain_locked(), timeout)
        drainer, self._drainer = self._drainer, None
        if drainer is not None:
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer
        while self._handoff:
            item = self._handoff.popleft()
            self._fail_handoff(item, ClientClosedError("the producer closed before the record was sent"))
        await self._core.close(None if deadline is None else max(0.0, deadline - loop.time()))

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds in all), stop the I/O thread and join it. Records not sent
        within ``timeout`` fail with ClientClosedError. Idempotent."""
        exit_close.untrack(self)
        with self._room:
            self._closed = True
        if not self._thread.in_loop_thread:
            with contextlib.suppress(ClientClosedError):
                self._thread.run(self._close(timeout))
        self._thread.close()

    @property
    def failed_records(self) -> int:
        """How many records this producer failed to deliver so far (their futures hold the errors)."""
        return self._core.failed_records + self._handoff_failures

    def close_at_exit(self) -> None:
        """Close a producer its user left open, at interpreter exit: wait at most
        :func:`~tierlog.client.exit_close.exit_close_timeout` seconds, then warn how many records were not
        delivered (:class:`~tierlog.client.exit_close.UnclosedProducerWarning`), or, with none lost, a
        ResourceWarning naming ``close()``. Idempotent."""
        if self._closed:
            return
        bound = exit_close.exit_close_timeout(self.config.delivery_timeout_ms)
        before = self.failed_records
        self.close(bound)
        lost = self.failed_records - before
        if lost:
            warnings.warn(
                f"a tierlog Producer was not closed: at interpreter exit {lost} record(s) were not delivered "
                f"within {bound:g} s (call flush() or close(), or use `with Producer(...) as producer:`)",
                exit_close.UnclosedProducerWarning,
                stacklevel=1,
            )
        else:
            warnings.warn(
                "a tierlog Producer was not closed; it was flushed and closed at interpreter exit "
                "(call close(), or use `with Producer(...) as producer:`)",
                ResourceWarning,
                stacklevel=1,
            )
