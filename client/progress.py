"""A one-line progress bar with rate for long CLI runs, redrawn in place on a terminal.

    [##########----------]  50.0%  12.0 MiB  120,000 rec  40,000 rec/s  4.0 MiB/s

Without a known total it shows counts and rates only. Redraws at most ``interval`` seconds apart; the clock
and the stream are injected so tests can drive it. Not thread-safe: one producer loop updates it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "format_bytes"]

_WIDTH = 20


def format_bytes(count: float) -> str:
    """``count`` bytes in B, KiB, MiB or GiB with one decimal. Pure."""
    for unit in ("B", "KiB", "MiB"):
        if abs(count) < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


class Progress:
    """Counts records and bytes, and draws a bar on ``stream`` (usually stderr)."""

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None = None,
        *,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._total = total_bytes if total_bytes else None
        self._interval = interval
        self._clock = clock
        self._start = clock()
        self._last_draw = float("-inf")
        self.records = 0
        self.bytes = 0
        self.drawn = 0

    def update(self, records: int, size: int) -> None:
        """Count ``records`` more records of ``size`` bytes and redraw if the interval passed."""
        self.records += records
        self.bytes += size
        now = self._clock()
        if now - self._last_draw >= self._interval:
            self._last_draw = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The text of the bar at ``now`` (default: the clock). Pure apart from reading the clock."""
        elapsed = max((self._clock() if now is None else now) - self._start, 1e-9)
        parts = []
        if self._total is not None:
            fraction = min(1.0, self.bytes / self._total)
            filled = int(fraction * _WIDTH)
            parts.append(f"[{'#' * filled}{'-' * (_WIDTH - filled)}] {fraction * 100:5.1f}%")
        parts.append(format_bytes(self.bytes))
        parts.append(f"{self.records:,} rec")
        parts.append(f"{self.records / elapsed:,.0f} rec/s")
        parts.append(f"{format_bytes(self.bytes / elapsed)}/s")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        self._stream.write("\r" + self.line(now) + "\x1b[K")
        self._stream.flush()
        self.drawn += 1

    def finish(self) -> None:
        """Draw the final state and end the line. Idempotent enough: each call draws once more."""
        self._draw(self._clock())
        self._stream.write("\n")
        self._stream.flush()
