"""Failed-authentication throttling: sliding windows of failures per (user, client host) and per client host.

Two limits, each over the last ``window_ms``:

* ``limit`` failures of one user name from one host refuse that user from that host (429, 42901, with
  ``Retry-After``) before its credentials are looked at, until its oldest failure in the window ages out;
* ``address_limit`` failures from one host, whatever the user names, refuse every attempt from that host.

So a guesser behind a shared address (a NAT, a proxy) locks out the names it guessed, not a user who did not
fail from the same address, while guessing across many names from one host still stops at the address
ceiling. The address ceiling defaults to :data:`ADDRESS_LIMIT_FACTOR` times ``limit``. An attempt whose user
is not known before its credentials are checked (a bearer token, a client certificate, a malformed Basic
header) counts under the user name ``""``. A success does not reset a count (a guesser with one valid
account must not reset its own window). Memory is bounded: at most ``max_keys`` pairs and as many hosts are
tracked, the least recently failing one forgotten first.

An attempt whose verification costs something (a Basic password's PBKDF2) first reserves a place
(:meth:`FailureThrottle.reserve`): attempts in flight count toward both limits, so a burst of concurrent
guesses for one user from one host starts at most ``limit`` verifications, not one per request.
:meth:`FailureThrottle.settle` releases the place on success or turns it into a recorded failure.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from tierlog.wire.errors import ThrottledError

__all__ = ["ADDRESS_LIMIT_FACTOR", "FailureThrottle", "TooManyFailuresError"]

#: The per-host ceiling's default, as a multiple of the per-(user, host) limit.
ADDRESS_LIMIT_FACTOR = 5

_K = TypeVar("_K", bound=Hashable)


class TooManyFailuresError(ThrottledError):
    """:class:`ThrottledError` (42901) that knows how long the client should wait: the error middleware
    answers it with ``Retry-After: <retry_after_s>``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class _Window(Generic[_K]):
    """Failures within a sliding window and attempts in flight, per key, against one limit."""

    def __init__(self, limit: int, window_ms: int, max_keys: int) -> None:
        self._limit = limit
        self._window_ms = window_ms
        self._max_keys = max_keys
        self._failures: OrderedDict[_K, deque[float]] = OrderedDict()
        self._in_flight: dict[_K, int] = {}

    def _recent(self, key: _K, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        horizon = now - self._window_ms
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def wait_s(self, key: _K, now: float, *, in_flight: bool) -> int | None:
        """Seconds until ``key`` may try again (at least 1), or None when it is under the limit now."""
        times = self._recent(key, now)
        failures = 0 if times is None else len(times)
        pending = self._in_flight.get(key, 0) if in_flight else 0
        if failures + pending < self._limit:
            return None
        if times is None or failures < self._limit:
            return 1  # attempts in flight fill the limit
        return max(1, math.ceil((times[-self._limit] + self._window_ms - now) / 1000))

    def reserve(self, key: _K) -> None:
        self._in_flight[key] = self._in_flight.get(key, 0) + 1

    def release(self, key: _K) -> None:
        left = self._in_flight.get(key, 0) - 1
        if left > 0:
            self._in_flight[key] = left
        else:
            self._in_flight.pop(key, None)

    def record(self, key: _K, now: float) -> None:
        times = self._recent(key, now)
        if times is None:
            times = self._failures[key] = deque(maxlen=self._limit)
            while len(self._failures) > self._max_keys:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(key)
        times.append(now)


class FailureThrottle:
    """Counts failed authentications per (user, host) and per host in a sliding window.

    ``address_limit`` None: :data:`ADDRESS_LIMIT_FACTOR` times ``limit``. Not thread-safe: used from the event
    loop only (every method is synchronous and short).
    """

    def __init__(
        self,
        limit: int,
        window_ms: int,
        *,
        address_limit: int | None = None,
        clock: Callable[[], float] | None = None,
        max_keys: int = 10_000,
    ) -> None:
        self._clock = clock or _monotonic_ms
        self._users: _Window[tuple[str, str]] = _Window(limit, window_ms, max_keys)
        ceiling = address_limit if address_limit is not None else limit * ADDRESS_LIMIT_FACTOR
        self._hosts: _Window[str] = _Window(ceiling, window_ms, max_keys)

    def check(self, user: str, host: str) -> None:
        """Refuse ``user`` from ``host`` when the pair's recorded failures reach ``limit`` or the host's
        reach ``address_limit`` (attempts in flight are not counted: a request whose credentials cost
        nothing to check, such as a cached one, is not held back by them).

        Raises:
            TooManyFailuresError: over a limit; ``retry_after_s`` is when enough failures leave the window
                for every limit passed (at least 1 s).
        """
        self._refuse_over(user, host, in_flight=False)

    def reserve(self, user: str, host: str) -> None:
        """Reserve a place for one attempt of ``user`` from ``host``: refused when failures in the window
        plus attempts in flight reach either limit. Every successful call must be followed by one
        :meth:`settle`.

        Raises:
            TooManyFailuresError: over a limit; ``retry_after_s`` is when the failures leave the window, or
                1 s when attempts in flight fill it.
        """
        self._refuse_over(user, host, in_flight=True)
        self._users.reserve((user, host))
        self._hosts.reserve(host)

    def settle(self, user: str, host: str, *, failed: bool) -> None:
        """End an attempt :meth:`reserve` admitted: release its place, recording a failure when ``failed``."""
        self._users.release((user, host))
        self._hosts.release(host)
        if failed:
            self.failed(user, host)

    def failed(self, user: str, host: str) -> None:
        """Record one failed authentication of ``user`` (``""`` when unknown) from ``host``."""
        now = self._clock()
        self._users.record((user, host), now)
        self._hosts.record(host, now)

    def _refuse_over(self, user: str, host: str, *, in_flight: bool) -> None:
        now = self._clock()
        waits = [
            wait
            for wait in (
                self._users.wait_s((user, host), now, in_flight=in_flight),
                self._hosts.wait_s(host, now, in_flight=in_flight),
            )
            if wait is not None
        ]
        if waits:
            retry_after_s = max(waits)
            raise TooManyFailuresError(
                f"too many failed authentication attempts; retry after {retry_after_s} s", retry_after_s
            )
