"""A least-recently-used cache bounded in bytes (and optionally in entries) whose misses load through one
shared task per key (single-flight). The remote read path builds its chunk cache and its index cache on it.

* **Single-flight**: concurrent :meth:`LruCache.get_or_load` calls for a key that is not cached await one
  load task, through ``asyncio.shield``: a waiter that gives up does not cancel the load the others await.
* **Ownership**: every load task belongs to the cache; :meth:`LruCache.close` cancels and awaits them.
  Background loads (:meth:`LruCache.load_in_background`) have no waiter; their failures are retrieved by
  the cache, so a loader that wants them reported logs them itself.
* **What is cached**: a loaded value, unless the loader wraps it in :class:`Uncached` (a degraded answer
  after a transient failure) or it alone exceeds a bound. A load that raises caches nothing: the next
  get loads again.
* **Bounds** hold after every insertion: the least recently used entries are evicted until the cached
  sizes (``size_of`` of each value, taken once on insertion) sum to at most ``max_bytes`` and at most
  ``max_entries`` entries remain.

Values are treated as immutable: the cache never copies them, and a key is never refreshed while cached.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tierlog.wire.errors import InvalidRequestError, UnavailableError

__all__ = ["CacheListener", "Loader", "LruCache", "Uncached"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Uncached(Generic[V]):
    """What a loader returns to hand ``value`` to the waiters of its load without caching it."""

    value: V


Loader = Callable[[], Awaitable[V | Uncached[V]]]
"""Produces the value of a missing key; called at most once per load, inside the cache's task."""


class CacheListener(Generic[K, V]):
    """Stats hooks of an :class:`LruCache`; every hook does nothing unless overridden. Hooks are called
    synchronously on the event loop, between awaits; they must not raise.
    """

    def on_hit(self, key: K, value: V) -> None:
        """``get_or_load`` found ``key`` cached (and marked it most recently used)."""

    def on_miss(self, key: K, joined: bool) -> None:
        """``get_or_load`` did not find ``key`` cached; ``joined`` says whether a load was already running."""

    def on_evict(self, key: K, value: V) -> None:
        """``value`` was evicted to keep the cache within its bounds (not called by discard or close)."""


class LruCache(Generic[K, V]):
    """The cache described in the module docstring.

    All methods run on one event loop and change state only between awaits, so they are safe to call
    concurrently without a lock. Raises :class:`InvalidRequestError` for a negative bound.
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        size_of: Callable[[V], int],
        max_entries: int | None = None,
        listener: CacheListener[K, V] | None = None,
    ) -> None:
        if max_bytes < 0 or (max_entries is not None and max_entries < 0):
            raise InvalidRequestError("cache bounds must not be negative")
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._size_of = size_of
        self._listener: CacheListener[K, V] = listener if listener is not None else CacheListener()
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._loading: dict[K, asyncio.Task[V]] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        """Whether ``key`` is cached now (does not mark it used)."""
        return key in self._entries

    @property
    def cached_bytes(self) -> int:
        """The summed sizes of the cached values (never above ``max_bytes``)."""
        return self._bytes

    def keys(self) -> list[K]:
        """The cached keys, least recently used first."""
        return list(self._entries)

    def is_loading(self, key: K) -> bool:
        """Whether a load of ``key`` is running."""
        return key in self._loading

    async def get_or_load(self, key: K, loader: Loader[V]) -> V:
        """The cached value of ``key``, or the result of the load running for it, or of a new load by
        ``loader`` (which is not called if the key is cached or loading). Safe to call concurrently.

        Raises what the load raised (to every waiter of that load; nothing is cached), and
        :class:`UnavailableError` if the cache is closed or was closed while the load ran. Cancelling
        the caller cancels only its wait.
        """
        if self._closed:
            raise UnavailableError("the cache is closed")
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._listener.on_hit(key, entry[0])
            return entry[0]
        task = self._loading.get(key)
        self._listener.on_miss(key, task is not None)
        if task is None:
            task = self._start(key, loader)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and not _cancelling():
                raise UnavailableError(f"the cache was closed while loading {key!r}") from None
            raise

    def load_in_background(self, key: K, loader: Loader[V]) -> bool:
        """Start loading ``key`` with no waiter, unless it is cached, loading or the cache is closed.
        Returns whether a load started. Never raises; idempotent. Must be called on the event loop.
        """
        if self._closed or key in self._entries or key in self._loading:
            return False
        self._start(key, loader)
        return True

    def discard(self, key: K) -> None:
        """Drop ``key`` from the cache if it is there (a load running for it is not affected). Idempotent."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]

    async def drain(self) -> None:
        """Wait until no load is running (failures included; loads started meanwhile too). Cancelling
        the caller does not cancel the loads. Never raises except CancelledError.
        """
        while self._loading:
            await asyncio.wait(list(self._loading.values()))

    async def close(self) -> None:
        """Cancel and await every running load, then drop every entry. Idempotent; later gets raise
        :class:`UnavailableError`.
        """
        self._closed = True
        tasks = list(self._loading.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._loading.clear()
        self._entries.clear()
        self._bytes = 0

    # -- internals ---------------------------------------------------------------------------------

    def _start(self, key: K, loader: Loader[V]) -> asyncio.Task[V]:
        task = asyncio.get_running_loop().create_task(self._load(key, loader))
        self._loading[key] = task
        task.add_done_callback(_retrieve)
        return task

    async def _load(self, key: K, loader: Loader[V]) -> V:
        # No await after the loader returns: the value is cached and the key stops loading in one step,
        # so no caller can see neither.
        try:
            result = await loader()
        finally:
            if self._loading.get(key) is asyncio.current_task():
                del self._loading[key]
        if isinstance(result, Uncached):
            return result.value
        if not self._closed:
            self._insert(key, result)
        return result

    def _insert(self, key: K, value: V) -> None:
        self.discard(key)
        size = self._size_of(value)
        if size > self.max_bytes or self.max_entries == 0:
            return
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes or (
            self.max_entries is not None and len(self._entries) > self.max_entries
        ):
            evicted_key, (evicted, evicted_size) = self._entries.popitem(last=False)
            self._bytes -= evicted_size
            self._listener.on_evict(evicted_key, evicted)


def _cancelling() -> bool:
    """Whether the current task is being cancelled (rather than seeing a load it awaited cancelled)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _retrieve(task: asyncio.Task[object]) -> None:
    """Mark a load's failure as retrieved: the waiters got it, and a background load has none."""
    if not task.cancelled():
        task.exception()
