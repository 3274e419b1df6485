"""The value types the partition log returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

__all__ = ["AppendInfo", "ProducerInfo", "ReadResult", "FileSlice", "SegmentInfo"]


@dataclass(frozen=True)
class AppendInfo:
    """What an append stored: the offsets it assigned, the append time (-1 unless LogAppendTime) and the
    leader epoch it stamped (-1 when it stamped none).

    ``duplicate``: every batch was a retry of one already stored (idempotent producer): nothing was
    appended and the offsets are those stored the first time (``log_append_time`` and ``leader_epoch``
    are then -1)."""

    base_offset: int
    last_offset: int
    record_count: int
    batch_base_offsets: list[int]
    log_append_time: int
    leader_epoch: int = -1  # the epoch stamped into the batches by a leader's append, else -1
    duplicate: bool = False  # every batch was a duplicate: nothing appended


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One idempotent producer known to a partition: its epoch and its last stored batch (last sequence,
    last offset, max timestamp). For diagnostics and tests."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    last_timestamp: int


@dataclass(frozen=True)
class ReadResult:
    """Whole batches read from the log; ``data`` may begin with a batch below the requested offset.

    The three offsets are one published snapshot: ``high_watermark`` is the log's published high
    watermark (see :meth:`PartitionLog.update_high_watermark`), not the log end offset; ``data`` is not
    capped at it (callers pass ``max_offset``)."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass
class FileSlice:
    """A region of a segment file, for ``sendfile``: the same bytes :meth:`PartitionLog.read` would return.

    Owns ``fd``, a duplicate of the segment's descriptor, so the region stays readable even if retention
    unlinks the file meanwhile. The caller must :meth:`close` it (or use it as a context manager).
    ``high_watermark`` is the published high watermark, as in :class:`ReadResult`.
    ``close`` is idempotent; a slice is not meant to be shared between threads.
    """

    fd: int
    position: int
    size: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    _closed: bool = field(default=False, repr=False, compare=False)

    def read(self) -> bytes:
        """The slice's bytes, read with ``pread``.

        Raises:
            OSError: the read fails or the slice is closed.
        """
        if self._closed:
            raise OSError("file slice is closed")
        return os.pread(self.fd, self.size, self.position) if self.size else b""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.fd)

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True)
class SegmentInfo:
    """A snapshot of one segment: offsets ``[base_offset, next_offset)``, size, max timestamp (-1 if none)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    sealed: bool
    log_path: Path
    index_path: Path
    timeindex_path: Path
