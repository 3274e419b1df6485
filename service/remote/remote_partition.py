"""The remote tier as one partition sees it: reads below the local log start, the tiered log start offset,
retention across both tiers, and the produce-side disk budget check.

A :class:`RemotePartition` is attached to a :class:`~tierlog.service.topics.partition.Partition` whose topic
has
``remote.storage.enable=true``; the partition delegates to it, so every API (native fetch, REST records,
consumer groups) reads remote data through the same ``Partition.read`` / ``read_slice`` calls.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.tiering.codec.header import decode_header
from tierlog.tiering.log import FileSlice, LogConfig, PartitionLog, ReadResult, SegmentInfo
from tierlog.tiering.remote.remote_log import RemoteLog
from tierlog.wire.errors import CorruptRecordError, NotFoundError, OffsetOutOfRangeError

if TYPE_CHECKING:
    from tierlog.service.remote.tier import RemoteTier

__all__ = ["RemotePartition", "memory_slice"]


def memory_slice(data: bytes, high_watermark: int, log_start: int, log_end: int) -> FileSlice:
    """``data`` in an anonymous in-memory file, as a :class:`FileSlice` the native fetch can sendfile.

    Blocking (writes the bytes): call it from a worker thread. The caller closes the slice.

    Raises:
        OSError: the memory file cannot be created or written.
    """
    fd = os.memfd_create("tierlog-remote-read", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except BaseException:
        os.close(fd)
        raise
    return FileSlice(fd, 0, len(data), high_watermark, log_start, log_end)


def _first_offset(data: bytes) -> int | None:
    """Base offset of the first batch in ``data`` (None when empty). Pure."""
    return decode_header(data).base_offset if data else None


class RemotePartition:
    """The remote side of one partition. Event-loop only, apart from :meth:`veto` (any thread)."""

    def __init__(self, tier: RemoteTier, remote_log: RemoteLog) -> None:
        self.tier = tier
        self.remote_log = remote_log
        self.local_bytes = 0
        self.local_end = 0
        self.opened = False
        self.opened_leading = False  # opened (its manifest cleaned, recovered) as the leader
        self.sealed_end = 0  # one past the last sealed offset (the active segment's base)

    @property
    def log(self) -> PartitionLog:
        return self.remote_log.log

    def log_start_offset(self, local_start: int) -> int:
        """The partition's log start offset: the remote one when the remote tier holds data."""
        remote = self.remote_log.remote_start_offset
        return local_start if remote is None else remote

    def veto(self, info: SegmentInfo) -> bool:
        """Local retention keeps ``info`` unless a ``copy_finished`` remote segment covers it."""
        return not self.remote_log.covers(info)

    def serves(self, offset: int, local_start: int) -> bool:
        """Whether a read at ``offset`` goes to the remote tier (it is below the local log start)."""
        return offset < local_start and self.remote_log.remote_start_offset is not None

    async def read(
        self, offset: int, max_bytes: int, ranges: Callable[[], tuple[int, int, int]]
    ) -> ReadResult:
        """Whole CRC-verified batches from the remote segment holding ``offset``.

        ``ranges`` gives ``(high_watermark, log_start, log_end)`` for the result. Idempotent.

        Raises:
            OffsetOutOfRangeError: below the remote log start offset.
            CorruptRecordError: remote bytes failed a check, or a listed object is missing.
            UnavailableError: the object store is down.
        """
        high_watermark, log_start, log_end = ranges()
        start = self.remote_log.remote_start_offset
        if start is None or offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{log_start}, {log_end}] of "
                f"{self.remote_log.topic}-{self.remote_log.partition}",
                log_start_offset=log_start,
                log_end_offset=log_end,
            )
        reader = self.tier.reader()
        try:
            result = await reader.read(self.remote_log.manifest, offset, max_bytes)
        except OffsetOutOfRangeError as err:
            start = self.remote_log.remote_start_offset
            if start is not None and offset >= start:
                # below the local log start, above the remote one, and no remote segment holds it: the
                # data is lost (e.g. a damaged manifest recovery could not re-derive it). Never skip it.
                raise CorruptRecordError(
                    f"remote data of {self.remote_log.topic}-{self.remote_log.partition} at offset {offset} "
                    f"is missing: {err.message}"
                ) from err
            raise OffsetOutOfRangeError(  # the manifest moved on (retention): report the whole range
                err.message, log_start_offset=log_start, log_end_offset=log_end
            ) from err
        except NotFoundError as err:
            start = self.remote_log.remote_start_offset
            if start is None or offset < start:  # retention deleted it while we read
                high_watermark, log_start, log_end = ranges()
                raise OffsetOutOfRangeError(
                    f"offset {offset} was deleted by retention",
                    log_start_offset=log_start,
                    log_end_offset=log_end,
                ) from err
            # a listed object is gone: data loss, not a missing topic
            raise CorruptRecordError(f"remote data is missing: {err.message}") from err
        first = _first_offset(result.data)
        if first is not None and first > offset:  # a hole in the remote tier: lost data, never skipped
            raise CorruptRecordError(
                f"remote data of {self.remote_log.topic}-{self.remote_log.partition} is missing: offsets "
                f"{offset}..{first - 1} are in no remote segment"
            )
        self.tier.count_read(self.remote_log.topic, len(result.data))
        return ReadResult(result.data, high_watermark, log_start, log_end)

    async def read_slice(
        self, offset: int, max_bytes: int, ranges: Callable[[], tuple[int, int, int]]
    ) -> FileSlice:
        """As :meth:`read`, in an anonymous memory file for ``sendfile``; the caller closes it."""
        result = await self.read(offset, max_bytes, ranges)
        return await asyncio.to_thread(
            memory_slice, result.data, result.high_watermark, result.log_start_offset, result.log_end_offset
        )

    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The first remote ``(offset, timestamp)`` at or after ``timestamp``, or None (look locally)."""
        if self.remote_log.remote_start_offset is None:
            return None
        found = await self.tier.reader().offset_for_timestamp(self.remote_log.manifest, timestamp)
        return None if found is None else (int(found[0]), int(found[1]))

    def check_budget(self, size: int) -> None:
        """Raise UnavailableError (503, retriable) if ``size`` more local bytes would pass the broker's
        disk budget while uploads are behind. Cheap; no I/O."""
        self.tier.check_budget(size)

    def note_append(self, first_offset: int, local_bytes: int, local_end: int) -> None:
        """Record an append (for lag in seconds, the idle roll and the disk budget). Cheap."""
        self.remote_log.note_append(first_offset)
        self.local_bytes = local_bytes
        self.local_end = local_end

    @property
    def behind(self) -> bool:
        """Whether sealed local data waits for upload (cached values; no I/O). The active segment does
        not count: it cannot be uploaded yet."""
        return (self.remote_log.remote_next_offset or 0) < self.sealed_end

    def on_roll(self, info: SegmentInfo) -> None:
        """Roll listener (runs in the engine's worker thread): remember where sealed data ends."""
        self.sealed_end = max(self.sealed_end, info.next_offset)

    async def apply_retention(self, config: LogConfig) -> list[SegmentInfo]:
        """Local retention (``local.retention.*``, never past the uploaded data), then whole-log retention
        of the remote tier (``retention.*`` over remote + local-only bytes), trimming local segments the
        remote deletion passed. Returns the local segments deleted. Idempotent.

        A follower (the remote log does not lead) applies the same local retention against the manifest
        it last loaded, deletes no remote data, and trims local segments below the manifest's log start
        offset (the leader's remote deletions).

        Raises:
            UnavailableError: the store or the disk failed (re-run to finish).
        """
        deleted: list[SegmentInfo] = await asyncio.to_thread(
            self.log.apply_retention,
            self.veto,
            retention_ms=config.effective_local_retention_ms,
            retention_bytes=config.effective_local_retention_bytes,
        )
        segments = await asyncio.to_thread(self.log.segments)
        done = self.remote_log.remote_next_offset or 0
        local_only = sum(s.size_bytes for s in segments if s.base_offset >= done)
        if self.remote_log.leading:
            start = await self.remote_log.apply_retention(
                retention_ms=config.retention_ms,
                retention_bytes=config.retention_bytes,
                local_only_bytes=local_only,
            )
        else:
            start = self.remote_log.manifest.log_start_offset if self.remote_log.remote_next_offset else -1
        if start > 0:
            trimmed: list[SegmentInfo] = await asyncio.to_thread(
                self.log.apply_retention, lambda s: s.next_offset > start, retention_ms=-1, retention_bytes=0
            )
            deleted.extend(trimmed)
        self.local_bytes = sum(s.size_bytes for s in await asyncio.to_thread(self.log.segments))
        return deleted
