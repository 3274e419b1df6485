"""Opening a partition directory: clean up leftovers, open the segments, recover what needs it.

Rules (see ``docs/format-segments.md``):

* ``.deleted``, ``.cleaned``, ``.swap`` and ``.tmp`` files are removed (tierlog never compacts, so a swap
  file can only be a leftover of a foreign cleaner; the segments it would replace are kept), and so are
  index files whose ``.log`` is missing. Producer snapshots (``.snapshot``) are not segment files and are
  left to :class:`~tierlog.tiering.log.producer_state.ProducerStateManager`, which loads them after this.
* After a clean shutdown (the marker file exists) nothing is rescanned: the last segment's indexes are
  loaded and only the bytes past its last index entry are walked. Sealed segments load lazily.
* Otherwise every segment from the one holding the recovery point (checkpoint; 0 when missing) is
  rescanned with CRC checks, its torn or corrupt tail cut and its indexes rebuilt. When a segment other
  than the last loses bytes, every later segment is deleted: the log stays contiguous.
* Any sealed segment whose index files are missing or of an impossible size gets them rebuilt at once;
  deeper inconsistencies are caught when the index is first loaded.
* Empty segments that are not the last are removed.

Not thread-safe: runs before the :class:`~tierlog.tiering.log.partition_log.PartitionLog` is shared.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.log import naming
from tierlog.tiering.log.checkpoint import fsync_directory, read_offset_checkpoint
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.index_file import IndexCorruptError
from tierlog.tiering.log.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from tierlog.tiering.log.segment import LogSegment
from tierlog.tiering.log.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE

__all__ = ["LoadedLog", "load_log", "remove_segment_files"]

_log = logging.getLogger(__name__)
_LEFTOVER_SUFFIXES = (naming.DELETED_SUFFIX, naming.CLEANED_SUFFIX, naming.SWAP_SUFFIX)


@dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    clean: bool
    recovered_bytes_cut: int
    #: The directory held nothing before this open (only, maybe, its lock file): the log was created here,
    #: empty, and none of its files was fsynced (see :func:`load_log`).
    fresh: bool = False


def remove_segment_files(segment: LogSegment) -> None:
    """Close a segment and unlink its three files (missing files are ignored). Idempotent."""
    segment.close()
    for path in (segment.log_path, segment.index.path, segment.time_index.path):
        path.unlink(missing_ok=True)


def _clean_leftovers(directory: Path) -> list[int]:
    bases: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(naming.TMP_SUFFIX):
            os.unlink(entry.path)
            continue
        parsed = naming.parse_segment_file(name)
        if parsed is None:
            continue
        base, kind, state = parsed
        if state in _LEFTOVER_SUFFIXES:
            _log.info("removing leftover %s", entry.path)
            os.unlink(entry.path)
        elif kind == naming.LOG_SUFFIX:
            bases.add(base)
        else:
            indexes.append((base, Path(entry.path)))
    for base, path in indexes:
        if base not in bases:
            path.unlink(missing_ok=True)
    return sorted(bases)


def _index_files_plausible(segment: LogSegment) -> bool:
    for path, entry_size in (
        (segment.index.path, OFFSET_ENTRY_SIZE),
        (segment.time_index.path, TIME_ENTRY_SIZE),
    ):
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return False
        if size % entry_size:
            return False
    return True


def load_log(
    directory: Path, config: LogConfig, *, now_ms: int, start_offset: int | None = None
) -> LoadedLog:
    """Open (creating if needed) the partition directory and recover it.

    ``start_offset`` applies only when the log holds no batch: it is then (re)created empty at that
    offset, for restores. Not idempotent in effect (it repairs files), but running it twice is harmless.

    A directory that held nothing (``fresh``) gets its first, empty segment without any fsync: losing
    those empty files in a crash loses no record (the next open makes them again), and the log's first
    flush fsyncs the directory, as after a roll (Kafka's ``LocalLog.flush``). Anything else is made
    durable before this returns.

    Raises:
        OSError: a file cannot be read, written or removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    fresh = set(os.listdir(directory)) <= {naming.LOCK_FILE}
    marker = directory / naming.CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    bases = _clean_leftovers(directory)
    checkpointed_start = read_offset_checkpoint(directory / naming.LOG_START_OFFSET_FILE)
    recovery_point = read_offset_checkpoint(directory / naming.RECOVERY_POINT_FILE)

    def make(base: int) -> LogSegment:
        return LogSegment.open_existing(
            directory,
            base,
            index_bytes=config.segment_index_bytes,
            index_interval=config.index_interval_bytes,
            created_ms=now_ms,
        )

    segments = [make(base) for base in bases]
    for seg, following in zip(segments, bases[1:], strict=False):
        seg.next_offset = following
        seg.sealed = True
    cut = 0
    if segments:
        if clean and recovery_point is not None:
            _open_clean(segments)
        else:
            first = max(bisect_right(bases, recovery_point or 0) - 1, 0)
            for seg in segments[:first]:
                if not _index_files_plausible(seg):
                    seg.recover(active=False, truncate=False)
            cut = _recover_from(segments, first)
    _drop_empty_segments(segments)
    if not segments or (
        start_offset is not None and _is_empty(segments) and segments[0].base_offset != start_offset
    ):
        for seg in segments:
            remove_segment_files(seg)
        base = start_offset if start_offset is not None else (checkpointed_start or 0)
        segments = [
            LogSegment.create(
                directory,
                base,
                index_bytes=config.segment_index_bytes,
                index_interval=config.index_interval_bytes,
                created_ms=now_ms,
            )
        ]
        checkpointed_start = base
    log_end = segments[-1].next_offset
    log_start = max(segments[0].base_offset, checkpointed_start or 0)
    if start_offset is not None and _is_empty(segments):
        log_start = start_offset
    log_start = min(log_start, log_end)
    if fresh:  # empty files a crash may lose: the next open makes them again; the first flush syncs them
        return LoadedLog(segments, log_start, log_end, clean, cut, fresh=True)
    if not clean:
        for seg in segments:
            if seg.fd >= 0:
                os.fsync(seg.fd)
    marker.unlink(missing_ok=True)
    fsync_directory(directory)
    return LoadedLog(segments, log_start, log_end, clean, cut)


def _is_empty(segments: list[LogSegment]) -> bool:
    return all(seg.size == 0 for seg in segments)


def _open_clean(segments: list[LogSegment]) -> None:
    last = segments[-1]
    for seg in segments[:-1]:
        if not _index_files_plausible(seg):
            seg.recover(active=False, truncate=False)
    try:
        last.load_active()
    except IndexCorruptError as err:
        _log.warning("rebuilding the indexes of %s: %s", last.log_path, err)
        last.recover(active=True)


def _recover_from(segments: list[LogSegment], first: int) -> int:
    total_cut = 0
    i = first
    while i < len(segments):
        seg = segments[i]
        is_last = i == len(segments) - 1
        cut = seg.recover(active=is_last)
        total_cut += cut
        if cut:
            _log.warning("recovery cut %d bytes from the tail of %s", cut, seg.log_path)
        if cut and not is_last:
            for later in segments[i + 1 :]:
                _log.warning("recovery deletes %s: an earlier segment lost its tail", later.log_path)
                remove_segment_files(later)
            del segments[i + 1 :]
            seg.reactivate()
        i += 1
    return total_cut


def _drop_empty_segments(segments: list[LogSegment]) -> None:
    kept = [seg for i, seg in enumerate(segments) if seg.size or i == len(segments) - 1]
    for seg in segments:
        if seg not in kept:
            remove_segment_files(seg)
    segments[:] = kept
    while len(segments) > 1 and segments[-1].base_offset < segments[-2].next_offset:
        remove_segment_files(segments.pop())
    if segments and segments[-1].sealed:
        segments[-1].reactivate()
