"""The chunk cache of the remote read path: aligned pieces of ``.log`` objects in a byte-bounded LRU.

A ``.log`` object is read in chunks ``[i * chunk_bytes, (i + 1) * chunk_bytes)`` (the last one short,
ending at the object size the manifest records). Each chunk is fetched by one task the cache owns, so:

* **single-flight**: concurrent readers of a chunk that is being fetched await the same task (through
  ``asyncio.shield``: a reader that gives up does not cancel the fetch the others wait for);
* **read-ahead** is the same fetch started without a waiter (:meth:`ChunkCache.prefetch`), bounded in
  number; its failure is counted and forgotten, and a reader that joined it fetches again itself;
* :meth:`ChunkCache.close` cancels and awaits every fetch still running.

Segment objects are immutable (a fresh UUID per upload), so cached chunks never go stale. A chunk shorter
than the object size says it should be is a torn object: :class:`RemoteObjectCorruptError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from tierlog.tiering.errors import InvalidRequestError, NotFoundError, TierlogError
from tierlog.tiering.remote.read_errors import ReadStats, RemoteObjectCorruptError, RemoteObjectMissingError
from tierlog.tiering.remote.store import ObjectStore

__all__ = ["ChunkCache"]

_log = logging.getLogger(__name__)

ChunkKey = tuple[str, int]


class ChunkCache:
    """Chunks of immutable objects in ``store``, at most ``capacity_bytes`` of them (LRU).

    All methods run on one event loop; state changes happen between awaits, so they are safe to call
    concurrently without a lock. ``max_prefetch`` bounds the read-ahead fetches running at once.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        chunk_bytes: int,
        capacity_bytes: int,
        max_prefetch: int,
        stats: ReadStats,
    ) -> None:
        if chunk_bytes <= 0 or capacity_bytes < 0 or max_prefetch < 0:
            raise InvalidRequestError("chunk size must be positive; capacity and read-ahead bound >= 0")
        self.store = store
        self.chunk_bytes = chunk_bytes
        self.capacity_bytes = capacity_bytes
        self.max_prefetch = max_prefetch
        self._stats = stats
        self._chunks: OrderedDict[ChunkKey, bytes] = OrderedDict()
        self._size = 0
        self._inflight: dict[ChunkKey, asyncio.Task[bytes]] = {}
        self._unjoined: set[asyncio.Task[bytes]] = set()  # read-ahead fetches nobody waits for yet
        self._prefetch_running = 0
        self._prefetched: set[ChunkKey] = set()  # cached by read-ahead, not used yet
        self._closed = False

    @property
    def cached_bytes(self) -> int:
        """Bytes of chunk data held now (never above ``capacity_bytes``)."""
        return self._size

    @property
    def cached_chunks(self) -> int:
        return len(self._chunks)

    def chunk_range(self, index: int, object_size: int) -> tuple[int, int]:
        """The byte range ``[start, end)`` of chunk ``index`` of an object of ``object_size`` bytes."""
        start = index * self.chunk_bytes
        return start, min(start + self.chunk_bytes, object_size)

    def is_present(self, key: str, index: int) -> bool:
        """Whether the chunk is cached or being fetched."""
        return (key, index) in self._chunks or (key, index) in self._inflight

    async def chunk(self, key: str, index: int, object_size: int) -> bytes:
        """Chunk ``index`` of ``key`` (an object of ``object_size`` bytes), from the cache or one shared GET.

        Safe to call concurrently; idempotent. Raises :class:`RemoteObjectMissingError` if the object is
        gone, :class:`RemoteObjectCorruptError` if it is shorter than ``object_size``, and whatever else
        the store raises (``UnavailableError`` after the store's own retries).
        """
        ck = (key, index)
        for _ in range(2):
            cached = self._chunks.get(ck)
            if cached is not None:
                self._chunks.move_to_end(ck)
                self._stats.cache_hits += 1
                if ck in self._prefetched:
                    self._prefetched.discard(ck)
                    self._stats.readahead_hits += 1
                return cached
            self._stats.cache_misses += 1
            task = self._inflight.get(ck)
            joined_prefetch = False
            if task is None or task.done():  # a done task still listed failed; its callback is pending
                task = self._start(key, index, object_size, prefetch=False)
            else:
                self._stats.singleflight_joins += 1
                if task in self._unjoined:
                    self._unjoined.discard(task)
                    self._stats.readahead_hits += 1
                    joined_prefetch = True
            try:
                return await asyncio.shield(task)
            except TierlogError:
                if not joined_prefetch or self._closed:
                    raise
                # A failed read-ahead is only counted; this reader fetches for itself.
        raise AssertionError("unreachable")  # pragma: no cover

    def prefetch(self, key: str, index: int, object_size: int) -> bool:
        """Start fetching a chunk in the background unless it is cached, in flight, or too many read-ahead
        fetches are running. Returns whether a fetch started. Never raises; idempotent.
        """
        if self._closed or self.is_present(key, index) or index * self.chunk_bytes >= object_size:
            return False
        if self._prefetch_running >= self.max_prefetch:
            self._stats.readahead_skipped += 1
            return False
        self._stats.readahead_fetches += 1
        self._start(key, index, object_size, prefetch=True)
        return True

    async def fetch_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key`` with one uncached GET (a batch larger than a chunk).

        Raises like :meth:`chunk` (a short answer is a torn object). Safe to call concurrently.
        """
        self._stats.oversized_reads += 1
        return await self._get(key, start, end)

    async def drain(self) -> None:
        """Wait until every fetch running now has finished (failures included). Tests and benchmarks use
        it to make read-ahead deterministic. Never raises except CancelledError.
        """
        while self._inflight:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)

    async def close(self) -> None:
        """Cancel and await every fetch, then drop the cache. Idempotent."""
        self._closed = True
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._inflight.clear()
        self._unjoined.clear()
        self._prefetched.clear()
        self._chunks.clear()
        self._size = 0

    # -- internals ---------------------------------------------------------------------------------

    def _start(self, key: str, index: int, object_size: int, *, prefetch: bool) -> asyncio.Task[bytes]:
        ck = (key, index)
        task = asyncio.get_running_loop().create_task(self._fetch(key, index, object_size))
        self._inflight[ck] = task
        if prefetch:
            self._unjoined.add(task)
            self._prefetch_running += 1
        task.add_done_callback(lambda done: self._finished(ck, done, prefetch))
        return task

    def _finished(self, ck: ChunkKey, task: asyncio.Task[bytes], prefetch: bool) -> None:
        if self._inflight.get(ck) is task:
            del self._inflight[ck]
        unjoined = task in self._unjoined
        self._unjoined.discard(task)
        if prefetch:
            self._prefetch_running -= 1
        if task.cancelled():
            return
        error = task.exception()  # retrieved here, so an unawaited read-ahead failure is never "lost"
        if error is not None:
            if prefetch:
                self._stats.readahead_errors += 1
                _log.info("read-ahead of %s chunk %d failed: %s", ck[0], ck[1], error)
            return
        if unjoined and ck in self._chunks:
            self._prefetched.add(ck)

    async def _fetch(self, key: str, index: int, object_size: int) -> bytes:
        start, end = self.chunk_range(index, object_size)
        data = await self._get(key, start, end)
        if not self._closed:
            self._store((key, index), data)
        return data

    async def _get(self, key: str, start: int, end: int) -> bytes:
        self._stats.remote_requests += 1
        try:
            data = await self.store.get_range(key, start, end)
        except NotFoundError as err:
            self._stats.remote_errors += 1
            self._stats.missing_errors += 1
            raise RemoteObjectMissingError(key) from err
        except TierlogError:
            self._stats.remote_errors += 1
            raise
        self._stats.remote_bytes += len(data)
        if len(data) != end - start:
            raise RemoteObjectCorruptError(
                key,
                f"torn object: bytes [{start}, {end}) requested, {len(data)} returned "
                f"(the manifest says the object is at least {end} bytes)",
            )
        return data

    def _store(self, ck: ChunkKey, data: bytes) -> None:
        if len(data) > self.capacity_bytes:
            return
        old = self._chunks.pop(ck, None)
        if old is not None:
            self._size -= len(old)
        self._chunks[ck] = data
        self._size += len(data)
        while self._size > self.capacity_bytes:
            evicted_key, evicted = self._chunks.popitem(last=False)
            self._size -= len(evicted)
            self._stats.cache_evictions += 1
            if evicted_key in self._prefetched:
                self._prefetched.discard(evicted_key)
                self._stats.readahead_unused += 1
