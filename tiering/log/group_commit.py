"""Group commit: one fsync covers every append that was written before it started.

An appender that needs durability up to offset ``target`` either finds it already durable, or becomes
the one thread running the next flush, or waits while another flush runs and then checks again: if the
flush that just finished covered its bytes it returns without an fsync of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["GroupCommit"]


class GroupCommit:
    """Serialises flushes and lets waiters share them. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = False

    def sync(self, target: int, durable: Callable[[], int], flush: Callable[[], None]) -> bool:
        """Return once ``durable() >= target``, running ``flush`` when no other thread is.

        Returns True if this caller ran a flush. Exceptions from ``flush`` propagate to its caller only;
        waiters then retry with a flush of their own. Idempotent: a covered target returns at once.
        """
        with self._cond:
            while True:
                if durable() >= target:
                    return False
                if not self._running:
                    self._running = True
                    break
                self._cond.wait()
        try:
            flush()
        finally:
            with self._cond:
                self._running = False
                self._cond.notify_all()
        return True
