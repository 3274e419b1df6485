"""A wrapper that caches ranged reads in fixed-size, chunk-aligned blocks with a byte-bounded LRU.

Remote fetches read the same few index and segment regions over and over (a consumer catching up reads a
segment front to back; many consumers read the same tail). A ``get_range(key, start, end)`` is served from
chunks ``[start // chunk_size, ceil(end / chunk_size))``; runs of missing chunks are fetched with one
ranged GET each and cached. A chunk shorter than ``chunk_size`` marks the object's end.

The cache assumes objects do not change behind its back, which holds for tierlog's layout (segment
objects are written once under a fresh UUID). Writes and deletes *through this wrapper* invalidate the
key; a fetch that was in flight when its key was invalidated is returned to its caller but not cached.
Manifests are mutable by design: read them through the uncached store.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.errors import InvalidRequestError
from tierlog.tiering.remote.store import ObjectInfo, ObjectStore, validate_range

__all__ = ["CacheStats", "CachingStore"]


_MAX_TRACKED_KEYS = 1 << 16


def _trim(table: dict[str, int]) -> None:
    """Drop the oldest entries of a per-key table beyond ``_MAX_TRACKED_KEYS``."""
    while len(table) > _MAX_TRACKED_KEYS:
        table.pop(next(iter(table)))


@dataclass(slots=True)
class CacheStats:
    """Chunk-level counters: ``hits``/``misses`` count chunks, ``fetches`` the ranged GETs issued."""

    hits: int = 0
    misses: int = 0
    fetches: int = 0
    evictions: int = 0
    invalidations: int = 0


class CachingStore:
    """:class:`ObjectStore` caching ``get_range`` of ``inner`` in ``chunk_size`` blocks, at most
    ``capacity_bytes`` of chunk data in total (least recently used chunks are evicted first).

    ``get`` and listings pass through uncached. Safe to call concurrently on one event loop (state is
    only touched between awaits). Raises whatever ``inner`` raises.
    """

    def __init__(
        self, inner: ObjectStore, *, chunk_size: int = 1 << 20, capacity_bytes: int = 64 << 20
    ) -> None:
        if chunk_size <= 0 or capacity_bytes < 0:
            raise InvalidRequestError("cache chunk size must be positive and capacity non-negative")
        self.inner = inner
        self.chunk_size = chunk_size
        self.capacity_bytes = capacity_bytes
        self.stats = CacheStats()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._generation: dict[str, int] = {}
        self._sizes: dict[str, int] = {}  # object sizes learnt from a short (final) chunk
        self._invalidations = 0  # a global counter, so a generation value is never reused

    def __repr__(self) -> str:
        return f"CachingStore({self.inner!r}, chunk_size={self.chunk_size}, capacity={self.capacity_bytes})"

    @property
    def cached_bytes(self) -> int:
        """Bytes of chunk data held now (never above ``capacity_bytes``)."""
        return self._size

    # -- cache mechanics -------------------------------------------------------------------------

    def _lookup(self, key: str, index: int) -> bytes | None:
        chunk = self._chunks.get((key, index))
        if chunk is not None:
            self._chunks.move_to_end((key, index))
        return chunk

    def _store(self, key: str, index: int, chunk: bytes) -> None:
        if len(chunk) > self.capacity_bytes:
            return
        if len(chunk) < self.chunk_size:
            self._sizes[key] = index * self.chunk_size + len(chunk)
            _trim(self._sizes)
        old = self._chunks.pop((key, index), None)
        if old is not None:
            self._size -= len(old)
        self._chunks[(key, index)] = chunk
        self._size += len(chunk)
        while self._size > self.capacity_bytes:
            _, evicted = self._chunks.popitem(last=False)
            self._size -= len(evicted)
            self.stats.evictions += 1

    def invalidate(self, key: str) -> None:
        """Forget every cached chunk of ``key``. Idempotent."""
        self._invalidations += 1
        self._generation[key] = self._invalidations
        self.stats.invalidations += 1
        self._sizes.pop(key, None)
        for cached in [k for k in self._chunks if k[0] == key]:
            self._size -= len(self._chunks.pop(cached))
        # Bounded bookkeeping: forgetting an old generation only makes an in-flight fetch skip caching.
        _trim(self._generation)
        _trim(self._sizes)

    async def _fetch_run(self, key: str, first: int, count: int | None) -> list[bytes]:
        """Fetch chunks ``first .. first+count-1`` (``count=None``: to the end of the object) with one
        ranged GET and cache them. A read to the end also caches the empty chunk after a full last one,
        so the end of the object is known next time.
        """
        generation = self._generation.get(key, 0)
        self.stats.fetches += 1
        size = self.chunk_size
        end = None if count is None else (first + count) * size
        data = await self.inner.get_range(key, first * size, end)
        if count is None:
            count = len(data) // size + 1  # the last chunk is short (possibly empty)
        chunks = [data[i * size : (i + 1) * size] for i in range(count)]
        if self._generation.get(key, 0) == generation:
            for i, chunk in enumerate(chunks):
                self._store(key, first + i, chunk)
        return chunks

    async def _chunks_between(self, key: str, first: int, last: int) -> list[bytes]:
        """Chunks ``first..last`` inclusive, stopping early after a short (final) chunk."""
        out: list[bytes] = []
        index = first
        while index <= last:
            chunk = self._lookup(key, index)
            if chunk is not None:
                self.stats.hits += 1
                out.append(chunk)
                index += 1
            else:
                run = 1
                while index + run <= last and (key, index + run) not in self._chunks:
                    run += 1
                self.stats.misses += run
                fetched = await self._fetch_run(key, index, run)
                out.extend(fetched)
                index += run
                chunk = fetched[-1]
            if len(chunk) < self.chunk_size:
                break
        return out

    # -- the protocol ----------------------------------------------------------------------------

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`, served from cached chunks where possible.

        With ``end=None``, cached chunks are used up to the first gap; the rest of the object is then
        fetched with one request (a short chunk marks the end of the object).
        """
        validate_range(start, end)
        size = self._sizes.get(key)
        if size is not None:  # the end of the object is known: clamp, and read past it for free
            end = size if end is None else min(end, size)
            if start >= end:
                self.stats.hits += 1
                return b""
        if end is not None and end == start:
            return b""
        first = start // self.chunk_size
        if end is None:
            parts: list[bytes] = []
            index = first
            while (chunk := self._lookup(key, index)) is not None:
                self.stats.hits += 1
                parts.append(chunk)
                index += 1
                if len(chunk) < self.chunk_size:
                    break
            else:
                fetched = await self._fetch_run(key, index, None)
                self.stats.misses += len(fetched)
                parts.extend(fetched)
        else:
            parts = await self._chunks_between(key, first, (end - 1) // self.chunk_size)
        data = b"".join(parts)
        offset = start - first * self.chunk_size
        return data[offset:] if end is None else data[offset : offset + (end - start)]

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get` (not cached)."""
        return await self.inner.get(key)

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`; invalidates ``key``."""
        self.invalidate(key)
        try:
            await self.inner.put(key, data)
        finally:
            self.invalidate(key)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent`; invalidates ``key``."""
        self.invalidate(key)
        try:
            return await self.inner.put_if_absent(key, data)
        finally:
            self.invalidate(key)

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`; invalidates ``key``."""
        self.invalidate(key)
        try:
            await self.inner.put_file(key, path)
        finally:
            self.invalidate(key)

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head` (not cached)."""
        return await self.inner.head(key)

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list` (not cached)."""
        async for info in self.inner.list(prefix, start_after=start_after):
            yield info

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete`; invalidates ``key``."""
        self.invalidate(key)
        try:
            await self.inner.delete(key)
        finally:
            self.invalidate(key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`; invalidates every key."""
        batch = list(keys)
        for key in batch:
            self.invalidate(key)
        try:
            await self.inner.delete_many(batch)
        finally:
            for key in batch:
                self.invalidate(key)

    async def close(self) -> None:
        """Drop the cache and close the inner store."""
        self._chunks.clear()
        self._sizes.clear()
        self._size = 0
        await self.inner.close()
