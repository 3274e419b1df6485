"""A wrapper that retries transient object-store failures with capped, jittered exponential backoff.

Only :class:`~tierlog.wire.errors.UnavailableError` (throttling, 5xx, connection failures) is retried. A
missing key, a lost conditional write, a bad request or denied access is final on the first attempt:
retrying cannot change those answers and would only delay the caller.

The delay before retry ``n`` (1-based) is drawn uniformly from ``[0, min(max_delay, base_delay * 2**(n-1))]``
("full jitter"), so many brokers throttled at once spread out. ``sleep``, ``clock`` and ``rng`` are
injected: tests run the whole policy without real sleeping.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.wire.errors import InvalidRequestError, UnavailableError

__all__ = ["DeadlineExceededError", "RetryPolicy", "RetryingStore"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try. ``max_attempts`` counts the first attempt; ``deadline`` (seconds, optional)
    bounds the total time spent including sleeps and the attempt in flight: no retry is started whose
    sleep would pass it, and an attempt still running at the deadline is cancelled (a hung endpoint).
    """

    max_attempts: int = 6
    base_delay: float = 0.1
    max_delay: float = 5.0
    deadline: float | None = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay < 0 or self.max_delay < 0:
            raise InvalidRequestError("retry policy needs max_attempts >= 1 and non-negative delays")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The jittered delay before retry number ``retry`` (1-based). Pure given ``rng``."""
        cap = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return rng.uniform(0.0, cap)


@dataclass(slots=True)
class RetryStats:
    """Counters a caller or a test can read: retries made and calls that gave up."""

    retries: int = 0
    gave_up: int = 0
    sleeps: list[float] = field(default_factory=list)
    deadline_exceeded: int = 0  # calls cut off by the overall deadline (an attempt hung)


class DeadlineExceededError(UnavailableError):
    """A call ran past the retry deadline (its last attempt was cut off). Retriable, as its base."""


async def _aclose(pages: AsyncIterator[ObjectInfo]) -> None:
    close = getattr(pages, "aclose", None)
    if close is not None:
        await close()


class RetryingStore:
    """:class:`ObjectStore` that retries ``inner`` on :class:`UnavailableError` only.

    Safe to call concurrently (each call has its own attempt count). Retrying ``put``, ``put_file``,
    ``delete`` and ``delete_many`` is safe because they are idempotent. A retried ``put_if_absent`` whose
    first attempt succeeded unseen returns ``False``; callers that must know compare the stored bytes
    (the manifest store does). ``list`` resumes after the last key it yielded instead of starting over.
    """

    def __init__(
        self,
        inner: ObjectStore,
        policy: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self.stats = RetryStats()

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, {self.policy!r})"

    async def _wait_or_give_up(self, err: UnavailableError, attempt: int, started: float) -> None:
        """Sleep before the next attempt, or re-raise ``err`` if the policy is exhausted."""
        policy = self.policy
        if attempt >= policy.max_attempts:
            self.stats.gave_up += 1
            raise err
        delay = policy.backoff(attempt, self._rng)
        if policy.deadline is not None and self._clock() - started + delay > policy.deadline:
            self.stats.gave_up += 1
            raise err
        self.stats.retries += 1
        self.stats.sleeps.append(delay)
        await self._sleep(delay)

    async def _call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        return await self._bounded(self._attempts(fn))

    async def _attempts(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        started = self._clock()
        attempt = 1
        while True:
            try:
                return await fn()
            except UnavailableError as err:
                await self._wait_or_give_up(err, attempt, started)
                attempt += 1

    async def _bounded(self, work: Awaitable[_T]) -> _T:
        """Await ``work`` within the policy's deadline, the in-flight attempt included (a hung
        connection is cancelled): past it, raise a retriable :class:`UnavailableError`."""
        deadline = self.policy.deadline
        if deadline is None:
            return await work
        bound = asyncio.timeout(deadline)
        try:
            async with bound:
                return await work
        except TimeoutError as err:
            if not bound.expired():
                raise
            self.stats.gave_up += 1
            self.stats.deadline_exceeded += 1
            raise DeadlineExceededError(
                f"the object store did not answer within the retry deadline ({deadline:g} s)"
            ) from err

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`."""
        await self._call(lambda: self.inner.put(key, data))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent` and the class docstring on retried creates."""
        return await self._call(lambda: self.inner.put_if_absent(key, data))

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file` (a failed multipart upload is aborted, then retried whole)."""
        await self._call(lambda: self.inner.put_file(key, path))

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        return await self._call(lambda: self.inner.get(key))

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`."""
        return await self._call(lambda: self.inner.get_range(key, start, end))

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        return await self._call(lambda: self.inner.head(key))

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`: on a transient failure, re-lists after the last yielded key."""
        started = self._clock()
        attempt = 1
        last = start_after
        while True:
            pages = aiter(self.inner.list(prefix, start_after=last))
            try:
                while True:
                    # each step (a page request, with its retries) is bounded by the deadline on its own
                    info = await self._bounded(self._next(pages))
                    if info is None:
                        return
                    yield info
                    last = info.key
                    attempt = 1  # progress was made: the budget is per stall, not per listing
                    started = self._clock()
            except DeadlineExceededError:
                raise
            except UnavailableError as err:
                await self._wait_or_give_up(err, attempt, started)
                attempt += 1
            finally:
                await _aclose(pages)

    @staticmethod
    async def _next(pages: AsyncIterator[ObjectInfo]) -> ObjectInfo | None:
        try:
            return await anext(pages)
        except StopAsyncIteration:
            return None

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete`."""
        await self._call(lambda: self.inner.delete(key))

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`."""
        batch = list(keys)
        await self._call(lambda: self.inner.delete_many(batch))

    async def close(self) -> None:
        """Close the inner store (never retried)."""
        await self.inner.close()
