"""One log segment: a ``.log`` file of record batches and its two derived indexes.

A segment is append-only while active and immutable once sealed, which is what lets readers ``pread``
it without the partition lock. Indexing follows Kafka's ``LogSegment.append``: before each batch, if more
than ``index.interval.bytes`` were written since the last entry, the batch (its last offset, its position)
enters the offset index and the max timestamp so far enters the time index if it grew.

Not thread-safe: :class:`~tierlog.tiering.log.partition_log.PartitionLog` calls every method under its lock,
except the ``pread`` of data by readers, which works on a duplicated descriptor.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tierlog.tiering.log import naming
from tierlog.tiering.log.index_file import IndexCorruptError
from tierlog.tiering.log.offset_index import OffsetIndex
from tierlog.tiering.log.scan import INT32_MAX, read_header, read_span, scan_batches
from tierlog.tiering.log.time_index import ENTRY as TIME_ENTRY
from tierlog.tiering.log.time_index import TimeIndex
from tierlog.tiering.log.types import SegmentInfo
from tierlog.wire.errors import CorruptRecordError, InternalError

__all__ = ["LogSegment", "BatchMeta"]

# (size, base_offset, last_offset, max_timestamp) of one batch about to be written
BatchMeta = tuple[int, int, int, int]
_IOV_MAX = 1024


class LogSegment:
    """The files of one segment and what the engine tracks about them."""

    def __init__(
        self, directory: Path, base_offset: int, *, index_bytes: int, index_interval: int, created_ms: int
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = naming.log_path(directory, base_offset)
        self.index = OffsetIndex(naming.index_path(directory, base_offset), base_offset, index_bytes)
        self.time_index = TimeIndex(naming.timeindex_path(directory, base_offset), base_offset, index_bytes)
        self.index_interval = index_interval
        self.created_ms = created_ms
        self.fd = -1
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_index = 0
        self.sealed = False
        self.max_known = False
        self._read_hint = (-1, 0)

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_bytes: int, index_interval: int, created_ms: int
    ) -> LogSegment:
        """Create an empty active segment (empty ``.log``, preallocated indexes).

        Raises:
            InternalError: a non-empty ``.log`` with this base offset already exists.
            OSError: the files cannot be created.
        """
        seg = cls(
            directory,
            base_offset,
            index_bytes=index_bytes,
            index_interval=index_interval,
            created_ms=created_ms,
        )
        seg.fd = os.open(seg.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(seg.fd).st_size:
            os.close(seg.fd)
            raise InternalError(f"segment {seg.log_path} already exists and is not empty")
        seg.index.create()
        seg.time_index.create()
        seg.max_known = True
        return seg

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, *, index_bytes: int, index_interval: int, created_ms: int
    ) -> LogSegment:
        """Open the ``.log`` of an existing segment; indexes stay unloaded until needed.

        Raises:
            OSError: the file cannot be opened.
        """
        seg = cls(
            directory,
            base_offset,
            index_bytes=index_bytes,
            index_interval=index_interval,
            created_ms=created_ms,
        )
        seg.fd = os.open(seg.log_path, os.O_RDWR)
        seg.size = os.fstat(seg.fd).st_size
        return seg

    def recover(self, *, active: bool, truncate: bool = True) -> int:
        """Rescan the whole log checking CRCs, cut a torn or corrupt tail, rebuild both indexes.

        With ``truncate`` false (a sealed segment whose index is merely broken) the log is left alone and
        the indexes cover its valid prefix. Returns the number of bytes cut. Idempotent.

        Raises:
            OSError: a read, truncate or index write fails.
        """
        self.index.create()
        self.time_index.create()
        self.index.write_through = self.time_index.write_through = False
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index = 0
        file_size = os.fstat(self.fd).st_size
        metas: list[BatchMeta] = []
        for _position, header in scan_batches(self.fd, base_offset=self.base_offset, end=file_size):
            metas.append((header.size, header.base_offset, header.last_offset, header.max_timestamp))
            if len(metas) >= 4096:
                self._track(metas)
                metas.clear()
        self._track(metas)
        self.index.write_through = self.time_index.write_through = True
        self.index.write_all()
        self.time_index.write_all()
        self.max_known = True
        cut = file_size - self.size
        if cut and truncate:
            os.ftruncate(self.fd, self.size)
        elif cut:
            self.size = file_size
        if not active:
            self.seal()
        return cut if truncate else 0

    def load_active(self) -> None:
        """Load the indexes of the last segment after a clean shutdown and rescan only the tail past the
        last index entry (Kafka's ``readNextOffset``).

        Raises:
            IndexCorruptError: an index is missing or inconsistent, or the tail does not parse; the caller
                then runs :meth:`recover`.
            OSError: a read fails.
        """
        limit = INT32_MAX + 1
        self.index.load(limit_key=limit, limit_value=self.size)
        self.time_index.load(limit_key=limit, limit_value=limit)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self._scan_tail()
        if self.index.keys and self.index.keys[-1] + self.base_offset >= self.next_offset:
            raise IndexCorruptError(f"{self.index.path.name} points past the end of its log")
        if self.time_index.values and self.time_index.values[-1] + self.base_offset >= self.next_offset:
            raise IndexCorruptError(f"{self.time_index.path.name} points past the end of its log")
        self.index.open_active()
        self.time_index.open_active()
        self.max_known = True

    def ensure_loaded(self) -> None:
        """Load a sealed segment's indexes on first use, rebuilding them if missing or inconsistent.

        Idempotent. Raises:
            OSError: the files cannot be read or rebuilt.
        """
        if self.index.loaded and self.time_index.loaded and self.max_known:
            return
        span = self.next_offset - self.base_offset
        try:
            self.index.load(limit_key=span, limit_value=self.size)
            self.time_index.load(limit_key=INT32_MAX + 1, limit_value=span)
        except IndexCorruptError:
            self.recover(active=False, truncate=False)
            return
        if not self.max_known:
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
            self.max_known = True

    def _scan_tail(self) -> None:
        position = self.index.last_position if self.index.keys else 0
        expected = self.base_offset
        self.next_offset = self.base_offset
        self.bytes_since_index = 0
        while position < self.size:
            try:
                header = read_header(self.fd, position)
            except CorruptRecordError as err:
                raise IndexCorruptError(f"{self.log_path.name}: unreadable batch at {position}") from err
            if position + header.size > self.size or header.base_offset < expected:
                raise IndexCorruptError(f"{self.log_path.name}: inconsistent batch at {position}")
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            expected = self.next_offset = header.next_offset
            position += header.size
            self.bytes_since_index += header.size

    # ----------------------------------------------------------------- writing
    def would_overflow_offsets(self, last_offset: int) -> bool:
        return last_offset - self.base_offset > INT32_MAX

    def write(self, buffers: Sequence[bytes | memoryview], metas: Sequence[BatchMeta]) -> None:
        """Append the concatenation of ``buffers`` (whole batches described by ``metas``, offsets already
        assigned) with ``pwritev`` and index the batches.

        A failed write is cut off the file again before the error propagates; readers never see it (they
        only read up to the size recorded under the partition lock).

        Raises:
            OSError: a write fails (disk full, I/O error).
        """
        position = self.size
        try:
            for first in range(0, len(buffers), _IOV_MAX):
                chunk = buffers[first : first + _IOV_MAX]
                wanted = len(chunk[0]) if len(chunk) == 1 else sum(map(len, chunk))
                written = os.pwritev(self.fd, chunk, position)
                position += written
                if written < wanted:
                    rest = memoryview(b"".join(chunk))[written:]
                    while rest:
                        step = os.pwrite(self.fd, rest, position)
                        rest = rest[step:]
                        position += step
        except BaseException:
            os.ftruncate(self.fd, self.size)
            raise
        self._track(metas)

    def _track(self, metas: Sequence[BatchMeta]) -> None:
        interval = self.index_interval
        index = self.index
        position = self.size
        for size, _base, last_offset, max_timestamp in metas:
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = last_offset
            if self.bytes_since_index > interval:
                if not index.is_full:
                    index.append(last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_index = 0
            position += size
            self.bytes_since_index += size
        if metas:
            self.next_offset = metas[-1][2] + 1
        self.size = position

    def seal(self) -> None:
        """Record the final time-index entry, trim both index files and stop writing. Idempotent.

        Raises:
            OSError: trimming fails.
        """
        if self.time_index.active:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, final=True)
        self.index.seal()
        self.time_index.seal()
        self.sealed = True

    def reactivate(self) -> None:
        """Make a sealed segment active again (it became the last one after a truncation).

        Raises:
            OSError: the index files cannot be reopened.
        """
        self.ensure_loaded()
        self.index.open_active()
        self.time_index.open_active()
        self.sealed = False

    @property
    def indexes_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    # ----------------------------------------------------------------- reading
    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """``(position, base_offset, size)`` of the first batch whose last offset is >= ``offset``; ``None``
        if the segment has none. A sequential reader's next offset is found without an index lookup.

        Raises:
            CorruptRecordError: a batch header on the way does not parse.
            OSError: a read fails.
        """
        self.ensure_loaded()
        end = self.size
        hint_offset, hint_position = self._read_hint
        if hint_offset == offset and hint_position < end:
            base, size, last = read_span(self.fd, hint_position)
            if base == offset:
                return hint_position, base, size
        _, position = self.index.lookup(offset)
        while position < end:
            base, size, last = read_span(self.fd, position)
            if last >= offset:
                return position, base, size
            position += size
        return None

    def end_position(
        self, start: int, first_base: int, first_size: int, max_bytes: int, max_offset: int | None
    ) -> int:
        """End of the longest run of whole batches from ``start`` within ``max_bytes`` (at least the
        first batch) whose base offsets are below ``max_offset``.

        Raises:
            CorruptRecordError: a batch header on the way does not parse.
            OSError: a read fails.
        """
        if max_offset is not None and first_base >= max_offset:
            return start
        end = start + first_size
        target = min(start + max_bytes, self.size)
        if max_offset is not None:
            bound = self.locate(max_offset)
            if bound is not None:
                position, base, size = bound
                target = min(target, position if base >= max_offset else position + size)
        if target <= end:
            return end
        position = max(end, self.index.floor_position(target))
        end = position
        while position < target:
            base, size, _ = read_span(self.fd, position)
            if position + size > target:
                self._read_hint = (base, position)
                break
            position += size
            end = position
        return end

    def find_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(base_offset, max_timestamp)`` of the first batch whose max timestamp is >= ``timestamp``.

        Raises:
            CorruptRecordError: a batch header does not parse.
            OSError: a read fails.
        """
        self.ensure_loaded()
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.index.lookup(offset)
        while position < self.size:
            header = read_header(self.fd, position)
            if header.max_timestamp >= timestamp:
                return header.base_offset, header.max_timestamp
            position += header.size
        return None

    # -------------------------------------------------------------- truncation
    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns the bytes removed. Idempotent.

        Raises:
            CorruptRecordError: a batch header does not parse.
            OSError: the truncate fails.
        """
        found = self.locate(offset)
        if found is None:
            return 0
        position, base, _ = found
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self._read_hint = (-1, 0)
        self.size = position
        self.next_offset = base if position else self.base_offset
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(self.next_offset)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self._scan_tail_after_truncate()
        return removed

    def _scan_tail_after_truncate(self) -> None:
        position = self.index.last_position if self.index.keys else 0
        self.bytes_since_index = 0
        while position < self.size:
            header = read_header(self.fd, position)
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            position += header.size
            self.bytes_since_index += header.size

    # ------------------------------------------------------------ housekeeping
    def _peek_max_timestamp(self) -> None:
        """Take a sealed segment's max timestamp from the last time-index entry without loading the index
        (what the uploader and retention need); fall back on a full load when that entry is not usable."""
        span = self.next_offset - self.base_offset
        try:
            with open(self.time_index.path, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size >= TIME_ENTRY.size and size % TIME_ENTRY.size == 0:
                    file.seek(size - TIME_ENTRY.size)
                    timestamp, relative = TIME_ENTRY.unpack(file.read(TIME_ENTRY.size))
                    if (timestamp, relative) != (0, 0) and 0 <= relative < span:
                        self.max_timestamp = timestamp
                        self.offset_of_max_timestamp = self.base_offset + relative
                        self.max_known = True
                        return
        except FileNotFoundError:
            pass
        self.ensure_loaded()

    def info(self) -> SegmentInfo:
        """A snapshot; for a sealed segment the max timestamp may cost one small read the first time.

        Raises:
            OSError: reading the time index fails.
        """
        if not self.max_known:
            self._peek_max_timestamp()
        return SegmentInfo(
            base_offset=self.base_offset,
            next_offset=self.next_offset,
            size_bytes=self.size,
            max_timestamp=self.max_timestamp,
            sealed=self.sealed,
            log_path=self.log_path,
            index_path=self.index.path,
            timeindex_path=self.time_index.path,
        )

    def dup_fd(self) -> int:
        """A duplicate of the log descriptor that stays valid after this segment is closed or deleted."""
        return os.dup(self.fd)

    def close(self) -> None:
        """Record the max timestamp in the time index (as Kafka does on close), trim both indexes and close
        the log descriptor. Idempotent.

        Raises:
            OSError: trimming fails.
        """
        try:
            if self.time_index.active:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, final=True)
            self.index.seal()
            self.time_index.seal()
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def rename_deleted(self) -> list[Path]:
        """Close and rename the three files with the ``.deleted`` suffix; returns the new paths.

        Raises:
            OSError: a rename fails (a missing index file is skipped).
        """
        self.close()
        renamed = []
        for path in (self.log_path, self.index.path, self.time_index.path):
            target = path.with_name(path.name + naming.DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        return renamed
