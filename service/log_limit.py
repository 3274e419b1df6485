"""Rate-limited log lines: one line per interval for a condition that repeats, with the count it stands for.

A flood of the same warning (every failed ``acks=0`` append to a full disk, every refused ``accept()`` at an
fd limit) buries the rest of the log and costs I/O when the broker is already in trouble; the metric that
counts each occurrence stays exact, and the log says it once per interval with how many were held back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LogLimiter"]


class LogLimiter:
    """Lets one log line through per ``interval_s`` (on ``clock``, seconds) and counts the ones held back.

    Not thread-safe: used from one event loop.
    """

    def __init__(self, interval_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last = float("-inf")
        self._held = 0

    def admit(self) -> int | None:
        """Whether to log this occurrence: None when a line went out less than ``interval_s`` ago (this one
        is counted as held back); otherwise how many were held back since that line (the interval restarts
        now)."""
        now = self._clock()
        if now - self._last < self._interval_s:
            self._held += 1
            return None
        held, self._last, self._held = self._held, now, 0
        return held
