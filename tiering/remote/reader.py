"""The remote read path: serve fetches below the local log start offset from the bucket.

One :class:`RemoteReader` per broker, shared by every partition. A read goes::

    manifest --(segment holding the offset)--> offset index (cached) --(largest entry <= offset)-->
    position --(walk batch headers in cached chunks)--> batch holding the offset --(whole batches up to
    max_bytes, never past the segment's end)--> CRC check of every batch --> bytes

The bytes are the segment's batches unmodified, exactly what a local read of the same segment returns,
so a consumer cannot tell the two apart except by speed. Design: ``docs/design/0003-remote-reads.md``.

Caching: ``.log`` objects are read in aligned chunks through a byte-bounded LRU with single-flight
fetches (:mod:`tierlog.tiering.remote.read_cache`); indexes through a bounded LRU of decoded entries
(:mod:`tierlog.tiering.remote.read_index_cache`); both are built on :mod:`tierlog.tiering.remote.lru`.
Read-ahead: when a read continues where an earlier read of the partition ended (each sequential consumer
is a stream of its own), the chunks it may need and ``readahead_chunks`` more, continuing into the next
segment, are fetched in the background by tasks the cache owns before the read waits for anything.
Nothing holds a lock across an await, so reads of many partitions proceed concurrently.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from tierlog.tiering.codec.header import HEADER_SIZE, BatchHeader, decode_header, verify_batch
from tierlog.tiering.remote import layout
from tierlog.tiering.remote.manifest import Manifest, RemoteSegment, readable_segments
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.packed_indexes import IndexRef, segment_index_refs
from tierlog.tiering.remote.read_cache import ChunkCache
from tierlog.tiering.remote.read_errors import ReadStats, RemoteObjectCorruptError, RemoteObjectMissingError
from tierlog.tiering.remote.read_index_cache import IndexCache
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError, OffsetOutOfRangeError

__all__ = ["RemoteReader", "RemoteReadResult", "RemoteObjectCorruptError", "RemoteObjectMissingError"]

_MAX_TRACKED_STREAMS = 1 << 14
_VERIFY_IN_THREAD_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class RemoteReadResult:
    """Whole, CRC-checked batches of one remote segment; ``data`` may begin with a batch below the
    requested offset (the one holding it). ``next_offset`` is where the next sequential read starts.
    """

    data: bytes
    next_offset: int
    segment_uuid: uuid.UUID


@dataclass(frozen=True, slots=True)
class _Cursor:
    """Where a partition's last read ended: the offset and byte position the next sequential read
    starts at (the position may equal the segment's size: the next read starts the next segment).
    """

    next_offset: int
    segment_uuid: uuid.UUID
    end_position: int


class _SegmentView:
    """One read's window on a ``.log`` object: chunks fetched through the cache are kept for the rest of
    the read, so walking many batch headers costs one cache lookup per chunk, not per header.
    """

    def __init__(self, cache: ChunkCache, key: str, segment: RemoteSegment) -> None:
        self.cache = cache
        self.key = key
        self.segment = segment
        self.size = segment.size_bytes
        self.chunk_bytes = cache.chunk_bytes
        self._local: dict[int, bytes] = {}

    def corrupt(self, message: str) -> RemoteObjectCorruptError:
        return RemoteObjectCorruptError(self.key, message)

    async def _ensure(self, first: int, last: int) -> None:
        missing = [i for i in range(first, last + 1) if i not in self._local]
        if len(missing) == 1:
            self._local[missing[0]] = await self.cache.chunk(self.key, missing[0], self.size)
        elif missing:
            fetched = await asyncio.gather(*(self.cache.chunk(self.key, i, self.size) for i in missing))
            self._local.update(zip(missing, fetched, strict=True))

    async def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (``end <= size``), stitched from chunks."""
        first, last = start // self.chunk_bytes, (end - 1) // self.chunk_bytes
        await self._ensure(first, last)
        base = first * self.chunk_bytes
        if first == last:
            chunk = self._local[first]
            if start == base and end - base == len(chunk):
                return chunk  # a whole chunk: handed over as cached, no copy
            return chunk[start - base : end - base]
        size = self.chunk_bytes
        pieces = [memoryview(self._local[i]) for i in range(first, last + 1)]
        pieces[0] = pieces[0][start - base :]
        pieces[-1] = pieces[-1][: end - last * size]
        return b"".join(pieces)  # one copy of just the bytes asked for

    async def header(self, position: int) -> BatchHeader:
        """The batch header at ``position``; raises :class:`RemoteObjectCorruptError` if it is torn or
        malformed.
        """
        if position + HEADER_SIZE > self.size:
            raise self.corrupt(f"the object ends inside a batch header at position {position}")
        index, within = divmod(position, self.chunk_bytes)
        await self._ensure(index, index)
        chunk = self._local[index]
        if within + HEADER_SIZE <= len(chunk):
            buf, at = chunk, within
        else:  # the header spans two chunks
            buf, at = await self.read(position, position + HEADER_SIZE), 0
        try:
            header = decode_header(buf, at)
        except CorruptRecordError as err:
            raise self.corrupt(f"bad batch header at position {position}: {err}") from err
        segment = self.segment
        if header.base_offset < segment.base_offset or header.last_offset > segment.last_offset:
            raise self.corrupt(
                f"batch at position {position} holds offsets {header.base_offset}..{header.last_offset}, "
                f"outside the segment's {segment.base_offset}..{segment.last_offset}"
            )
        if position + header.size > self.size:
            raise self.corrupt(
                f"torn object: the batch at position {position} needs {header.size} bytes, "
                f"{self.size - position} remain"
            )
        return header


class RemoteReader:
    """Reads remote segments for every partition of a broker (see the module docstring).

    ``cache_bytes`` bounds the chunk cache, ``chunk_bytes`` is the unit of GETs, ``readahead_chunks``
    how far ahead a sequential reader is prefetched (0: no read-ahead), ``index_cache_entries`` /
    ``index_cache_bytes`` bound the index cache, ``readahead_tasks`` the read-ahead GETs running at once
    (default ``4 * readahead_chunks``, at least 8).

    Every public coroutine is safe to call concurrently from one event loop. Pass the store that is read
    (typically retrying and instrumented); the reader adds its own caching and does not close it.
    """

    DEFAULT_READAHEAD_CHUNKS = 4

    def __init__(
        self,
        store: ObjectStore,
        *,
        cache_bytes: int = 256 * 2**20,
        chunk_bytes: int = 4 * 2**20,
        readahead_chunks: int = DEFAULT_READAHEAD_CHUNKS,
        index_cache_entries: int = 1024,
        index_cache_bytes: int = 64 * 2**20,
        readahead_tasks: int | None = None,
    ) -> None:
        if chunk_bytes < HEADER_SIZE or readahead_chunks < 0:
            raise InvalidRequestError(f"chunk_bytes must be >= {HEADER_SIZE}, readahead_chunks >= 0")
        self.store = store
        self.readahead_chunks = readahead_chunks
        self._stats = ReadStats()
        tasks = readahead_tasks if readahead_tasks is not None else max(8, 4 * readahead_chunks)
        self._chunks = ChunkCache(
            store, chunk_bytes=chunk_bytes, capacity_bytes=cache_bytes, max_prefetch=tasks, stats=self._stats
        )
        self._indexes = IndexCache(
            store, max_entries=index_cache_entries, max_bytes=index_cache_bytes, stats=self._stats
        )
        # where recent reads ended, by (topic, partition, next offset): one entry per sequential stream, so
        # several consumers of one partition at different positions each keep their read-ahead (bounded LRU)
        self._cursors: OrderedDict[tuple[str, int, int], _Cursor] = OrderedDict()
        self._closed = False

    @property
    def chunk_bytes(self) -> int:
        return self._chunks.chunk_bytes

    def stats(self) -> dict[str, int]:
        """Counters (see :class:`ReadStats`) plus the caches' current sizes. Safe to call at any time."""
        out = self._stats.as_dict()
        out["cache_bytes"] = self._chunks.cached_bytes
        out["cache_chunks"] = self._chunks.cached_chunks
        out["index_cache_entries"] = len(self._indexes)
        return out

    async def read(self, manifest: Manifest, offset: int, max_bytes: int) -> RemoteReadResult:
        """Whole batches from the one holding ``offset``: at least one, otherwise at most ``max_bytes``,
        never past the end of that segment (the caller asks again from ``next_offset``). An offset in a
        gap between segments reads from the next segment. Idempotent; safe to call concurrently.

        A read that continues an earlier read of the partition (starts at its ``next_offset``) starts where
        that one ended and triggers read-ahead (see the module docstring); any other read finds its
        position through the segment's offset index.

        Raises:
            OffsetOutOfRangeError: no readable remote segment holds ``offset`` or anything after it.
            RemoteObjectCorruptError (a CorruptRecordError): a batch fails its CRC or framing, the object is
                torn, or the index or the log disagrees with the manifest. No data is returned.
            RemoteObjectMissingError (a NotFoundError): the ``.log`` object is missing.
            UnavailableError: the store keeps failing (after the store's own retries).
        """
        self._check_open()
        cursor = self._cursors.pop((manifest.topic, manifest.partition, offset), None)
        if cursor is not None:
            self._stats.sequential_reads += 1
            self._maybe_readahead(manifest, cursor, max_bytes)
        segment = self._segment_for(manifest, offset)
        key = layout.segment_key(
            manifest.topic, manifest.partition, segment.base_offset, segment.segment_uuid
        )
        view = _SegmentView(self._chunks, key, segment)
        offset_ref, _ = segment_index_refs(manifest.topic, manifest.partition, segment)
        try:
            hint = cursor.end_position if cursor and cursor.segment_uuid == segment.segment_uuid else None
            start, first = await self._locate(view, offset_ref, offset, hint)
            end, headers = await self._extent(view, start, first, max_bytes)
            data = await self._batches(view, start, end, headers)
        except RemoteObjectCorruptError:
            self._stats.corrupt_errors += 1
            raise
        self._stats.reads += 1
        self._stats.bytes_served += len(data)
        next_offset = headers[-1].next_offset
        self._cursors[(manifest.topic, manifest.partition, next_offset)] = _Cursor(
            next_offset, segment.segment_uuid, end
        )
        if len(self._cursors) > _MAX_TRACKED_STREAMS:
            self._cursors.popitem(last=False)
        return RemoteReadResult(data, next_offset, segment.segment_uuid)

    async def offset_for_timestamp(self, manifest: Manifest, timestamp: int) -> tuple[int, int] | None:
        """``(offset, max_timestamp)`` of the first remote batch whose max timestamp is >= ``timestamp``:
        its base offset (at least the manifest's log start offset) and its max timestamp, as the local log
        answers; ``None`` if no readable remote segment has one. The batch is CRC-checked first.
        Idempotent; safe to call concurrently.

        Raises:
            RemoteObjectCorruptError, RemoteObjectMissingError, UnavailableError: as :meth:`read`.
        """
        self._check_open()
        try:
            return await self._find_timestamp(manifest, timestamp)
        except RemoteObjectCorruptError:
            self._stats.corrupt_errors += 1
            raise

    async def _find_timestamp(self, manifest: Manifest, timestamp: int) -> tuple[int, int] | None:
        for segment in readable_segments(manifest):
            if segment.max_timestamp < timestamp:
                continue
            key = layout.segment_key(
                manifest.topic, manifest.partition, segment.base_offset, segment.segment_uuid
            )
            view = _SegmentView(self._chunks, key, segment)
            offset_ref, time_ref = segment_index_refs(manifest.topic, manifest.partition, segment)
            time_index = await self._indexes.time_index(time_ref, segment)
            position, header = await self._locate(view, offset_ref, time_index.lookup(timestamp))
            while True:
                if header.max_timestamp >= timestamp:
                    await self._batches(view, position, position + header.size, [header])
                    return max(header.base_offset, manifest.log_start_offset), header.max_timestamp
                position += header.size
                if position >= view.size:
                    break
                header = await self._next_header(view, position, header)
        return None

    async def wait_readahead(self) -> None:
        """Wait for the read-ahead (and other) fetches running now to finish. For tests and benchmarks:
        it makes "the next read is a cache hit" deterministic. Never raises (failures are counted).
        """
        await self._chunks.drain()

    async def close(self) -> None:
        """Cancel and await read-ahead and every fetch in flight; drop the caches. Idempotent. Does not
        close the store (the caller owns it).
        """
        self._closed = True
        await self._chunks.close()
        await self._indexes.close()

    # -- finding the bytes -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidRequestError("the remote reader is closed")

    def _segment_for(self, manifest: Manifest, offset: int) -> RemoteSegment:
        segments = readable_segments(manifest)
        start = (
            max(manifest.log_start_offset, segments[0].base_offset) if segments else manifest.log_start_offset
        )
        end = segments[-1].last_offset + 1 if segments else start
        if offset >= start:
            for segment in segments:
                if segment.last_offset >= offset:
                    return segment
        raise OffsetOutOfRangeError(
            f"offset {offset} of {manifest.topic}-{manifest.partition} is not in the remote tier "
            f"(remote offsets {start}..{end - 1})",
            log_start_offset=start,
            log_end_offset=end,
        )

    async def _locate(
        self, view: _SegmentView, index: IndexRef, offset: int, hint: int | None = None
    ) -> tuple[int, BatchHeader]:
        """Position and header of the first batch whose last offset is >= ``offset``. Needs no index when
        ``offset`` is the segment's first or ``hint`` (where the partition's previous read ended) holds it.
        """
        if offset <= view.segment.base_offset:
            return 0, await view.header(0)
        if hint is not None and hint < view.size:
            header = await view.header(hint)
            if header.base_offset <= offset <= header.last_offset:
                return hint, header
        offsets = await self._indexes.offset_index(index, view.segment)
        if offsets.missing:
            self._stats.index_fallbacks += 1
        entry_offset, position = offsets.lookup(offset)
        header = await view.header(position)
        if position and header.last_offset != entry_offset:
            self._indexes.forget(index)
            raise RemoteObjectCorruptError(
                index.object_key,
                f"entry ({entry_offset}, {position}) disagrees with the log: the batch at that position "
                f"ends at offset {header.last_offset}",
            )
        while header.last_offset < offset:
            position += header.size
            if position >= view.size:
                raise view.corrupt(
                    f"the object ends at offset {header.last_offset}, before offset {offset} that the "
                    f"manifest says the segment holds"
                )
            header = await self._next_header(view, position, header)
        return position, header

    async def _next_header(self, view: _SegmentView, position: int, previous: BatchHeader) -> BatchHeader:
        header = await view.header(position)
        if header.base_offset < previous.next_offset:
            raise view.corrupt(
                f"offsets go backwards at position {position}: batch {header.base_offset} follows one "
                f"ending at {previous.last_offset}"
            )
        return header

    async def _extent(
        self, view: _SegmentView, start: int, first: BatchHeader, max_bytes: int
    ) -> tuple[int, list[BatchHeader]]:
        """End position and headers of the whole batches to return from ``start``."""
        headers = [first]
        end = start + first.size
        if first.size > self.chunk_bytes:
            return end, headers
        while end < view.size and max_bytes - (end - start) >= HEADER_SIZE:
            header = await self._next_header(view, end, headers[-1])
            if end - start + header.size > max_bytes or header.size > self.chunk_bytes:
                break
            headers.append(header)
            end += header.size
        if end == view.size and headers[-1].last_offset != view.segment.last_offset:
            raise view.corrupt(
                f"the object's last batch ends at offset {headers[-1].last_offset}, the manifest says "
                f"{view.segment.last_offset}"
            )
        return end, headers

    async def _batches(self, view: _SegmentView, start: int, end: int, headers: list[BatchHeader]) -> bytes:
        """The bytes ``[start, end)`` holding exactly ``headers``' batches, every batch CRC-checked."""
        if headers[0].size > self.chunk_bytes:
            data = await self._chunks.fetch_range(view.key, start, end)
        else:
            data = await view.read(start, end)
        if len(data) >= _VERIFY_IN_THREAD_BYTES:  # CRC-32C releases the GIL: keep the loop responsive
            await asyncio.to_thread(self._verify, view, data, start, headers)
        else:
            self._verify(view, data, start, headers)
        return data

    def _verify(self, view: _SegmentView, data: bytes, start: int, headers: list[BatchHeader]) -> None:
        position = 0
        for expected in headers:
            try:
                header = verify_batch(data, position)
            except CorruptRecordError as err:
                raise view.corrupt(f"batch at position {start + position}: {err}") from err
            if header != expected:
                raise view.corrupt(f"batch at position {start + position} changed while being read")
            position += header.size
        if position != len(data):
            raise view.corrupt(f"{len(data) - position} stray bytes after the batches read at {start}")

    # -- read-ahead --------------------------------------------------------------------------------

    def _maybe_readahead(self, manifest: Manifest, cursor: _Cursor, max_bytes: int) -> None:
        """For a read that continues the partition's last one (at ``cursor``): prefetch what it may need
        plus ``readahead_chunks`` chunks beyond, continuing into the following segment(s), so that while the
        read waits for its last chunk, that many more are already on their way. Never raises.
        """
        if not self.readahead_chunks or self._closed:
            return
        segments = readable_segments(manifest)
        current = next((i for i, s in enumerate(segments) if s.segment_uuid == cursor.segment_uuid), None)
        if current is None:
            return
        budget = max(max_bytes, 0) + self.readahead_chunks * self.chunk_bytes
        position = cursor.end_position
        for segment in segments[current:]:
            key = layout.segment_key(
                manifest.topic, manifest.partition, segment.base_offset, segment.segment_uuid, "log"
            )
            size = segment.size_bytes
            if position < size:
                last = min(position + budget, size) - 1
                for index in range(position // self.chunk_bytes, last // self.chunk_bytes + 1):
                    self._chunks.prefetch(key, index, size)
                budget -= size - position
            if budget <= 0:
                return
            position = 0
