"""Failed-authentication throttling: a sliding window of failures per client host.

A host that failed ``limit`` authentications within the last ``window_ms`` is refused (429, 42901, with
``Retry-After``) before its credentials are looked at, until its oldest failure in the window ages out; a
success does not reset the count (a guesser with one valid account must not reset its own window). Memory is
bounded: at most ``max_hosts`` hosts are tracked, the least recently failing one forgotten first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from tierlog.tiering.errors import ThrottledError

__all__ = ["FailureThrottle", "TooManyFailuresError"]


class TooManyFailuresError(ThrottledError):
    """:class:`ThrottledError` (42901) that knows how long the client should wait: the error middleware
    answers it with ``Retry-After: <retry_after_s>``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class FailureThrottle:
    """Counts failed authentications per host in a sliding window.

    Not thread-safe: used from the event loop only (every method is synchronous and short).
    """

    def __init__(
        self,
        limit: int,
        window_ms: int,
        *,
        clock: Callable[[], float] | None = None,
        max_hosts: int = 10_000,
    ) -> None:
        self._limit = limit
        self._window_ms = window_ms
        self._clock = clock or _monotonic_ms
        self._max_hosts = max_hosts
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, host: str, now: float) -> deque[float] | None:
        times = self._failures.get(host)
        if times is None:
            return None
        horizon = now - self._window_ms
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[host]
            return None
        return times

    def check(self, host: str) -> None:
        """Refuse ``host`` when it is over the limit.

        Raises:
            TooManyFailuresError: ``limit`` failures or more within the window; ``retry_after_s`` is when
                the oldest of them leaves it (at least 1 s).
        """
        now = self._clock()
        times = self._recent(host, now)
        if times is None or len(times) < self._limit:
            return
        wait_ms = times[-self._limit] + self._window_ms - now
        retry_after_s = max(1, math.ceil(wait_ms / 1000))
        raise TooManyFailuresError(
            f"too many failed authentication attempts; retry after {retry_after_s} s", retry_after_s
        )

    def failed(self, host: str) -> None:
        """Record one failed authentication of ``host``."""
        now = self._clock()
        times = self._recent(host, now)
        if times is None:
            times = self._failures[host] = deque(maxlen=self._limit)
            while len(self._failures) > self._max_hosts:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(host)
        times.append(now)
