"""Failed-authentication throttling: a sliding window of failures per client host.

A host that failed ``limit`` authentications within the last ``window_ms`` is refused (429, 42901, with
``Retry-After``) before its credentials are looked at, until its oldest failure in the window ages out; a
success does not reset the count (a guesser with one valid account must not reset its own window). Memory is
bounded: at most ``max_hosts`` hosts are tracked, the least recently failing one forgotten first.

An attempt whose verification costs something (a Basic password's PBKDF2) first reserves a place
(:meth:`FailureThrottle.reserve`): attempts in flight count toward the limit, so a burst of concurrent guesses
from one host starts at most ``limit`` verifications, not one per request. :meth:`FailureThrottle.settle`
releases the place on success or turns it into a recorded failure.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from tierlog.wire.errors import ThrottledError

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
        self._in_flight: dict[str, int] = {}

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
        """Refuse ``host`` when its recorded failures reach the limit (attempts in flight are not counted:
        a request whose credentials cost nothing to check, such as a cached one, is not held back by them).

        Raises:
            TooManyFailuresError: ``limit`` failures or more within the window; ``retry_after_s`` is when
                the oldest of them leaves it (at least 1 s).
        """
        self._refuse_over(host, 0)

    def reserve(self, host: str) -> None:
        """Reserve a place for one attempt of ``host``: refused when its failures in the window plus its
        attempts in flight reach the limit. Every successful call must be followed by one :meth:`settle`.

        Raises:
            TooManyFailuresError: over the limit; ``retry_after_s`` is when the oldest failure leaves the
                window, or 1 s when attempts in flight fill the limit.
        """
        in_flight = self._in_flight.get(host, 0)
        self._refuse_over(host, in_flight)
        self._in_flight[host] = in_flight + 1

    def settle(self, host: str, *, failed: bool) -> None:
        """End an attempt :meth:`reserve` admitted: release its place, recording a failure when ``failed``."""
        left = self._in_flight.get(host, 0) - 1
        if left > 0:
            self._in_flight[host] = left
        else:
            self._in_flight.pop(host, None)
        if failed:
            self.failed(host)

    def _refuse_over(self, host: str, in_flight: int) -> None:
        now = self._clock()
        times = self._recent(host, now)
        failures = 0 if times is None else len(times)
        if failures + in_flight < self._limit:
            return
        retry_after_s = 1
        if times is not None and failures >= self._limit:
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
