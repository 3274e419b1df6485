"""A trimmed copy of a local segment: its batches from a given offset on, with rebuilt indexes.

Replicas roll their segments independently, so a new leader's local segment may straddle the end of the
remote data its predecessor uploaded (``base <= remote next offset - 1 < last``). Uploading it whole would
make two ``copy_finished`` remote segments overlap, which the manifest forbids (readers, Spark among them,
rely on it). Instead the uploader sends a copy that starts at the first batch at or after the remote next
offset: the ``.log`` bytes from that batch's position to the end, and an offset index and a time index
rebuilt for the copy by the engine's own recovery scan (:meth:`LogSegment.recover`), so the remote objects
look exactly like a segment that had been rolled there.

The copy lives in :data:`TRIM_DIR` inside the partition directory (a name the log's recovery ignores) and
is deleted after the upload; a leftover from a crash is removed before the next copy is made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from tierlog.tiering.log import SegmentInfo, naming
from tierlog.tiering.log.scan import scan_batches
from tierlog.tiering.log.segment import LogSegment
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = ["TRIM_DIR", "trimmed_copy", "remove_trimmed"]

TRIM_DIR = "remote-trim"
_COPY_CHUNK = 1 << 20


def trimmed_copy(
    info: SegmentInfo, from_offset: int, directory: Path, *, index_bytes: int, index_interval: int
) -> SegmentInfo | None:
    """Write the batches of sealed segment ``info`` whose base offset is at least ``from_offset`` as a new
    segment in ``directory`` (created, emptied first), with both indexes rebuilt and sealed. Returns its
    snapshot, or None when no batch of ``info`` starts at or after ``from_offset``.

    Blocking (reads and writes files): call it from a worker thread. Not thread-safe for one
    ``directory``; the caller serialises (the remote log's per-partition lock).

    Raises:
        InvalidRequestError: a batch holds ``from_offset`` without starting there (cutting there would
            split a batch; replicas hold identical batches, so this means the logs diverged).
        CorruptRecordError: the source segment does not scan cleanly to its end.
        OSError: a read or write fails.
    """
    if not info.base_offset < from_offset < info.next_offset:
        raise InvalidRequestError(
            f"offset {from_offset} is not inside segment {info.base_offset}..{info.next_offset - 1}"
        )
    remove_trimmed(directory)
    directory.mkdir(parents=True)
    fd = os.open(info.log_path, os.O_RDONLY)
    try:
        start: int | None = None
        new_base = -1
        end = 0
        for position, header in scan_batches(fd, base_offset=info.base_offset, end=info.size_bytes):
            end = position + header.size
            if start is not None:
                continue
            if header.base_offset >= from_offset:
                start, new_base = position, header.base_offset
            elif header.last_offset >= from_offset:
                raise InvalidRequestError(
                    f"batch {header.base_offset}..{header.last_offset} of segment {info.base_offset} "
                    f"holds offset {from_offset} without starting there: cannot cut the segment there"
                )
        if end != info.size_bytes:
            raise CorruptRecordError(
                f"segment {info.log_path} does not scan cleanly: valid batches end at {end} of "
                f"{info.size_bytes} bytes"
            )
        if start is None:
            return None
        _copy_range(fd, start, info.size_bytes, naming.log_path(directory, new_base))
    finally:
        os.close(fd)
    segment = LogSegment.open_existing(
        directory, new_base, index_bytes=index_bytes, index_interval=index_interval, created_ms=0
    )
    try:
        if segment.recover(active=False):
            raise CorruptRecordError(f"the trimmed copy of segment {info.log_path} lost its tail")
        trimmed = segment.info()
    finally:
        segment.close()
    if trimmed.next_offset != info.next_offset:
        raise CorruptRecordError(
            f"the trimmed copy of segment {info.log_path} ends at {trimmed.next_offset}, "
            f"not {info.next_offset}"
        )
    return trimmed


def remove_trimmed(directory: Path) -> None:
    """Delete a trimmed copy's directory and everything in it. Idempotent; blocking."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(directory)


def _copy_range(fd: int, start: int, end: int, target: Path) -> None:
    """Copy bytes ``[start, end)`` of ``fd`` into a new file ``target``."""
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        position = start
        while position < end:
            chunk = os.pread(fd, min(_COPY_CHUNK, end - position), position)
            if not chunk:
                raise CorruptRecordError(f"segment file ended at {position}, before {end}")
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            position += len(chunk)
    finally:
        os.close(out)
