"""The log of one partition: a directory of segments with append, read, roll, flush, retention, truncation.

Threading model (design note 0001): the engine is synchronous and thread-safe per partition. Every
mutation and every position lookup runs under one ``threading.RLock``; the ``pread`` of data by readers
and the ``fsync`` of a flush run outside it, on duplicated descriptors, which is safe because segments
are append-only and a reader re-checks a truncation counter before trusting what it read. The broker
calls these methods through ``asyncio.to_thread``, never on its event loop.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from tierlog.tiering.log import naming
from tierlog.tiering.log.appending import assign, prepare, write_batches
from tierlog.tiering.log.checkpoint import fsync_directory, read_offset_checkpoint
from tierlog.tiering.log.clock import Clock, SystemClock
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.leader_epoch import EpochEntry, LeaderEpochCache
from tierlog.tiering.log.log_core import LogCore, io_errors
from tierlog.tiering.log.producer_state import BatchMetadata, duplicate_info
from tierlog.tiering.log.reads import first_at_or_after
from tierlog.tiering.log.recovery import load_log
from tierlog.tiering.log.retention import deletable_prefix, largest_timestamp
from tierlog.tiering.log.types import AppendInfo, FileSlice, ReadResult, SegmentInfo
from tierlog.wire.errors import (
    InsufficientStorageError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnavailableError,
    storage_error,
)

__all__ = ["PartitionLog"]

_log = logging.getLogger(__name__)
_READ_ATTEMPTS = 3


class PartitionLog(LogCore):
    """One partition's log. Thread-safe; see the module docstring for the locking rules."""

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

        ``start_offset`` opens a log that holds no batch at that offset (restore); it is ignored when the
        log already holds batches. The leader epoch cache (:attr:`epochs`) is loaded and trimmed to the
        recovered log (entries past a cut tail dropped); the high watermark is read from
        ``replication-offset-checkpoint`` and clamped to ``[log_start_offset, log_end_offset]`` (the log
        start offset when the file is missing or malformed). ``fsync`` replaces ``os.fsync`` for the
        flushes of appended data (flush policy, :meth:`flush`, :meth:`close`); tests count calls with it.

        Only one PartitionLog may have a directory open at a time (an exclusive ``flock`` on
        ``.tierlog.lock``); the lock is released by :meth:`close`, :meth:`delete` or process exit.
        Thread-safe; repairs files, so not idempotent in effect.

        Raises:
            ConflictError: the directory is already open.
            UnavailableError: an I/O error.
            InvalidRequestError: a negative ``start_offset``.
        """
        if start_offset is not None and start_offset < 0:
            raise InvalidRequestError(f"negative start offset {start_offset}")
        clock = clock if clock is not None else SystemClock()
        log = cls(Path(path), config, clock, topic, partition, fsync if fsync is not None else os.fsync)
        with io_errors("opening", path):
            log._lock_directory()
            try:
                loaded = load_log(log._dir, config, now_ms=clock.now_ms(), start_offset=start_offset)
                log._segments = loaded.segments
                log._bases = [seg.base_offset for seg in loaded.segments]
                log._log_start_offset = loaded.log_start_offset
                log._recovery_point = loaded.recovery_point
                log.epochs = LeaderEpochCache(
                    log._dir / naming.LEADER_EPOCH_FILE, topic=topic, partition=partition
                )
                log._publish_locked()
                log._load_producers_locked()
                hw = read_offset_checkpoint(log._dir / naming.HIGH_WATERMARK_FILE)
                log.update_high_watermark(loaded.log_start_offset if hw is None else hw)
                if loaded.fresh:  # made here: its directory's entry and files are synced by the first flush
                    log._dir_dirty = log._parent_dirty = True
                if not (loaded.fresh and loaded.log_start_offset == 0):
                    log._write_checkpoints_if_space()
            except BaseException:
                log._unlock_directory()
                raise
        return log

    def _write_checkpoints_if_space(self) -> None:
        """Write both offset checkpoints and trim the epochs to the log; on a full disk keep the old files
        (still correct, only older; epochs past the end stay until the next truncation) so a log opens and
        serves reads while the disk is full. Raises: OSError other than ENOSPC/EDQUOT."""
        try:
            self._trim_epochs_locked()
            self._write_recovery_checkpoint()
            self._write_start_checkpoint()
        except OSError as err:
            if not isinstance(storage_error("", err), InsufficientStorageError):
                raise
            _log.warning("disk full: %s opens with its previous checkpoints (%s)", self._dir, err.strerror)

    def append(
        self,
        batches: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Validate every batch, then append them all, or nothing.

        Checks CRC, magic, framing and ``max.message.bytes`` of every batch before writing a byte. With
        ``assign_offsets`` the base offset fields are rewritten from the log end offset on; otherwise
        (replication, restore) the batches must continue the log exactly. Stamps LogAppendTime when the
        topic asks for it (only with ``assign_offsets``: a follower keeps its leader's bytes), rolls
        segments as needed, then applies the flush policy (group commit).

        Leader epochs: ``leader_epoch`` (the leader path) is stamped into every batch's
        ``partition_leader_epoch`` (outside the CRC, written in the same pass as the base offsets, no
        extra copy) and ``epochs.assign(leader_epoch, first base offset)`` records it. Without it (a
        follower appending the leader's batches) each batch's own epoch, when >= 0, is recorded at its
        base offset; with ``assign_offsets`` and no ``leader_epoch`` the field is stored as the client
        wrote it and nothing is recorded. The epoch file is rewritten only when an entry changes (once
        per leader epoch), before the batches are written; an append that fails drops the entry again.
        The high watermark is not moved (see :meth:`update_high_watermark`). Thread-safe; not idempotent
        (each call appends).

        Idempotent producers (design note 0011): with ``assign_offsets`` (client origin) batches with a
        producer id are checked against the producer state under the lock before a byte is written; when
        every batch is a duplicate nothing is written and the original offsets are answered
        (``AppendInfo.duplicate``); when only the first batches are duplicates (a retry of which a new
        leader had copied a prefix) only the rest is written and the answer names the prefix's original
        offsets. Any origin records the stored batches in the state after the write.

        Raises:
            CorruptRecordError: a batch is truncated, malformed or fails its CRC, or (when assigning
                offsets) its record count disagrees with its offset delta.
            RecordTooLargeError: a batch exceeds ``max.message.bytes``.
            InvalidRequestError: no batch, a negative ``leader_epoch``, or with ``assign_offsets=False``
                offsets that do not continue the log.
            UnavailableError: an I/O error (nothing of this append stays in the log) or a closed log.
            ProducerFencedError, OutOfOrderSequenceError, DuplicateSequenceError: the producer rules.
        """
        config = self._config
        now = self._clock.now_ms()
        prepared = prepare(batches, config, now, assign_offsets=assign_offsets, leader_epoch=leader_epoch)
        sealed: list[SegmentInfo] = []
        with self._lock:
            self._check_open()
            start = self._segments[-1].next_offset
            metas = assign(prepared, start, assign_offsets=assign_offsets)
            skipped: list[BatchMetadata] = []
            total_records = prepared.record_count
            if prepared.idempotent and assign_offsets:
                duplicates = self._producer_state.validate(prepared.headers, metas)
                if duplicates is not None:
                    if len(duplicates) == len(prepared.headers):
                        return duplicate_info(duplicates, prepared.record_count)
                    skipped = duplicates  # a stored prefix of a retry: append only the rest
                    prepared.drop_leading(len(skipped))
                    metas = assign(prepared, start, assign_offsets=assign_offsets)
            pending = (prepared.headers, metas) if prepared.idempotent else None
            try:
                for epoch, base in prepared.epochs(metas, assign_offsets=assign_offsets):
                    self.epochs.assign(epoch, base)
            except OSError as err:
                self._undo_append(start, err)
                raise storage_error(f"recording the leader epoch of {self._dir}", err) from err
            try:
                write_batches(
                    prepared,
                    metas,
                    now,
                    config,
                    lambda: self._segments[-1],
                    lambda base: sealed.append(self._roll_locked(base, now, pending)),
                )
            except OSError as err:
                self._undo_append(start, err)
                raise storage_error(f"appending to {self._dir}", err) from err
            if pending is not None:
                self._producer_state.record(prepared.headers, metas)
            self._publish_locked()
            end = self._segments[-1].next_offset
            due = (
                end - self._recovery_point >= config.flush_messages
                or now - self._last_flush_ms >= config.flush_ms
            )
        self._notify(sealed)
        if due:
            self._flush_to(end)
        return AppendInfo(
            base_offset=next((d.first_offset for d in skipped if d.first_offset >= 0), metas[0][1]),
            last_offset=metas[-1][2],
            record_count=total_records,
            batch_base_offsets=[d.first_offset for d in skipped] + [meta[1] for meta in metas],
            log_append_time=prepared.append_time,
            leader_epoch=-1 if leader_epoch is None else leader_epoch,
        )

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the one holding ``offset``: at least one, otherwise at most ``max_bytes``,
        never a batch whose base offset is ``max_offset`` or more, all from one segment.

        Thread-safe: positions are found under the lock, the data ``pread`` runs outside it on a duplicated
        descriptor (so retention may unlink the file meanwhile) and is retried if a truncation raced it.
        Idempotent.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
            CorruptRecordError: a stored batch header does not parse.
            UnavailableError: an I/O error, repeated races with truncation, or a closed log.
        """
        try:
            for _ in range(_READ_ATTEMPTS):
                with self._lock:
                    self._check_open()
                    seg, start, end = self._locate_locked(offset, max_bytes, max_offset)
                    published = self._offsets
                    start_offset, end_offset = published.log_start_offset, published.log_end_offset
                    high_watermark = published.high_watermark
                    if end == start:
                        return ReadResult(b"", high_watermark, start_offset, end_offset)
                    fd = seg.dup_fd()
                    epoch = self._truncations
                try:
                    data = os.pread(fd, end - start, start)
                finally:
                    os.close(fd)
                # a truncation bumps the counter before touching any file: unchanged means the bytes held
                if epoch == self._truncations and len(data) == end - start:
                    return ReadResult(data, high_watermark, start_offset, end_offset)
        except OSError as err:
            raise UnavailableError(f"I/O error while reading {self._dir}: {err}") from err
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
            with io_errors("reading", self._dir):
                seg, start, end = self._locate_locked(offset, max_bytes, max_offset)
                fd = seg.dup_fd()
            published = self._offsets
            return FileSlice(
                fd,
                start,
                end - start,
                published.high_watermark,
                published.log_start_offset,
                published.log_end_offset,
            )

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
            with io_errors("searching by time", self._dir):
                return first_at_or_after(self._segments, timestamp, self._log_start_offset)

    def segments(self) -> list[SegmentInfo]:
        """Snapshots of every segment, oldest first, the active one last. Thread-safe.

        Raises:
            UnavailableError: an I/O error loading a lazy index, or a closed log.
        """
        with self._lock:
            self._check_open()
            with io_errors("listing", self._dir):
                return [seg.info() for seg in self._segments]

    def sealed_segments(self) -> list[SegmentInfo]:
        """Snapshots of the sealed segments (all but the active one), oldest first. Thread-safe."""
        return self.segments()[:-1]

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
            info = self._roll_or_go_offline(self._segments[-1].next_offset, self._clock.now_ms())
        self._notify([info])
        return info

    def maybe_roll(self) -> SegmentInfo | None:
        """:meth:`roll` if the active segment is non-empty and older than ``segment.ms``, its age counted
        on the injected clock from the first append into it (from the open, for a segment found on disk).
        Appends apply the same rule before writing. Thread-safe.

        Raises:
            UnavailableError: an I/O error or a closed log.
        """
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            now = self._clock.now_ms()
            if not active.size or now - active.created_ms < self._config.segment_ms:
                return None
            info = self._roll_or_go_offline(active.next_offset, now)
        self._notify([info])
        return info

    def _roll_or_go_offline(self, base: int, now: int) -> SegmentInfo:
        try:
            return self._roll_locked(base, now)
        except OSError as err:
            self._go_offline_locked(base, "rolling a segment failed", err)
            raise storage_error(f"rolling {self._dir}", err) from err

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

    def apply_retention(
        self,
        veto: Callable[[SegmentInfo], bool] | None = None,
        *,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> list[SegmentInfo]:
        """Delete the oldest sealed segments past ``retention.ms`` / ``retention.bytes`` (or the given
        overrides, e.g. the local-retention settings), never the active one, stopping at the first
        segment ``veto`` keeps. Advances and persists the log start offset, moves the first leader epoch
        entry up to it (and the high watermark, if below). Files are renamed to
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
            with io_errors("applying retention to", self._dir):
                sealed = [seg.info() for seg in self._segments[:-1]]
                count = deletable_prefix(
                    sealed,
                    now_ms=now,
                    retention_ms=limit_ms,
                    retention_bytes=limit_bytes,
                    total_bytes=sum(seg.size for seg in self._segments),
                    largest_timestamp=largest_timestamp,
                    veto=veto,
                )
                if not count:
                    return []
                doomed = self._advance_start_locked(count, self._segments[count].base_offset)
        for path in doomed:
            path.unlink(missing_ok=True)
        return sealed[:count]

    def delete_records_before(self, offset: int) -> int:
        """Make ``offset`` the log start offset when it is past it (Kafka's DeleteRecords,
        ``maybeIncrementLogStartOffset``): offsets below it are no longer read, and every segment wholly
        below it is deleted at once (never the active one). The start is persisted before this returns.
        Thread-safe; idempotent (an offset at or below the log start changes nothing). Returns the log
        start offset.

        Raises:
            OffsetOutOfRangeError: ``offset`` is negative or past the high watermark.
            UnavailableError: an I/O error or a closed log.
        """
        with self._lock:
            self._check_open()
            start, hw = self._log_start_offset, self._offsets.high_watermark
            if not 0 <= offset <= hw:
                raise OffsetOutOfRangeError(
                    f"cannot delete the records before offset {offset} of {self.topic}-{self.partition}: "
                    f"the high watermark is {hw}",
                    log_start_offset=start,
                    log_end_offset=hw,
                )
            if offset <= self._log_start_offset:
                return self._log_start_offset
            with io_errors("deleting records of", self._dir):
                count = sum(1 for seg in self._segments[1:] if seg.base_offset <= offset)
                doomed = self._advance_start_locked(count, offset)
        for path in doomed:
            path.unlink(missing_ok=True)
        return offset

    def _advance_start_locked(self, count: int, start: int) -> list[Path]:
        """Drop the first ``count`` segments (renamed ``.deleted``: the paths to unlink after the lock) and
        move the log start offset up to ``start``, persisting it; call with the lock held."""
        doomed = [path for seg in self._segments[:count] for path in seg.rename_deleted()]
        del self._segments[:count]
        del self._bases[:count]
        self._log_start_offset = max(self._log_start_offset, start)
        self._publish_locked()
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._write_start_checkpoint()
        self._producer_state.delete_snapshots_below(self._log_start_offset)
        try:
            self.epochs.truncate_from_start(self._log_start_offset)
        except OSError as err:  # harmless: an entry below the log start answers the same
            _log.warning("could not rewrite the leader epochs of %s: %s", self._dir, err)
        return doomed

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= ``offset``; the log end offset becomes the base offset
        of the first removed batch (at most ``offset``). Below the log start offset the whole log is
        replaced by an empty one at ``offset``. The high watermark is clamped to the new end and the
        leader epochs starting at or past ``offset`` are dropped (also when no batch is). Thread-safe;
        idempotent.

        Raises:
            InvalidRequestError: a negative offset.
            UnavailableError: an I/O error or a closed log.
        """
        if offset < 0:
            raise InvalidRequestError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._segments[-1].next_offset:
                # no batch to remove, but an epoch may start here with nothing written yet (a replica that
                # led briefly): it must go, or the batches fetched next would be counted in it
                with io_errors("truncating the leader epochs of", self._dir):
                    self.epochs.truncate_from_end(offset)
                return
            if offset < self._log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            with io_errors("truncating", self._dir):
                self._truncate_locked(offset)
                self._load_producers_locked()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (log start = end = high watermark =
        ``offset``). The leader epochs are truncated to the offsets below ``offset`` and their start moved to
        it: what remains is at most one entry, the epoch of the last offset before ``offset`` (use
        :meth:`reset_to` to set them). Thread-safe; idempotent.

        Raises:
            InvalidRequestError: a negative offset.
            UnavailableError: an I/O error or a closed log.
        """
        if offset < 0:
            raise InvalidRequestError(f"cannot start a log at negative offset {offset}")
        with self._lock:
            self._check_open()
            self._truncations += 1
            with io_errors("resetting", self._dir):
                for seg in self._segments:
                    for path in seg.rename_deleted():
                        path.unlink(missing_ok=True)
                seg = self._new_segment(offset, self._clock.now_ms())
                self._segments = [seg]
                self._bases = [offset]
                self._log_start_offset = offset
                self._publish_locked()
                self._recovery_point = offset
                self._write_recovery_checkpoint()
                self._write_start_checkpoint()
                self.epochs.truncate_from_end(offset)
                self.epochs.truncate_from_start(offset)
                self._producer_state.clear()
                self._producer_state.delete_all_snapshots()

    def reset_to(self, offset: int, epochs: Sequence[EpochEntry]) -> None:
        """:meth:`truncate_fully_and_start_at` ``offset``, then replace the leader epochs with the entries
        of ``epochs`` that start below ``offset`` (a follower bootstrapping from the leader's remote
        history, KIP-405). Thread-safe (one critical section); idempotent.

        Raises:
            InvalidRequestError: a negative offset, or epochs that are negative or not strictly increasing
                (checked before anything changes).
            UnavailableError: an I/O error or a closed log.
        """
        below = [EpochEntry(e.epoch, e.start_offset) for e in epochs if e.start_offset < offset]
        for prev, cur in itertools.pairwise(below):
            if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
                raise InvalidRequestError(f"leader epochs out of order: {prev} then {cur}")
        if any(e.epoch < 0 or e.start_offset < 0 for e in below):
            raise InvalidRequestError(f"negative leader epoch entry in {below}")
        with self._lock:
            self.truncate_fully_and_start_at(offset)
            with io_errors("resetting the leader epochs of", self._dir):
                self.epochs.replace(below)

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (index sizes apply to segments created later). Thread-safe;
        idempotent."""
        with self._lock:
            self._config = config
            self._segments[-1].index_interval = config.index_interval_bytes

    def close(self) -> None:
        """fsync what is unflushed, trim the indexes, write the recovery point, log start and high watermark
        checkpoints and the clean-shutdown marker, close the files. Appends waiting on a flush are covered
        by the final fsync. Thread-safe; idempotent.

        Raises:
            UnavailableError: an I/O error, or the log was offline (see ``offline_reason``); the log is
                closed anyway, without the marker, so the next open runs recovery.
        """
        with self._lock:
            if self._state == "offline":
                self._close_offline_locked()
            if self._state != "open":
                self._unlock_directory()
                return
            self._state = "closed"
            failure: OSError | None = None
            try:
                for seg in self._segments:
                    if seg.next_offset > self._recovery_point:
                        self._fsync(seg.fd)
                if self._dir_dirty:
                    self._fsync_dir(parent=self._parent_dirty)
                    self._parent_dirty = False
            except OSError as err:
                failure = err
            for seg in self._segments:
                try:
                    seg.close()
                except OSError as err:
                    failure = failure or err
            try:
                if failure is not None:
                    raise UnavailableError(f"I/O error while closing {self._dir}: {failure}") from failure
                with io_errors("closing", self._dir):
                    self._producer_state.take_snapshot(self._segments[-1].next_offset)
                    self._recovery_point = self._segments[-1].next_offset
                    self._write_recovery_checkpoint()
                    self._write_start_checkpoint()
                    self._write_high_watermark_locked()
                    (self._dir / naming.CLEAN_SHUTDOWN_FILE).touch()
                    fsync_directory(self._dir)
            finally:
                self._unlock_directory()

    def _close_offline_locked(self) -> None:
        self._state = "closed"
        for seg in self._segments:
            with contextlib.suppress(OSError):
                seg.close()
        self._unlock_directory()
        raise UnavailableError(
            f"partition log {self._dir} was offline ({self._offline_reason}) and is closed without a "
            "clean-shutdown marker; the next open recovers it"
        )

    def delete(self) -> None:
        """Close the files and remove the whole partition directory. Thread-safe; idempotent.

        Raises:
            UnavailableError: the directory cannot be removed.
        """
        with self._lock:
            if self._state == "deleted":
                return
            with self._hw_checkpoint_lock:
                self._state = "deleted"
            with io_errors("deleting", self._dir):
                for seg in self._segments:
                    with contextlib.suppress(OSError):
                        seg.close()
                try:
                    shutil.rmtree(self._dir, ignore_errors=False)
                finally:
                    self._unlock_directory()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionLog({str(self._dir)!r}, {len(self._segments)} segments)"
