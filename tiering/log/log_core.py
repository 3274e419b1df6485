"""The state of one partition log and the internals its operations share (see :mod:`.partition`).

Holds the segment list, the offsets, the flush machinery and the lock. Every ``*_locked`` method expects
the caller to hold ``self._lock``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.log import naming
from tierlog.tiering.log.checkpoint import write_offset_checkpoint
from tierlog.tiering.log.clock import Clock
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.group_commit import GroupCommit
from tierlog.tiering.log.leader_epoch import LeaderEpochCache
from tierlog.tiering.log.producer_state import Batches, ProducerStateManager
from tierlog.tiering.log.reads import locate
from tierlog.tiering.log.recovery import load_log
from tierlog.tiering.log.segment import BatchMeta, LogSegment
from tierlog.tiering.log.types import ProducerInfo, SegmentInfo
from tierlog.wire.errors import (
    ConflictError,
    OffsetOutOfRangeError,
    UnavailableError,
    UnknownTopicError,
    storage_error,
)

__all__ = ["LogCore", "LogOffsets", "io_errors"]

_log = logging.getLogger(__name__)

RECOVERY_BACKOFF_MS = 1000
"""After a failed attempt to recover an offline log, the next attempt waits this long (injected clock)."""


def describe_os_error(err: OSError) -> str:
    """``"No space left on device (ENOSPC)"``: the reason an operator can act on. Pure."""
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    return f"{err.strerror or err} ({name})"


@contextlib.contextmanager
def io_errors(what: str, path: Path) -> Iterator[None]:
    """Translate ``OSError`` into the retriable :class:`UnavailableError` (:class:`InsufficientStorageError`
    when the disk is full), once, at the engine's edge."""
    try:
        yield
    except OSError as err:
        raise storage_error(f"{what} {path}", err) from err


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """The offsets and size of a log at one instant: published whole under the lock after every change and
    read without it (Kafka's ``@volatile nextOffsetMetadata``), so the event loop never waits on a lock a
    disk writer holds. ``log_start_offset <= high_watermark <= log_end_offset`` always holds."""

    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    high_watermark: int = 0


class LogCore:
    """Shared state and internals of :class:`~tierlog.tiering.log.partition_log.PartitionLog`."""

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
        # guards only the publication of self._offsets (never held during I/O), so that the high
        # watermark can be moved without waiting on a disk writer holding self._lock
        self._hw_lock = threading.Lock()
        # serializes writes of the high watermark checkpoint; taken after self._lock, never before it
        self._hw_checkpoint_lock = threading.Lock()
        self._checkpointed_hw = -1
        self.epochs: LeaderEpochCache
        """The partition's leader epoch cache (``leader-epoch-checkpoint``), opened with the log."""
        self._group = GroupCommit()
        # the idempotent producers (design note 0011): touched only under self._lock
        self._producer_state = ProducerStateManager(directory)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._offsets = LogOffsets(0, 0, 0)
        self._recovery_point = 0
        self._checkpointed_recovery_point = 0
        self._last_flush_ms = clock.now_ms()
        self._truncations = 0
        self._dir_dirty = False  # a segment file was made or removed since the directory was last synced
        self._parent_dirty = False  # the directory itself was made here and its entry is not synced yet
        self._listeners: list[Callable[[SegmentInfo], None]] = []
        self._state = "open"
        self._dir_lock_fd = -1
        self._offline_reason: str | None = None
        self._offline_end = 0
        self._failures = 0
        self._retry_at_ms = 0

    @property
    def path(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def offsets(self) -> LogOffsets:
        """The last published offsets and size. Lock-free; consistent with each other."""
        return self._offsets

    @property
    def log_start_offset(self) -> int:
        """Lock-free (the published snapshot)."""
        return self._offsets.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Lock-free (the published snapshot)."""
        return self._offsets.log_end_offset

    @property
    def high_watermark(self) -> int:
        """The published high watermark, within ``[log_start_offset, log_end_offset]``. Lock-free.

        Moved only by :meth:`update_high_watermark` and clamped by truncations and retention: it does not
        follow appends by itself (the broker advances it, to the log end offset when it is alone).
        """
        return self._offsets.high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark to ``offset`` clamped to ``[log_start_offset, log_end_offset]`` and
        return it. It may move backwards (a follower keeps ``min(leader HW, LEO)``); a leader that must
        only advance it compares first. Not persisted here (see :meth:`checkpoint_high_watermark`).

        Thread-safe and quick: it never waits for a disk writer (only a lock held for a few instructions).
        Idempotent; never raises.
        """
        with self._hw_lock:
            current = self._offsets
            hw = min(max(offset, current.log_start_offset), current.log_end_offset)
            if hw != current.high_watermark:
                self._offsets = LogOffsets(
                    current.log_start_offset, current.log_end_offset, current.size_bytes, hw
                )
            return hw

    def checkpoint_high_watermark(self) -> None:
        """Write the published high watermark to ``replication-offset-checkpoint`` (Kafka's one-entry
        checkpoint format, atomically replaced), unless that value is already there. Does not take the
        partition lock, so appends do not wait for it. Thread-safe; idempotent.

        Raises:
            UnavailableError: an I/O error (InsufficientStorageError when the disk is full), or the log is
                closed or deleted.
        """
        with self._hw_checkpoint_lock:
            if self._state not in ("open", "offline"):
                raise UnavailableError(f"partition log {self._dir} is closed")
            hw = self._offsets.high_watermark
            if hw == self._checkpointed_hw:
                return
            with io_errors("checkpointing the high watermark of", self._dir):
                write_offset_checkpoint(
                    self._dir / naming.HIGH_WATERMARK_FILE, self.topic, self.partition, hw
                )
            self._checkpointed_hw = hw

    def _write_high_watermark_locked(self) -> None:
        """Write the high watermark checkpoint (close). Call with ``self._lock`` held.

        Raises:
            OSError: the file cannot be written.
        """
        with self._hw_checkpoint_lock:
            hw = self._offsets.high_watermark
            write_offset_checkpoint(self._dir / naming.HIGH_WATERMARK_FILE, self.topic, self.partition, hw)
            self._checkpointed_hw = hw

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """``(epoch found, end offset)`` of ``epoch`` in this log, Kafka's ``endOffsetFor`` against the
        published log end offset (see :meth:`LeaderEpochCache.end_offset_for`); ``(-1, -1)`` when the
        epoch is above the latest or none is known. Lock-free; idempotent."""
        return self.epochs.end_offset_for(epoch, self._offsets.log_end_offset)

    def producers(self) -> list[ProducerInfo]:
        """The idempotent producers this partition knows, sorted by producer id. Thread-safe (a snapshot
        taken under the lock); idempotent."""
        with self._lock:
            return self._producer_state.producers()

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers whose last batch timestamp is ``expiration_ms`` or more before ``now_ms``
        (``producer.id.expiration.ms``); returns how many. Thread-safe; idempotent."""
        with self._lock:
            return self._producer_state.remove_expired(now_ms, expiration_ms)

    def take_producer_snapshot(self) -> None:
        """Write the producer state snapshot at the log end offset (:meth:`close` does). An I/O error is
        only logged: the log replay rebuilds the state. Thread-safe; idempotent.

        Raises:
            UnavailableError: a closed log.
        """
        with self._lock:
            self._check_open()
            self._producer_state.take_snapshot(self._segments[-1].next_offset)

    @property
    def size_bytes(self) -> int:
        """Lock-free (the published snapshot)."""
        return self._offsets.size_bytes

    def _publish_locked(self) -> None:
        """Publish the offsets after a change; call with the lock held, before releasing it."""
        start, end = self._log_start_offset, self._segments[-1].next_offset
        size = sum(seg.size for seg in self._segments)
        with self._hw_lock:
            hw = min(max(self._offsets.high_watermark, start), end)
            self._offsets = LogOffsets(start, end, size, hw)

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        with self._lock:
            return self._recovery_point

    @property
    def offline_reason(self) -> str | None:
        """Why the log is offline (an append or roll failed half-way), or None while it is usable.

        An offline log recovers by itself: the next call reopens it from disk (see :meth:`_check_open`).
        Lock-free read of an immutable value.
        """
        return self._offline_reason

    @property
    def failure_count(self) -> int:
        """How many times the log went offline since it was opened. Lock-free."""
        return self._failures

    def _check_open(self) -> None:
        if self._state == "deleted":
            raise UnknownTopicError(f"partition log {self._dir} was deleted")
        if self._state == "offline":
            self._recover_locked()
        if self._state != "open":
            raise UnavailableError(f"partition log {self._dir} is closed")

    def _undo_append(self, start: int, cause: OSError) -> None:
        try:
            self._truncate_locked(start)
        except OSError as err:
            self._go_offline_locked(
                start, f"an append failed ({describe_os_error(cause)}) and its undo too", err
            )

    def _go_offline_locked(self, end: int, what: str, err: OSError) -> None:
        """Mark the log offline: nothing at or past ``end`` was acknowledged; recovery truncates to it."""
        self._state = "offline"
        self._offline_end = end
        self._offline_reason = f"{what}: {describe_os_error(err)}"
        self._failures += 1
        self._retry_at_ms = self._clock.now_ms()
        _log.error(
            "partition log %s is offline until it can be reopened: %s", self._dir, self._offline_reason
        )

    def _recover_locked(self) -> None:
        """Reopen an offline log from disk (recovery rescans, truncates the unacknowledged tail).

        Raises:
            UnavailableError: too soon after a failed attempt, or the reopen failed (still offline).
        """
        now = self._clock.now_ms()
        if now < self._retry_at_ms:
            raise UnavailableError(
                f"partition {self.topic}-{self.partition} is offline: {self._offline_reason}; "
                "it recovers by itself once the resource is back"
            )
        try:
            self._reload_locked(now)
        except OSError as err:
            self._retry_at_ms = now + RECOVERY_BACKOFF_MS
            self._offline_reason = f"reopening failed: {describe_os_error(err)}"
            raise UnavailableError(
                f"partition {self.topic}-{self.partition} is offline: {self._offline_reason}; "
                "it recovers by itself once the resource is back"
            ) from err
        reason, self._state, self._offline_reason = self._offline_reason, "open", None
        _log.warning("partition log %s recovered from disk after: %s", self._dir, reason)

    def _reload_locked(self, now: int) -> None:
        self._truncations += 1
        for seg in self._segments:
            with contextlib.suppress(OSError):
                seg.close()
        loaded = load_log(self._dir, self._config, now_ms=now)
        self._segments = loaded.segments
        self._bases = [seg.base_offset for seg in loaded.segments]
        self._log_start_offset = max(
            loaded.log_start_offset, min(self._log_start_offset, self._segments[-1].next_offset)
        )
        self._recovery_point = min(loaded.recovery_point, self._segments[-1].next_offset)
        if self._segments[-1].next_offset > self._offline_end >= self._log_start_offset:
            self._truncate_locked(self._offline_end)
        self._publish_locked()
        self._trim_epochs_locked()
        self._write_recovery_checkpoint()
        self._write_start_checkpoint()
        self._load_producers_locked()
        self._dir_dirty = True

    def _load_producers_locked(self) -> None:
        """Rebuild the producer state from its snapshots and the log (open, reload, truncation).

        Raises:
            OSError: a segment or the directory cannot be read.
        """
        self._producer_state.load(self._segments, self._log_start_offset, self._segments[-1].next_offset)

    def _roll_locked(
        self, new_base: int, now: int, pending: tuple[Batches, list[BatchMeta]] | None = None
    ) -> SegmentInfo:
        """Seal the active segment, start one at ``new_base`` and snapshot the producer state there.

        ``pending`` are the batches of the append in progress (the state is recorded only after the whole
        append): those below ``new_base`` are in the snapshot. A failed snapshot is only logged.

        Raises:
            OSError: sealing or creating a segment fails.
        """
        old = self._segments[-1]
        old.seal()
        new = self._new_segment(new_base, now)
        self._segments.append(new)
        self._bases.append(new_base)
        self._dir_dirty = True
        self._producer_state.take_snapshot(new_base, pending, sync=False)  # unsynced, as Kafka at a roll
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
        return locate(self._segments, self._bases, offset, max_bytes, max_offset)

    def _flush_to(self, target: int) -> None:
        self._group.sync(target, self._durable_offset, self._flush_once)

    def _durable_offset(self) -> int:
        return self._recovery_point

    def _flush_once(self) -> None:
        with self._lock:
            if self._state != "open":
                if self._recovery_point < self._segments[-1].next_offset:
                    raise UnavailableError(f"partition log {self._dir} was closed before it could flush")
                return
            end = self._segments[-1].next_offset
            epoch = self._truncations
            fds = [seg.dup_fd() for seg in self._segments if seg.next_offset > self._recovery_point]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            parent_dirty, self._parent_dirty = self._parent_dirty, False
        try:
            with io_errors("flushing", self._dir):
                for fd in fds:
                    self._fsync(fd)
                if dir_dirty:
                    self._fsync_dir(parent=parent_dirty)
        except BaseException:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
                self._parent_dirty = self._parent_dirty or parent_dirty
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            self._last_flush_ms = self._clock.now_ms()
            if epoch == self._truncations and self._state == "open":
                self._recovery_point = max(self._recovery_point, min(end, self._segments[-1].next_offset))
                if self._checkpointed_recovery_point < self._segments[-1].base_offset <= self._recovery_point:
                    with io_errors("checkpointing", self._dir):
                        self._write_recovery_checkpoint()

    def _fsync_dir(self, *, parent: bool = False) -> None:
        """fsync the directory (its segment files' entries) and, with ``parent``, the data directory (the
        entry of a partition directory made by this log's open)."""
        for path in (self._dir, self._dir.parent) if parent else (self._dir,):
            fd = os.open(path, os.O_RDONLY)
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
        self._publish_locked()
        self.epochs.truncate_from_end(last.next_offset)
        self._producer_state.delete_snapshots_above(last.next_offset)
        self._recovery_point = min(self._recovery_point, last.next_offset)
        if self._checkpointed_recovery_point > self._recovery_point:
            self._write_recovery_checkpoint()

    def _trim_epochs_locked(self) -> None:
        """Drop the epoch entries past the log end (a recovered torn tail, an undone append). Entries below
        the log start stay (a follower reset from remote history keeps them); retention moves them.

        Raises:
            OSError: the epoch checkpoint cannot be written.
        """
        self.epochs.truncate_from_end(self._segments[-1].next_offset)

    def _lock_directory(self) -> None:
        """Take an exclusive ``flock`` on the directory's lock file: one PartitionLog per directory.

        Raises:
            ConflictError: another PartitionLog (in this process or another) has the directory open.
            OSError: the lock file cannot be created.
        """
        self._dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._dir / naming.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConflictError(f"partition directory {self._dir} is already open") from None
        self._dir_lock_fd = fd

    def _unlock_directory(self) -> None:
        if self._dir_lock_fd >= 0:
            os.close(self._dir_lock_fd)
            self._dir_lock_fd = -1

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        return LogSegment.create(
            self._dir,
            base_offset,
            index_bytes=self._config.segment_index_bytes,
            index_interval=self._config.index_interval_bytes,
            created_ms=now_ms,
        )
