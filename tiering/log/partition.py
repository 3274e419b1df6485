"""The log of one partition: a directory of segments with append, read, roll, flush, retention, truncation.

Threading model (design note 0001): the engine is synchronous and thread-safe per partition. Every
mutation and every position lookup runs under one ``threading.RLock``; the ``pread`` of data by readers
and the ``fsync`` of a flush run outside it, on duplicated descriptors, which is safe because segments
are append-only and a reader re-checks a truncation counter before trusting what it read. The broker
calls these methods through ``asyncio.to_thread``, never on its event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from tiering.codec.header import BatchHeader, iter_batches, set_base_offset, set_log_append_time
from tiering.errors import (
    CorruptRecordError,
    InvalidRequestError,
    NotFoundError,
    OffsetOutOfRangeError,
    UnavailableError,
)
from tiering.log import naming
from tiering.log.checkpoint import fsync_directory, write_offset_checkpoint
from tiering.log.clock import Clock, SystemClock
from tiering.log.config import LogConfig
from tiering.log.group_commit import GroupCommit
from tiering.log.recovery import load_log
from tiering.log.retention import deletable_prefix
from tiering.log.segment import BatchMeta, LogSegment
from tiering.log.types import AppendInfo, FileSlice, ReadResult, SegmentInfo

__all__ = ["PartitionLog"]

_log = logging.getLogger(__name__)
_READ_ATTEMPTS = 3


@contextlib.contextmanager
def _io_errors(what: str) -> Iterator[None]:
    try:
        yield
    except OSError as err:
        raise UnavailableError(f"I/O error while {what}: {err}") from err


class PartitionLog:
    """One partition's log. Thread-safe; see the module docstring for the locking rules."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        topic: str,
        partition: int,
        fsync: Callable[[int], None],
    ) -> None:
        self._dir = directory
        self._config = config
        self._clock = clock
        self.topic = topic
        self.partition = partition
        self._fsync = fsync
        self._lock = threading.RLock()
        self._group = GroupCommit()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._checkpointed_recovery_point = 0
        self._last_flush_ms = clock.now_ms()
        self._truncations = 0
        self._dir_dirty = False
        self._listeners: list[Callable[[SegmentInfo], None]] = []
        self._state = "open"

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        path: Path,
        config: LogConfig,
        *,
        clock: Clock | None = None,
        topic: str = "",
        partition: int = 0,
        start_offset: int | None = None,
        fsync: Callable[[int], None] | None = None,
    ) -> PartitionLog:
        """Open or create the partition directory ``path``, running recovery (see :mod:`.recovery`).

        ``start_offset`` opens a log that holds no batch at that offset (restore). ``fsync`` replaces
        ``os.fsync`` for every data and directory sync (tests count calls with it).

        Raises:
            UnavailableError: an I/O error.
            InvalidRequestError: a negative ``start_offset``.
        """
        if start_offset is not None and start_offset < 0:
            raise InvalidRequestError(f"negative start offset {start_offset}")
        clock = clock if clock is not None else SystemClock()
        log = cls(Path(path), config, clock, topic, partition, fsync if fsync is not None else os.fsync)
        with _io_errors(f"opening {path}"):
            loaded = load_log(log._dir, config, now_ms=clock.now_ms(), start_offset=start_offset)
            log._segments = loaded.segments
            log._bases = [seg.base_offset for seg in loaded.segments]
            log._log_start_offset = loaded.log_start_offset
            log._recovery_point = loaded.recovery_point
            log._write_recovery_checkpoint()
            log._write_start_checkpoint()
        return log

    # --------------------------------------------------------------- properties
    @property
    def path(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Equal to the log end offset on a single broker."""
        return self.log_end_offset

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(seg.size for seg in self._segments)

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        with self._lock:
            return self._recovery_point

    def _check_open(self) -> None:
        if self._state == "deleted":
            raise NotFoundError(f"partition log {self._dir} was deleted")
        if self._state != "open":
            raise UnavailableError(f"partition log {self._dir} is closed")

    # ------------------------------------------------------------------ append
    def append(self, batches: bytes | bytearray | memoryview, *, assign_offsets: bool = True) -> AppendInfo:
        """Validate every batch, then append them all, or nothing.

        Checks CRC, magic, framing and ``max.message.bytes`` of every batch before writing a byte. With
        ``assign_offsets`` the base offset fields are rewritten from the log end offset on; otherwise
        (replication, restore) the batches must continue the log exactly. Stamps LogAppendTime when the
        topic asks for it, rolls segments as needed, then applies the flush policy (group commit).
        Thread-safe; not idempotent (each call appends).

        Raises:
            CorruptRecordError: a batch is truncated, malformed or fails its CRC, or (when assigning
                offsets) its record count disagrees with its offset delta.
            RecordTooLargeError: a batch exceeds ``max.message.bytes``.
            InvalidRequestError: no batch, or with ``assign_offsets=False`` offsets that do not continue
                the log.
            UnavailableError: an I/O error (nothing of this append stays in the log) or a closed log.
        """
        buf = bytearray(batches)
        config = self._config
        headers = list(iter_batches(buf, verify=True, max_size=config.max_message_bytes))
        if not headers:
            raise InvalidRequestError("an append needs at least one record batch")
        if assign_offsets:
            for _, header in headers:
                if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
                    raise CorruptRecordError(
                        f"batch with {header.records_count} records has last offset delta "
                        f"{header.last_offset_delta}"
                    )
        now = self._clock.now_ms()
        append_time = now if config.log_append_time else -1
        if append_time >= 0:
            for position, _ in headers:
                set_log_append_time(buf, position, append_time)
        sealed: list[SegmentInfo] = []
        with self._lock:
            self._check_open()
            start = self._segments[-1].next_offset
            metas = self._assign(buf, headers, start, assign_offsets, append_time)
            with _io_errors(f"appending to {self._dir}"):
                try:
                    self._write(buf, metas, now, sealed)
                except OSError:
                    self._undo_append(start)
                    raise
            end = self._segments[-1].next_offset
            due = (
                end - self._recovery_point >= config.flush_messages
                or now - self._last_flush_ms >= config.flush_ms
            )
        self._notify(sealed)
        if due:
            self._flush_to(end)
        return AppendInfo(
            base_offset=metas[0][1],
            last_offset=metas[-1][2],
            record_count=sum(header.records_count for _, header in headers),
            batch_base_offsets=[meta[1] for meta in metas],
            log_append_time=append_time,
        )

    def _assign(
        self,
        buf: bytearray,
        headers: list[tuple[int, BatchHeader]],
        start: int,
        assign_offsets: bool,
        append_time: int,
    ) -> list[BatchMeta]:
        metas: list[BatchMeta] = []
        expected = start
        for position, header in headers:
            if assign_offsets:
                base = expected
                set_base_offset(buf, position, base)
            elif header.base_offset != expected:
                raise InvalidRequestError(
                    f"batch base offset {header.base_offset} does not continue the log at offset {expected}"
                )
            else:
                base = header.base_offset
            last = base + header.last_offset_delta
            max_ts = append_time if append_time >= 0 else header.max_timestamp
            metas.append((header.size, base, last, max_ts))
            expected = last + 1
        return metas

    def _write(self, buf: bytearray, metas: list[BatchMeta], now: int, sealed: list[SegmentInfo]) -> None:
        view = memoryview(buf)
        config = self._config
        i = 0
        position = 0
        while i < len(metas):
            seg = self._segments[-1]
            size, base, last, _ = metas[i]
            if seg.size and (
                seg.size + size > config.segment_bytes
                or now - seg.created_ms >= config.segment_ms
                or seg.indexes_full
                or seg.would_overflow_offsets(last)
            ):
                sealed.append(self._roll_locked(base, now))
                seg = self._segments[-1]
            if not seg.size:
                seg.created_ms = now
            pending = size
            j = i + 1
            while j < len(metas):
                size_j, _, last_j, _ = metas[j]
                if seg.size + pending + size_j > config.segment_bytes or seg.would_overflow_offsets(last_j):
                    break
                pending += size_j
                j += 1
            seg.write(view[position : position + pending], metas[i:j])
            position += pending
            i = j

    def _undo_append(self, start: int) -> None:
        try:
            self._truncate_locked(start)
        except OSError:
            _log.exception("could not undo a failed append to %s; closing the log", self._dir)
            self._state = "closed"

    def _roll_locked(self, new_base: int, now: int) -> SegmentInfo:
        old = self._segments[-1]
        old.seal()
        new = LogSegment.create(
            self._dir,
            new_base,
            index_bytes=self._config.segment_index_bytes,
            index_interval=self._config.index_interval_bytes,
            created_ms=now,
        )
        self._segments.append(new)
        self._bases.append(new_base)
        self._dir_dirty = True
        return old.info()

    def _notify(self, sealed: list[SegmentInfo]) -> None:
        for info in sealed:
            for callback in list(self._listeners):
                try:
                    callback(info)
                except Exception:
                    _log.exception("roll listener failed for segment %d of %s", info.base_offset, self._dir)

    def add_roll_listener(self, callback: Callable[[SegmentInfo], None]) -> None:
        """Call ``callback(info)`` with every segment sealed from now on, outside the lock, in order.

        Exceptions from the callback are logged and swallowed. Thread-safe; not idempotent.
        """
        with self._lock:
            self._listeners.append(callback)

    # ------------------------------------------------------------------- reads
    def _out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        start, end = self._log_start_offset, self._segments[-1].next_offset
        return OffsetOutOfRangeError(
            f"offset {offset} is outside [{start}, {end}] of {self.topic}-{self.partition}",
            log_start_offset=start,
            log_end_offset=end,
        )

    def _locate_locked(
        self, offset: int, max_bytes: int, max_offset: int | None
    ) -> tuple[LogSegment, int, int]:
        if offset < self._log_start_offset or offset > self._segments[-1].next_offset:
            raise self._out_of_range(offset)
        i = max(bisect_right(self._bases, offset) - 1, 0)
        while i < len(self._segments):
            seg = self._segments[i]
            found = seg.locate(offset)
            if found is not None:
                start, header = found
                return seg, start, seg.end_position(start, header, max(max_bytes, 0), max_offset)
            i += 1
        active = self._segments[-1]
        return active, active.size, active.size

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the one holding ``offset``: at least one, otherwise at most ``max_bytes``,
        never a batch whose base offset is ``max_offset`` or more, all from one segment.

        Thread-safe (the data ``pread`` runs outside the lock and is retried if a truncation raced it);
        idempotent.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
            CorruptRecordError: a stored batch header does not parse.
            UnavailableError: an I/O error, repeated races with truncation, or a closed log.
        """
        for _ in range(_READ_ATTEMPTS):
            with self._lock:
                self._check_open()
                with _io_errors(f"reading {self._dir}"):
                    seg, start, end = self._locate_locked(offset, max_bytes, max_offset)
                    fd = seg.dup_fd() if end > start else -1
                epoch = self._truncations
                start_offset, end_offset = self._log_start_offset, self._segments[-1].next_offset
            if fd < 0:
                return ReadResult(b"", end_offset, start_offset, end_offset)
            try:
                with _io_errors(f"reading {self._dir}"):
                    data = os.pread(fd, end - start, start)
            finally:
                os.close(fd)
            with self._lock:
                if epoch == self._truncations and len(data) == end - start:
                    return ReadResult(data, end_offset, start_offset, end_offset)
        raise UnavailableError(f"{self._dir} kept changing during a read; retry")

    def read_slice(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> FileSlice:
        """The region :meth:`read` would return, as a :class:`FileSlice` owning a duplicated descriptor.

        Thread-safe; idempotent. A truncation racing with the caller's ``sendfile`` can change the bytes
        (as in Kafka); retention cannot, the duplicated descriptor keeps the file.

        Raises:
            OffsetOutOfRangeError, CorruptRecordError, UnavailableError: as :meth:`read`.
        """
        with self._lock:
            self._check_open()
            with _io_errors(f"reading {self._dir}"):
                seg, start, end = self._locate_locked(offset, max_bytes, max_offset)
                fd = seg.dup_fd()
            end_offset = self._segments[-1].next_offset
            return FileSlice(fd, start, end - start, end_offset, self._log_start_offset, end_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first batch whose max timestamp is >= ``timestamp``: the batch's
        base offset (at least the log start offset) and its max timestamp; ``None`` if there is none.

        Batch granularity: the engine does not decode records. Thread-safe; idempotent.

        Raises:
            CorruptRecordError: a stored batch header does not parse.
            UnavailableError: an I/O error or a closed log.
        """
        with self._lock:
            self._check_open()
            with _io_errors(f"searching {self._dir} by time"):
                for seg in self._segments:
                    if seg.next_offset <= self._log_start_offset:
                        continue
                    seg.ensure_loaded()
                    if seg.max_timestamp < timestamp:
                        continue
                    found = seg.find_timestamp(timestamp)
                    if found is not None:
                        return max(found[0], self._log_start_offset), found[1]
        return None

    def segments(self) -> list[SegmentInfo]:
        """Snapshots of every segment, oldest first, the active one last. Thread-safe.

        Raises:
            UnavailableError: an I/O error loading a lazy index, or a closed log.
        """
        with self._lock:
            self._check_open()
            with _io_errors(f"listing {self._dir}"):
                return [seg.info() for seg in self._segments]

    def sealed_segments(self) -> list[SegmentInfo]:
        """Snapshots of the sealed segments (all but the active one), oldest first. Thread-safe."""
        return self.segments()[:-1]

    # ---------------------------------------------------------------- rolling
    def roll(self) -> SegmentInfo | None:
        """Seal the active segment if it holds any batch and start a new one. Thread-safe; a second call
        right after is a no-op (returns None).

        Raises:
            UnavailableError: an I/O error or a closed log.
        """
        with self._lock:
            self._check_open()
            if not self._segments[-1].size:
                return None
            with _io_errors(f"rolling {self._dir}"):
                info = self._roll_locked(self._segments[-1].next_offset, self._clock.now_ms())
        self._notify([info])
        return info

    def maybe_roll(self) -> SegmentInfo | None:
        """:meth:`roll` if the active segment is non-empty and older than ``segment.ms``. Thread-safe.

        Raises:
            UnavailableError: an I/O error or a closed log.
        """
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            now = self._clock.now_ms()
            if not active.size or now - active.created_ms < self._config.segment_ms:
                return None
            with _io_errors(f"rolling {self._dir}"):
                info = self._roll_locked(active.next_offset, now)
        self._notify([info])
        return info

    # --------------------------------------------------------------- flushing
    def flush(self) -> None:
        """fsync everything appended so far (group-committed with concurrent appends). Thread-safe;
        idempotent.

        Raises:
            UnavailableError: an fsync failed, or the log is closed.
        """
        with self._lock:
            self._check_open()
            end = self._segments[-1].next_offset
        self._flush_to(end)

    def maybe_flush(self) -> None:
        """:meth:`flush` if ``flush.ms`` elapsed since the last flush and anything is unflushed."""
        with self._lock:
            self._check_open()
            due = (
                self._clock.now_ms() - self._last_flush_ms >= self._config.flush_ms
                and self._recovery_point < self._segments[-1].next_offset
            )
        if due:
            self.flush()

    def _flush_to(self, target: int) -> None:
        self._group.sync(target, self._durable_offset, self._flush_once)

    def _durable_offset(self) -> int:
        return self._recovery_point if self._state == "open" else 2**63

    def _flush_once(self) -> None:
        with self._lock:
            if self._state != "open":
                return
            end = self._segments[-1].next_offset
            epoch = self._truncations
            fds = [seg.dup_fd() for seg in self._segments if seg.next_offset > self._recovery_point]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            with _io_errors(f"flushing {self._dir}"):
                for fd in fds:
                    self._fsync(fd)
                if dir_dirty:
                    self._fsync_dir()
        except BaseException:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            self._last_flush_ms = self._clock.now_ms()
            if epoch == self._truncations and self._state == "open":
                self._recovery_point = max(self._recovery_point, min(end, self._segments[-1].next_offset))
                if self._checkpointed_recovery_point < self._segments[-1].base_offset <= self._recovery_point:
                    with _io_errors(f"checkpointing {self._dir}"):
                        self._write_recovery_checkpoint()

    def _fsync_dir(self) -> None:
        fd = os.open(self._dir, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def _write_recovery_checkpoint(self) -> None:
        write_offset_checkpoint(
            self._dir / naming.RECOVERY_POINT_FILE, self.topic, self.partition, self._recovery_point
        )
        self._checkpointed_recovery_point = self._recovery_point

    def _write_start_checkpoint(self) -> None:
        write_offset_checkpoint(
            self._dir / naming.LOG_START_OFFSET_FILE, self.topic, self.partition, self._log_start_offset
        )

    # -------------------------------------------------------------- retention
    def apply_retention(
        self,
        veto: Callable[[SegmentInfo], bool] | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> list[SegmentInfo]:
        """Delete the oldest sealed segments past ``retention.ms`` / ``retention.bytes`` (or the given
        overrides, e.g. the local-retention settings), never the active one, stopping at the first
        segment ``veto`` keeps. Advances and persists the log start offset. Files are renamed to
        ``.deleted`` under the lock and unlinked at once after it (no ``file.delete.delay.ms``: readers
        hold duplicated descriptors, so nothing can be reading the file by name).

        ``veto`` runs under the partition lock: it must be quick and must not block. Thread-safe;
        idempotent (a second call deletes nothing new unless time passed). Returns what was deleted.

        Raises:
            UnavailableError: an I/O error or a closed log.
        """
        now = self._clock.now_ms()
        config = self._config
        limit_ms = config.retention_ms if retention_ms is None else retention_ms
        limit_bytes = config.retention_bytes if retention_bytes is None else retention_bytes
        with self._lock:
            self._check_open()
            with _io_errors(f"applying retention to {self._dir}"):
                sealed = [seg.info() for seg in self._segments[:-1]]
                count = deletable_prefix(
                    sealed,
                    now_ms=now,
                    retention_ms=limit_ms,
                    retention_bytes=limit_bytes,
                    total_bytes=sum(seg.size for seg in self._segments),
                    largest_timestamp=_largest_timestamp,
                    veto=veto,
                )
                if not count:
                    return []
                doomed = [path for seg in self._segments[:count] for path in seg.rename_deleted()]
                del self._segments[:count]
                del self._bases[:count]
                self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
                self._recovery_point = max(self._recovery_point, self._log_start_offset)
                self._write_start_checkpoint()
        for path in doomed:
            path.unlink(missing_ok=True)
        return sealed[:count]

    # ------------------------------------------------------------- truncation
    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset``; the log end offset becomes the base offset
        of the first removed batch (at most ``offset``). Below the log start offset the whole log is
        replaced by an empty one at ``offset``. Thread-safe; idempotent.

        Raises:
            InvalidRequestError: a negative offset.
            UnavailableError: an I/O error or a closed log.
        """
        if offset < 0:
            raise InvalidRequestError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._segments[-1].next_offset:
                return
            if offset < self._log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            with _io_errors(f"truncating {self._dir}"):
                self._truncate_locked(offset)

    def _truncate_locked(self, offset: int) -> None:
        self._truncations += 1
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            for path in seg.rename_deleted():
                path.unlink(missing_ok=True)
        last = self._segments[-1]
        if last.sealed:
            last.reactivate()
        last.truncate_to(offset)
        self._recovery_point = min(self._recovery_point, last.next_offset)
        if self._checkpointed_recovery_point > self._recovery_point:
            self._write_recovery_checkpoint()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = end = ``offset``).
        Thread-safe; idempotent.

        Raises:
            InvalidRequestError: a negative offset.
            UnavailableError: an I/O error or a closed log.
        """
        if offset < 0:
            raise InvalidRequestError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            self._truncations += 1
            with _io_errors(f"resetting {self._dir}"):
                for seg in self._segments:
                    for path in seg.rename_deleted():
                        path.unlink(missing_ok=True)
                seg = LogSegment.create(
                    self._dir,
                    offset,
                    index_bytes=self._config.segment_index_bytes,
                    index_interval=self._config.index_interval_bytes,
                    created_ms=self._clock.now_ms(),
                )
                self._segments = [seg]
                self._bases = [offset]
                self._log_start_offset = offset
                self._recovery_point = offset
                self._write_recovery_checkpoint()
                self._write_start_checkpoint()

    # -------------------------------------------------------------- lifecycle
    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (index sizes apply to segments created later). Thread-safe;
        idempotent."""
        with self._lock:
            self._config = config
            self._segments[-1].index_interval = config.index_interval_bytes

    def close(self) -> None:
        """Flush, trim the indexes, write both checkpoints and the clean-shutdown marker, close the files.
        Thread-safe; idempotent.

        Raises:
            UnavailableError: an I/O error (the log is closed anyway, without the marker).
        """
        with self._lock:
            if self._state != "open":
                return
        self.flush()
        with self._lock:
            if self._state != "open":
                return
            self._state = "closed"
            with _io_errors(f"closing {self._dir}"):
                for seg in self._segments:
                    seg.close()
                self._recovery_point = self._segments[-1].next_offset
                self._write_recovery_checkpoint()
                self._write_start_checkpoint()
                marker = self._dir / naming.CLEAN_SHUTDOWN_FILE
                marker.touch()
                fsync_directory(self._dir)

    def delete(self) -> None:
        """Close the files and remove the whole partition directory. Thread-safe; idempotent.

        Raises:
            UnavailableError: the directory cannot be removed.
        """
        with self._lock:
            if self._state == "deleted":
                return
            self._state = "deleted"
            with _io_errors(f"deleting {self._dir}"):
                for seg in self._segments:
                    with contextlib.suppress(OSError):
                        seg.close()
                shutil.rmtree(self._dir, ignore_errors=False)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionLog({str(self._dir)!r}, {len(self._segments)} segments)"


def _largest_timestamp(info: SegmentInfo) -> int:
    if info.max_timestamp >= 0:
        return info.max_timestamp
    try:
        return info.log_path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return -1
