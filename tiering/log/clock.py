"""Injectable wall clocks for time-driven log behaviour (segment.ms, flush.ms, retention.ms).

The engine never reads the system time directly: it asks its :class:`Clock`, so tests drive rolls,
flushes and retention with a :class:`ManualClock` instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "ManualClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time in milliseconds since the epoch."""

    def now_ms(self) -> int:
        """Current time in ms. Must be safe to call from any thread."""
        ...


class SystemClock:
    """The real wall clock. Thread-safe."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to, for tests. Thread-safe.

    Raises:
        ValueError: from :meth:`advance` with a negative step.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and return the new time."""
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards by {ms} ms")
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int) -> None:
        """Jump to ``ms`` (backwards too: wall clocks do that)."""
        with self._lock:
            self._now = ms
