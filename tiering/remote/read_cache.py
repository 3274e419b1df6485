"""The chunk cache of the remote read path: aligned pieces of ``.log`` objects in a byte-bounded LRU.

A ``.log`` object is read in chunks ``[i * chunk_bytes, (i + 1) * chunk_bytes)`` (the last one short,
ending at the object size the manifest records), through an :class:`~tierlog.tiering.remote.lru.LruCache`:

* **single-flight**: concurrent readers of a chunk that is being fetched await the same task, and a
  reader that gives up does not cancel the fetch the others wait for;
* **read-ahead** is the same fetch started without a waiter (:meth:`ChunkCache.prefetch`), bounded in
  number; its failure is counted and logged, and a reader that joined it fetches again itself;
* :meth:`ChunkCache.close` cancels and awaits every fetch still running.

Segment objects are immutable (a fresh UUID per upload), so cached chunks never go stale. A chunk shorter
than the object size says it should be is a torn object: :class:`RemoteObjectCorruptError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tierlog.tiering.remote.lru import CacheListener, LruCache
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.read_errors import ReadStats, RemoteObjectCorruptError, RemoteObjectMissingError
from tierlog.wire.errors import InvalidRequestError, NotFoundError, TierlogError

__all__ = ["ChunkCache"]

_log = logging.getLogger(__name__)

ChunkKey = tuple[str, int]


@dataclass(slots=True)
class _Chunk:
    data: bytes
    unused_readahead: bool  # fetched by read-ahead, not read yet


class _ChunkEvents(CacheListener[ChunkKey, _Chunk]):
    """Counts the chunk LRU's events into the reader's :class:`ReadStats`."""

    def __init__(self, stats: ReadStats) -> None:
        self.stats = stats

    def on_hit(self, key: ChunkKey, value: _Chunk) -> None:
        self.stats.cache_hits += 1
        if value.unused_readahead:
            value.unused_readahead = False
            self.stats.readahead_hits += 1

    def on_miss(self, key: ChunkKey, joined: bool) -> None:
        self.stats.cache_misses += 1
        if joined:
            self.stats.singleflight_joins += 1

    def on_evict(self, key: ChunkKey, value: _Chunk) -> None:
        self.stats.cache_evictions += 1
        if value.unused_readahead:
            self.stats.readahead_unused += 1


def _chunk_size(chunk: _Chunk) -> int:
    return len(chunk.data)


class ChunkCache:
    """Chunks of immutable objects in ``store``, at most ``capacity_bytes`` of them (LRU).

    All methods run on one event loop; state changes happen between awaits, so they are safe to call
    concurrently without a lock. ``max_prefetch`` bounds the read-ahead fetches running at once.
    Raises :class:`InvalidRequestError` for a non-positive chunk size or a negative bound.
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
        self._lru: LruCache[ChunkKey, _Chunk] = LruCache(
            max_bytes=capacity_bytes, size_of=_chunk_size, listener=_ChunkEvents(stats)
        )
        self._readahead: dict[ChunkKey, bool] = {}  # read-ahead fetches running -> whether a reader joined
        self._closed = False

    @property
    def cached_bytes(self) -> int:
        """Bytes of chunk data held now (never above ``capacity_bytes``)."""
        return self._lru.cached_bytes

    @property
    def cached_chunks(self) -> int:
        return len(self._lru)

    def chunk_range(self, index: int, object_size: int) -> tuple[int, int]:
        """The byte range ``[start, end)`` of chunk ``index`` of an object of ``object_size`` bytes."""
        start = index * self.chunk_bytes
        return start, min(start + self.chunk_bytes, object_size)

    def is_present(self, key: str, index: int) -> bool:
        """Whether the chunk is cached or being fetched."""
        return (key, index) in self._lru or self._lru.is_loading((key, index))

    async def chunk(self, key: str, index: int, object_size: int) -> bytes:
        """Chunk ``index`` of ``key`` (an object of ``object_size`` bytes), from the cache or one shared GET.

        Safe to call concurrently; idempotent. Raises :class:`RemoteObjectMissingError` if the object is
        gone, :class:`RemoteObjectCorruptError` if it is shorter than ``object_size``, ``UnavailableError``
        if the cache is closed, and whatever else the store raises (``UnavailableError`` after the
        store's own retries).
        """

        async def fetch() -> _Chunk:
            return _Chunk(await self._get(key, *self.chunk_range(index, object_size)), False)

        joined_readahead = self._join_readahead((key, index))
        try:
            return (await self._lru.get_or_load((key, index), fetch)).data
        except TierlogError:
            if not joined_readahead or self._closed:
                raise
        # The read-ahead this reader joined failed (that is only counted): fetch for itself.
        return (await self._lru.get_or_load((key, index), fetch)).data

    def prefetch(self, key: str, index: int, object_size: int) -> bool:
        """Start fetching a chunk in the background unless it is cached, in flight, or too many read-ahead
        fetches are running. Returns whether a fetch started. Never raises; idempotent.
        """
        if self._closed or self.is_present(key, index) or index * self.chunk_bytes >= object_size:
            return False
        if len(self._readahead) >= self.max_prefetch:
            self._stats.readahead_skipped += 1
            return False
        self._stats.readahead_fetches += 1
        self._readahead[(key, index)] = False
        return self._lru.load_in_background((key, index), lambda: self._read_ahead(key, index, object_size))

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
        await self._lru.drain()

    async def close(self) -> None:
        """Cancel and await every fetch, then drop the cache. Idempotent."""
        self._closed = True
        await self._lru.close()
        self._readahead.clear()

    # -- internals ---------------------------------------------------------------------------------

    def _join_readahead(self, ck: ChunkKey) -> bool:
        """Whether a read-ahead of ``ck`` is running (the first reader to join one counts a hit)."""
        joined = self._readahead.get(ck)
        if joined is None:
            return False
        if not joined:
            self._readahead[ck] = True
            self._stats.readahead_hits += 1
        return True

    async def _read_ahead(self, key: str, index: int, object_size: int) -> _Chunk:
        try:
            data = await self._get(key, *self.chunk_range(index, object_size))
        except Exception as err:
            self._stats.readahead_errors += 1
            _log.info("read-ahead of %s chunk %d failed: %s", key, index, err)
            raise
        finally:
            joined = self._readahead.pop((key, index), True)
        return _Chunk(data, unused_readahead=not joined)

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
