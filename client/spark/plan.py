"""Planning a scan on the driver: manifests and bounds in, one task per segment (or byte range) out.

Only the manifests are read here (one LIST and one GET per partition); segments outside the requested
offsets or timestamps never become tasks, so their objects are never touched. Within the segments at
the edges of the range the executor narrows further with the segment's uploaded offset and time index
(:mod:`tierlog.client.spark.scan`); a task carries the manifest entry's ``indexes`` so the executor knows
where they are (the packed ``.indexes`` object, or the older ``.index`` / ``.timeindex`` objects).

Bounds follow Spark's Kafka source: a start offset is inclusive and an end offset exclusive; a start
timestamp means "from the first record whose timestamp is >= it" and an end timestamp "up to, not
including, the first record whose timestamp is >= it" (offsets resolved as Kafka's ListOffsets by time
would). Only ``copy_finished`` segments at or above the manifest's log start offset are read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from tierlog.client.spark.archive_reader import ArchiveReader, list_partitions, load_manifest
from tierlog.client.spark.options import EARLIEST, LATEST, Bound, ScanOptions
from tierlog.tiering.remote import manifest as mf
from tierlog.wire.errors import OffsetOutOfRangeError, UnknownPartitionError, UnknownTopicError

__all__ = [
    "SegmentTask",
    "PartitionRange",
    "load_manifests",
    "archive_range",
    "resolve_range",
    "plan_segments",
]

_MANIFEST_THREADS = 8


@dataclass(frozen=True)
class SegmentTask(InputPartition):
    """One Spark task: batches of one remote segment whose start position is in ``[byte_start, byte_end)``
    and records with offsets in ``[lo, hi)``; ``start_ts`` / ``end_ts`` are the timestamp bounds of a
    segment at the edge of a time range. ``indexes`` is the manifest entry's index layout
    (``RemoteSegment.indexes``: the byte sizes of the offset and time index in the packed ``.indexes``
    object, or ``None`` for the older separate objects). Picklable; carries no credentials (those stay
    on the reader).
    """

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    segment_uuid: str
    size_bytes: int
    byte_start: int
    byte_end: int
    lo: int
    hi: int
    start_ts: int | None = None
    end_ts: int | None = None
    indexes: tuple[int, int] | None = None

    @property
    def whole(self) -> bool:
        """Whether the task reads every byte and every record of its segment (no index needed)."""
        return (
            self.byte_start == 0
            and self.byte_end >= self.size_bytes
            and self.lo <= self.base_offset
            and self.hi > self.last_offset
            and self.start_ts is None
            and self.end_ts is None
        )


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[lo, hi)`` to read in one partition, and the segments carrying timestamp edges."""

    lo: int
    hi: int
    start_ts: tuple[int, int] | None = None  # (segment base offset, timestamp)
    end_ts: tuple[int, int] | None = None


def load_manifests(
    archive: ArchiveReader, options: ScanOptions, *, require: bool = True
) -> dict[tuple[str, int], mf.Manifest]:
    """The newest manifest of every selected partition (LIST + GET each, a few in parallel).

    With ``require`` (batch reads), a topic or partition the query names and the archive lacks is an
    error naming what the archive has, as Spark's Kafka source fails on an unknown topic or partition,
    instead of an empty table; streams (``require=False``) wait for topics and partitions to appear.

    Raises:
        UnknownTopicError: a topic has no partition in the archive (the message lists the topics found).
        UnknownPartitionError: an ``assign``-ed partition is not archived, or none of the ``partitions``
            option's numbers is (the message lists the partitions found).
        CorruptRecordError, UnavailableError, ...: whatever :func:`load_manifest` raises.
    """
    wanted: list[tuple[str, int]] = []
    for topic in options.topics:
        found = list_partitions(archive, topic)
        if require:
            _check_archived(archive, options, topic, found)
        if options.assign is not None:
            numbers: Iterable[int] = options.assign.get(topic, ())
        else:
            numbers = found
        wanted.extend((topic, p) for p in numbers if options.selects(topic, p))
    if not wanted:
        return {}
    with ThreadPoolExecutor(min(_MANIFEST_THREADS, len(wanted))) as pool:
        loaded = pool.map(lambda tp: load_manifest(archive, tp[0], tp[1]), wanted)
        return dict(zip(wanted, loaded, strict=True))


def _check_archived(archive: ArchiveReader, options: ScanOptions, topic: str, found: list[int]) -> None:
    """Raise when ``topic``, or the partitions of it the options name, are not in the archive."""
    where = archive.location.display("")
    if not found:
        topics = [name for name in archive.list_children("") if not name.startswith(".")]
        raise UnknownTopicError(
            f"topic {topic!r} is not in the archive at {where}: "
            + (f"topics found: {', '.join(topics)}" if topics else "the archive holds no topics")
            + " (only topics with remote.storage.enable=true are archived, and only their uploaded segments)"
        )
    if options.assign is not None:
        missing = [p for p in options.assign.get(topic, ()) if p not in found]
    elif options.partitions is not None and not options.partitions.intersection(found):
        missing = sorted(options.partitions)
    else:
        return
    if missing:
        raise UnknownPartitionError(
            f"topic {topic!r} has no partition {', '.join(map(str, missing))} in the archive at {where}: "
            f"partitions found: {', '.join(map(str, found))}"
        )


def archive_range(manifest: mf.Manifest) -> tuple[int, int]:
    """``(earliest, latest)``: the first archived offset and one past the last (equal when empty)."""
    segments = mf.readable_segments(manifest)
    if not segments:
        return manifest.log_start_offset, manifest.log_start_offset
    return max(manifest.log_start_offset, segments[0].base_offset), segments[-1].last_offset + 1


def _segment_at_or_after(manifest: mf.Manifest, timestamp: int) -> mf.RemoteSegment | None:
    return mf.segment_for_timestamp(manifest, timestamp)


def resolve_range(
    manifest: mf.Manifest, start: Bound, end: Bound, *, fail_on_data_loss: bool
) -> PartitionRange:
    """Turn the bounds of one partition into offsets, as Spark's Kafka source does. Pure.

    Raises:
        OffsetOutOfRangeError: with ``fail_on_data_loss``, a start offset below the earliest archived
            one (its records are gone from the archive).
    """
    earliest, latest = archive_range(manifest)
    start_ts: tuple[int, int] | None = None
    end_ts: tuple[int, int] | None = None
    if start.timestamp is not None:
        segment = _segment_at_or_after(manifest, start.timestamp)
        lo = latest if segment is None else max(segment.base_offset, earliest)
        if segment is not None:
            start_ts = (segment.base_offset, start.timestamp)
    elif start.offset == EARLIEST:
        lo = earliest
    elif start.offset == LATEST:
        lo = latest
    else:
        lo = start.offset
        if lo < earliest and fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"{manifest.topic}-{manifest.partition}: offset {lo} is below the earliest archived offset "
                f"{earliest} (set failOnDataLoss=false to start there instead)",
                log_start_offset=earliest,
                log_end_offset=latest,
            )
        lo = max(lo, earliest)
    if end.timestamp is not None:
        segment = _segment_at_or_after(manifest, end.timestamp)
        hi = latest if segment is None else segment.last_offset + 1
        if segment is not None:
            end_ts = (segment.base_offset, end.timestamp)
    elif end.offset == LATEST:
        hi = latest
    else:
        hi = min(end.offset, latest)
    return PartitionRange(lo, hi, start_ts, end_ts)


def plan_segments(manifest: mf.Manifest, wanted: PartitionRange, *, max_bytes: int) -> list[SegmentTask]:
    """One task per readable segment overlapping ``[lo, hi)``, split into byte ranges of ``max_bytes``
    when larger (except segments at a timestamp edge, whose start depends on what precedes it). Pure.
    """
    tasks: list[SegmentTask] = []
    if wanted.hi <= wanted.lo:
        return tasks
    for segment in mf.readable_segments(manifest):
        if segment.last_offset < wanted.lo or segment.base_offset >= wanted.hi:
            continue
        start_ts = (
            wanted.start_ts[1] if wanted.start_ts and wanted.start_ts[0] == segment.base_offset else None
        )
        end_ts = wanted.end_ts[1] if wanted.end_ts and wanted.end_ts[0] == segment.base_offset else None
        size = segment.size_bytes
        cuts = [0, size]
        if size > max_bytes and start_ts is None and end_ts is None:
            cuts = [*range(0, size, max_bytes), size]
        for byte_start, byte_end in itertools.pairwise(cuts):
            tasks.append(
                SegmentTask(
                    topic=manifest.topic,
                    partition=manifest.partition,
                    base_offset=segment.base_offset,
                    last_offset=segment.last_offset,
                    segment_uuid=str(segment.segment_uuid),
                    size_bytes=size,
                    byte_start=byte_start,
                    byte_end=byte_end,
                    lo=max(wanted.lo, segment.base_offset),
                    hi=min(wanted.hi, segment.last_offset + 1),
                    start_ts=start_ts,
                    end_ts=end_ts,
                    indexes=segment.indexes,
                )
            )
    return tasks
