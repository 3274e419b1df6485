"""What :meth:`AsyncProducer.send` answers: a future of one record's metadata that is resolved from its
batch, not one by one.

A record carries no asyncio future of its own. Its batch is settled once (a base offset and log append
time, or an error), and :class:`FutureRecordMetadata` computes the record's
:class:`~tierlog.client.types.RecordMetadata` from that when asked. Completing a batch of thousands of
records then costs next to nothing per record, and the producer keeps no long-lived object per queued record
for the cyclic garbage collector to walk (with a future per record, the collector was a fifth of a
100-byte producer's time on the development machine; see ``docs/benchmarks-client.md``).

It is an asyncio future in everything but its class: ``await``, ``result()``, ``exception()``,
``done()``, ``add_done_callback()``, ``cancel()``, and ``asyncio.gather``, ``asyncio.wait``,
``asyncio.wait_for``, ``asyncio.timeout`` and ``asyncio.shield`` accept it (``asyncio.isfuture`` is true;
type checkers see an ``asyncio.Future``); ``isinstance(f, asyncio.Future)`` is false. Cancelling it (or a
task awaiting it) cancels that future or that wait only, never the batch: the record is sent anyway, as it
was with a cancelled per-record asyncio future. A settled batch keeps only what its handles need (the
outcome and, without a log append time, the record timestamps), not the records.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from tierlog.client.accumulator import ProducerBatch
from tierlog.client.types import RecordMetadata

__all__ = ["FutureRecordMetadata"]

if TYPE_CHECKING:  # type checkers see the asyncio future it stands in for (gather/wait/wait_for take it)
    _FutureBase = asyncio.Future[RecordMetadata]
else:  # at run time a plain object: an asyncio.Future per record is what this class avoids
    _FutureBase = object


class FutureRecordMetadata(_FutureBase):
    """The future :class:`RecordMetadata` of one record of ``batch`` (see the module docstring)."""

    __slots__ = ("_batch", "_cancelled", "_index")

    # asyncio.isfuture() looks for this attribute: gather/wait/wait_for then use the future API below.
    # It is never True: this object never yields itself to a task (``__await__`` waits on a future of
    # its own), so a task cancelling its wait cannot cancel the batch.
    _asyncio_future_blocking = False

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index
        self._cancelled = False

    def __repr__(self) -> str:
        batch = self._batch
        if self._cancelled:
            state = "cancelled"
        else:
            state = "pending" if not batch.settled else ("failed" if batch.error else "done")
        return f"<FutureRecordMetadata {batch.tp.topic}-{batch.tp.partition} #{self._index} {state}>"

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The producer's event loop."""
        assert self._batch.loop is not None
        return self._batch.loop

    def done(self) -> bool:
        """Whether the record was acknowledged or failed, or this future cancelled."""
        return self._cancelled or self._batch.settled

    def cancelled(self) -> bool:
        """Whether this future was cancelled (the record was sent anyway)."""
        return self._cancelled

    def cancel(self, msg: Any = None) -> bool:
        """Cancel this future if it is not done: its waiters get ``CancelledError`` and its done callbacks
        run. The record is sent anyway, as with a cancelled per-record asyncio future: a queued record
        cannot be taken back. Answers whether it was cancelled now."""
        if self.done():
            return False
        self._cancelled = True
        self._batch.wake(self._index)
        return True

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        """What asyncio.gather asks a cancelled child for (a private part of the future API it uses)."""
        return asyncio.CancelledError()

    def result(self) -> RecordMetadata:
        """The record's metadata.

        Raises:
            asyncio.CancelledError: this future was cancelled.
            asyncio.InvalidStateError: not done yet.
            The delivery error (a :class:`~tierlog.client.errors.TierlogClientError`) if it failed.
        """
        if self._cancelled:
            raise asyncio.CancelledError
        batch = self._batch
        if batch.error is not None:  # with the traceback it had: re-raising must not grow it
            raise batch.error.with_traceback(batch.error_traceback)
        if batch.outcome is None:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return batch.metadata(self._index)

    def exception(self) -> BaseException | None:
        """The delivery error, or None if the record was acknowledged.

        Raises:
            asyncio.CancelledError: this future was cancelled.
            asyncio.InvalidStateError: not done yet.
        """
        if self._cancelled:
            raise asyncio.CancelledError
        batch = self._batch
        if not batch.settled:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return batch.error

    def add_done_callback(
        self, fn: Callable[[FutureRecordMetadata], object], *, context: contextvars.Context | None = None
    ) -> None:
        """Schedule ``fn(self)`` on the loop once done (at once if done already), in ``context`` (default:
        a copy of the current one, as asyncio does)."""
        if context is None:
            context = contextvars.copy_context()
        if self.done():
            self.get_loop().call_soon(fn, self, context=context)
        else:
            self._batch.done_callbacks.setdefault(self._index, []).append((fn, self, context))

    def remove_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> int:
        """Remove ``fn`` from this future's done callbacks; answer how many were removed."""
        callbacks = self._batch.done_callbacks.get(self._index)
        if not callbacks:
            return 0
        kept = [entry for entry in callbacks if entry[0] != fn]
        removed = len(callbacks) - len(kept)
        callbacks[:] = kept
        return removed

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            waiter: asyncio.Future[None] = self.get_loop().create_future()
            self._batch.waiters.setdefault(self._index, []).append(waiter)
            yield from waiter
        return self.result()

    __iter__ = __await__
