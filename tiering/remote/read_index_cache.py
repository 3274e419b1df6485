"""The index cache of the remote read path: decoded offset and time indexes (byte ranges of a packed
``.indexes`` object, or the older whole ``.index`` / ``.timeindex`` objects; see
:class:`~tierlog.tiering.remote.packed_indexes.IndexRef`) in an :class:`~tierlog.tiering.remote.lru.LruCache`
bounded by count and by bytes, each loaded by one shared GET (single-flight) owned by the cache.

A missing index object (``NotFoundError``) or one that fails its checks (:class:`IndexInvalid`) is
replaced by an empty stand-in marked ``missing``: lookups then start at position 0 and the reader scans
the segment (slower, still correct). Those stand-ins are cached like real indexes (the object will not
appear later under the same key: segment objects are written before the manifest lists them). A transient
failure (``UnavailableError``) also yields the stand-in, but it is not cached, so the next read tries again.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable
from typing import TypeVar

from tierlog.tiering.remote.lru import CacheListener, LruCache, Uncached
from tierlog.tiering.remote.manifest import RemoteSegment
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.packed_indexes import IndexRef
from tierlog.tiering.remote.read_errors import ReadStats
from tierlog.tiering.remote.read_index import (
    IndexInvalid,
    RemoteOffsetIndex,
    RemoteTimeIndex,
    decode_offset_index,
    decode_time_index,
)
from tierlog.wire.errors import InvalidRequestError, NotFoundError, UnavailableError

__all__ = ["IndexCache"]

_log = logging.getLogger(__name__)

AnyIndex = RemoteOffsetIndex | RemoteTimeIndex
_I = TypeVar("_I", RemoteOffsetIndex, RemoteTimeIndex)


class _IndexEvents(CacheListener[str, AnyIndex]):
    def __init__(self, stats: ReadStats) -> None:
        self.stats = stats

    def on_hit(self, key: str, value: AnyIndex) -> None:
        self.stats.index_hits += 1


def _index_size(index: AnyIndex) -> int:
    return index.nbytes


class IndexCache:
    """Decoded indexes keyed by object key. Safe to call concurrently on one event loop (no lock is held
    across an await). Raises nothing for a missing or invalid index; ``UnauthorizedError`` and other
    non-transient store errors propagate (nothing is cached: the next lookup loads again), and
    ``UnavailableError`` once the cache is closed.
    """

    def __init__(self, store: ObjectStore, *, max_entries: int, max_bytes: int, stats: ReadStats) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise InvalidRequestError("index cache bounds must not be negative")
        self.store = store
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._stats = stats
        self._lru: LruCache[str, AnyIndex] = LruCache(
            max_bytes=max_bytes, max_entries=max_entries, size_of=_index_size, listener=_IndexEvents(stats)
        )

    def __len__(self) -> int:
        return len(self._lru)

    async def offset_index(self, ref: IndexRef, segment: RemoteSegment) -> RemoteOffsetIndex:
        """The offset index at ``ref`` of ``segment`` (or the empty stand-in). Idempotent."""

        return await self._get(
            ref, RemoteOffsetIndex, self._offset_decoder(segment), self._offset_stand_in(segment)
        )

    @staticmethod
    def _offset_decoder(segment: RemoteSegment) -> Callable[[bytes], RemoteOffsetIndex]:
        def decode(data: bytes) -> RemoteOffsetIndex:
            return decode_offset_index(data, segment.base_offset, segment.last_offset, segment.size_bytes)

        return decode

    @staticmethod
    def _offset_stand_in(segment: RemoteSegment) -> Callable[[], RemoteOffsetIndex]:
        def stand_in() -> RemoteOffsetIndex:
            return RemoteOffsetIndex(segment.base_offset, array("q"), array("q"), missing=True)

        return stand_in

    async def time_index(self, ref: IndexRef, segment: RemoteSegment) -> RemoteTimeIndex:
        """The time index at ``ref`` of ``segment`` (or the empty stand-in). Idempotent."""

        def decode(data: bytes) -> RemoteTimeIndex:
            return decode_time_index(data, segment.base_offset, segment.last_offset)

        def stand_in() -> RemoteTimeIndex:
            return RemoteTimeIndex(segment.base_offset, array("q"), array("q"), missing=True)

        return await self._get(ref, RemoteTimeIndex, decode, stand_in)

    def forget(self, ref: IndexRef) -> None:
        """Drop a cached index (it disagreed with its log). Idempotent."""
        self._lru.discard(ref.cache_key)

    async def close(self) -> None:
        """Cancel and await the loads in flight and drop the cache. Idempotent."""
        await self._lru.close()

    # -- internals ---------------------------------------------------------------------------------

    async def _get(
        self, ref: IndexRef, kind: type[_I], decode: Callable[[bytes], _I], stand_in: Callable[[], _I]
    ) -> _I:
        index = await self._lru.get_or_load(ref.cache_key, lambda: self._load(ref, decode, stand_in))
        assert isinstance(index, kind), f"{ref.cache_key} is cached as a {type(index).__name__}"  # by kind
        return index

    async def _load(
        self, ref: IndexRef, decode: Callable[[bytes], AnyIndex], stand_in: Callable[[], AnyIndex]
    ) -> AnyIndex | Uncached[AnyIndex]:
        key = ref.cache_key
        try:
            if ref.empty:  # a packed segment without entries of this kind: nothing to fetch
                data = b""
            else:
                self._stats.remote_requests += 1
                data = await self._fetch(ref)
        except NotFoundError:
            self._stats.remote_errors += 1
            self._stats.index_missing += 1
            _log.warning("remote index %s is missing: reads of its segment scan from the start", key)
            return stand_in()
        except UnavailableError as err:
            self._stats.remote_errors += 1
            _log.info("remote index %s unavailable (%s): scanning this time", key, err)
            return Uncached(stand_in())
        if ref.end is not None and len(data) != ref.end - ref.start:
            self._stats.index_invalid += 1
            _log.warning(
                "remote index %s is %d bytes, its manifest entry says %d: reads of its segment scan from "
                "position 0",
                key,
                len(data),
                ref.end - ref.start,
            )
            return stand_in()
        self._stats.remote_bytes += len(data)
        self._stats.index_loads += 1
        try:
            return decode(data)
        except IndexInvalid as err:
            self._stats.index_invalid += 1
            _log.warning(
                "remote index %s is invalid (%s): reads of its segment scan from position 0", key, err
            )
            return stand_in()

    async def _fetch(self, ref: IndexRef) -> bytes:
        if ref.start == 0 and ref.end is None:
            return await self.store.get(ref.object_key)
        return await self.store.get_range(ref.object_key, ref.start, ref.end)
