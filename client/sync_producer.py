"""The synchronous producer: :class:`~client.producer.AsyncProducer` on a loop thread it owns.

``send`` returns a :class:`RecordFuture` (a ``concurrent.futures.Future``) at once, after waiting only for
metadata and buffer room (``max_block_ms``), exactly as Kafka's producer does:

    producer.send("t", b"v")                          # fire and forget
    producer.send("t", b"v").get(timeout=10)           # synchronous send: wait for the metadata
    producer.send("t", b"v").add_callback(on_ok).add_errback(on_error)   # asynchronous send
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any

from client.accumulator import Callback
from client.errors import ClientClosedError
from client.loop_thread import LoopThread
from client.producer import AsyncProducer, HeadersArg
from client.types import RecordMetadata

__all__ = ["Producer", "RecordFuture"]


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


def _chain(source: asyncio.Future[RecordMetadata], target: RecordFuture) -> None:
    def copy(done: asyncio.Future[RecordMetadata]) -> None:
        error = done.exception()
        if error is not None:
            target.set_exception(error)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class Producer:
    """Sends records to tierlog from synchronous code; the options are :class:`AsyncProducer`'s.

    Every method is thread-safe (several threads may ``send`` at once). ``close`` flushes, stops the I/O
    thread and joins it; it is idempotent.

    Raises (from the constructor): InvalidRequestError for an unknown option or a bad value.
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None, **configs: Any) -> None:
        self._core = AsyncProducer(bootstrap_servers, **configs)
        self.config = self._core.config
        self._thread = LoopThread("tierlog-producer")
        try:
            self._thread.run(self._core.start())
        except BaseException:
            self._thread.close()
            raise

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
        """Queue one record and answer the future of its metadata (see :meth:`AsyncProducer.send`).

        Blocks at most ``max_block_ms``. Raises what :meth:`AsyncProducer.send` raises.
        """
        target = RecordFuture()

        async def go() -> None:
            source = await self._core.send(
                topic, value, key, partition, headers, timestamp, callback=callback
            )
            _chain(source, target)

        self._thread.run(go())
        return target

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued and wait until it completes. Raises TimeoutError after ``timeout`` s."""
        self._thread.run(self._core.flush(timeout))

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic``. Raises as :meth:`AsyncProducer.partitions_for`."""
        return self._thread.run(self._core.partitions_for(topic))

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), stop the I/O thread and join it. Idempotent."""
        if not self._thread.in_loop_thread:
            with contextlib.suppress(ClientClosedError):
                self._thread.run(self._core.close(timeout))
        self._thread.close()
