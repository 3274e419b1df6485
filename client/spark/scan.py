"""Reading one task's records on an executor: ranged GETs of a segment, decoded with the shared codec,
yielded as Arrow record batches with the schema of Spark's Kafka source.

For a task that needs only part of its segment (a byte range of a large segment, or the segment at
the edge of an offset or time range) the segment's offset index (and, for timestamp bounds, its time
index) is read first to find where the wanted batches start and end, exactly as a Kafka broker seeks;
the ``.log`` object is then read in ranged GETs of ``readChunkBytes``. Where an index is comes from the
task's manifest entry (:func:`tierlog.tiering.remote.packed_indexes.index_refs`): a ranged GET of the
packed ``.indexes`` object (one GET for both indexes when the task has timestamp bounds), or a GET of the
whole ``.index`` / ``.timeindex`` object a segment uploaded before the packed layout has. Indexes are
derived data: a missing or inconsistent index only costs reading more of the log, never a wrong answer,
because every record is still checked against the task's offset and timestamp bounds.

Every batch's CRC is verified (:func:`tierlog.tiering.codec.header.verify_batch`); consecutive data
batches are decoded together, every codec (none, gzip, snappy, lz4, zstd) included, by
:func:`tierlog.tiering.codec.columns.decode_columns` straight into Arrow buffers
(:mod:`tierlog.client.spark.arrow`), with no Python object per record. A corrupt batch raises
:class:`CorruptSegmentError` naming the object and the byte position, or, with ``onCorruption=skip``,
ends the task's read of that object and is logged as a WARNING on the logger ``tierlog.spark`` (one
per skipped object, so counting the warnings counts the objects; Spark 4.1+ exposes them as
``spark.tvf.python_worker_logs()``).

Thread-safety: :func:`scan_task` keeps all state local; it may run concurrently in several threads.
"""

from __future__ import annotations

import logging
import struct
import uuid
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from tierlog.client.spark.archive_reader import ArchiveReader
from tierlog.client.spark.arrow import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_NO_HEADERS,
    RunArrays,
    Slicer,
    Window,
    run_arrays,
)
from tierlog.client.spark.options import ScanOptions
from tierlog.client.spark.plan import SegmentTask
from tierlog.tiering.codec.columns import decode_columns
from tierlog.tiering.codec.header import LOG_OVERHEAD, BatchHeader, verify_batch
from tierlog.tiering.remote.layout import segment_key
from tierlog.tiering.remote.packed_indexes import IndexRef, index_refs
from tierlog.wire.errors import CorruptRecordError, NotFoundError

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_NO_HEADERS",
    "CorruptSegmentError",
    "SPARK_SCHEMA_DDL",
    "SPARK_SCHEMA_DDL_NO_HEADERS",
    "scan_task",
]

_log = logging.getLogger("tierlog.spark")

SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
SPARK_SCHEMA_DDL_NO_HEADERS = SPARK_SCHEMA_DDL.rsplit(", headers", 1)[0]
_BATCH_LENGTH = struct.Struct(">qi")  # base_offset, batch_length: the first 12 bytes of a batch
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class CorruptSegmentError(CorruptRecordError):
    """A segment object failed validation; the message names the object and the byte position."""


@dataclass(slots=True)
class _Index:
    """A decoded sparse index: parallel ascending arrays (keys, values)."""

    keys: array[int]
    values: array[int]


def _decode_index(data: bytes, entry: struct.Struct, size_limit: int | None) -> _Index | None:
    """Decode whole entries; ``None`` if they are not strictly increasing (then the index is not used)."""
    keys: array[int] = array("q")
    values: array[int] = array("q")
    usable = len(data) - len(data) % entry.size
    for key, value in entry.iter_unpack(memoryview(data)[:usable]):
        keys.append(key)
        values.append(value)
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
            return None
    if size_limit is not None and values and (values[-1] >= size_limit or values[0] < 0):
        return None
    return _Index(keys, values)


def _fetch_index(
    archive: ArchiveReader, ref: IndexRef, entry: struct.Struct, size: int | None
) -> _Index | None:
    """The index at ``ref``: a ranged GET of ``[start, end)`` (the packed layout), a whole-object GET when
    the ref runs to the object's end (the older separate objects), no request for an empty ref. ``None``
    (no usable index) when the object is missing, a range holds fewer bytes than the manifest entry
    says (as the broker's reader, it is not the object the entry describes), or the entries are
    inconsistent.

    Raises:
        UnavailableError, UnauthorizedError: the store failed.
    """
    if ref.empty:
        return _decode_index(b"", entry, size)
    try:
        if ref.end is None:
            data = archive.get(ref.object_key)[ref.start :]
        else:
            data = archive.get_range(ref.object_key, ref.start, ref.end)
    except NotFoundError:
        return None
    if ref.end is not None and len(data) != ref.end - ref.start:
        return None
    return _decode_index(data, entry, size)


def _fetch_indexes(
    archive: ArchiveReader, offset_ref: IndexRef, time_ref: IndexRef, size: int | None
) -> tuple[_Index | None, _Index | None]:
    """Both indexes of a segment, as :func:`_fetch_index` answers each: with one ranged GET when they are
    adjacent non-empty ranges of one object (the packed layout), each on its own otherwise.

    Raises:
        UnavailableError, UnauthorizedError: the store failed.
    """
    start, middle, end = offset_ref.start, offset_ref.end, time_ref.end
    if (
        offset_ref.object_key != time_ref.object_key
        or middle is None
        or end is None
        or middle != time_ref.start
        or offset_ref.empty
        or time_ref.empty
    ):
        return _fetch_index(archive, offset_ref, _OFFSET_ENTRY, size), _fetch_index(
            archive, time_ref, _TIME_ENTRY, None
        )
    try:
        data = archive.get_range(offset_ref.object_key, start, end)
    except NotFoundError:
        return None, None
    # a range the object does not fill is no index (as _fetch_index): the time index first, then both
    offsets = (
        _decode_index(data[: middle - start], _OFFSET_ENTRY, size) if len(data) >= middle - start else None
    )
    times = _decode_index(data[middle - start :], _TIME_ENTRY, None) if len(data) == end - start else None
    return offsets, times


class _Bounds:
    """Byte positions ``[start, end)`` of the batches a task must decode, from the indexes."""

    def __init__(self, task: SegmentTask, offsets: _Index | None, times: _Index | None) -> None:
        self.task = task
        self.offsets = offsets
        base = task.base_offset
        start = self._snap(task.byte_start) if task.byte_start > 0 else 0
        end = self._snap(task.byte_end) if task.byte_end < task.size_bytes else task.size_bytes
        if task.lo > base:
            start = max(start, self._floor_position(task.lo))
        if task.hi <= task.last_offset:
            end = min(end, self._end_position(task.hi - 1))
        if times is not None and task.start_ts is not None:
            i = bisect_right(times.keys, task.start_ts - 1) - 1
            if i >= 0:  # every record up to this entry's offset is older than start_ts
                start = max(start, self._floor_position(base + times.values[i]))
        if times is not None and task.end_ts is not None:
            i = bisect_left(times.keys, task.end_ts)
            if i < len(times.keys):  # the first record at or after end_ts is at or before this offset
                end = min(end, self._end_position(base + times.values[i]))
        self.start, self.end = start, end

    def _snap(self, position: int) -> int:
        """The first indexed batch position >= ``position`` (split points land on batch starts)."""
        if self.offsets is None:  # without an index a split cannot be aligned: the first range reads all
            return self.task.size_bytes
        i = bisect_left(self.offsets.values, position)
        return self.offsets.values[i] if i < len(self.offsets.values) else self.task.size_bytes

    def _floor_position(self, offset: int) -> int:
        """Where a batch at or before the one holding ``offset`` starts (Kafka's offset index lookup)."""
        if self.offsets is None:
            return 0
        i = bisect_right(self.offsets.keys, offset - self.task.base_offset) - 1
        return self.offsets.values[i] if i >= 0 else 0

    def _end_position(self, offset: int) -> int:
        """A batch start past every record at or below ``offset`` (or the object's end)."""
        if self.offsets is None:
            return self.task.size_bytes
        i = bisect_left(self.offsets.keys, offset - self.task.base_offset)
        return self.offsets.values[i + 1] if i + 1 < len(self.offsets.values) else self.task.size_bytes


@dataclass(frozen=True, slots=True)
class _Batch:
    """A verified batch: ``buffer[local:local + header.size]``, at byte ``pos`` of the object."""

    buffer: bytes
    local: int
    pos: int
    header: BatchHeader


def _chunks(
    archive: ArchiveReader, key: str, task: SegmentTask, start: int, end: int, chunk: int
) -> Iterator[list[_Batch]]:
    """The batches starting in ``[start, end)``, CRC verified, one list per ranged GET of about ``chunk``
    bytes (a GET grows to hold a larger batch). The next GET is sent only when the caller asks for more.

    Raises:
        CorruptRecordError: bad bytes (the message gives the byte position, not the object name); the
            good batches before them are yielded first.
    """
    size = task.size_bytes
    buffer = b""
    buffer_pos = pos = start  # buffer[0] is at object position buffer_pos
    while pos < end:
        found: list[_Batch] = []
        need = LOG_OVERHEAD
        while pos < end:
            local = pos - buffer_pos
            need = LOG_OVERHEAD
            if len(buffer) - local >= LOG_OVERHEAD:
                need += max(_BATCH_LENGTH.unpack_from(buffer, local)[1], 0)
            if len(buffer) - local < need:
                break
            try:
                header = verify_batch(buffer, local)
            except CorruptRecordError as err:
                if found:
                    yield found
                raise CorruptRecordError(f"the batch at byte {pos}: {err}") from err
            found.append(_Batch(buffer, local, pos, header))
            pos += header.size
        if found:
            yield found
        if pos >= end:
            return
        # The unread tail (less than one batch) is read again rather than copied in front of the new
        # bytes: the batches of a GET stay in the one bytes object the store returned.
        held = buffer_pos + len(buffer)
        fetch_to = min(size, max(pos + need, min(held + chunk, end)))
        if fetch_to <= held:
            raise CorruptRecordError(f"the batch at byte {pos} runs past the object's end ({size} bytes)")
        buffer = archive.get_range(key, pos, fetch_to)
        if len(buffer) != fetch_to - pos:
            raise CorruptRecordError(
                f"object is {pos + len(buffer)} bytes, shorter than the {size} the manifest records"
            )
        buffer_pos = pos


def _decode(run: list[_Batch], include_headers: bool) -> RunArrays:
    """One ``decode_columns`` call over consecutive batches of one buffer (CRCs already checked)."""
    first, last = run[0], run[-1]
    view = memoryview(first.buffer)[first.local : last.local + last.header.size]
    try:
        columns = decode_columns(view, verify=False)
    except CorruptRecordError as err:
        raise CorruptRecordError(f"the batch at byte {first.pos}: {err}") from err
    types = [(b.header.records_count, 1 if b.header.log_append_time else 0) for b in run]
    return run_arrays(columns, types, include_headers)


def _emit(run: list[_Batch], window: Window, slicer: Slicer) -> Iterator[pa.RecordBatch]:
    """The selected records of ``run``. A run that does not decode is decoded batch by batch, so the
    records before the bad batch are still returned (as when each batch was decoded on its own).
    """
    if not run:
        return
    try:
        arrays = _decode(run, slicer.include_headers)
    except CorruptRecordError:
        if len(run) == 1:
            raise
        for batch in run:
            yield from _emit([batch], window, slicer)
            if window.stopped:
                return
        raise  # pragma: no cover - a run fails only if one of its batches does
    start, end = window.select(arrays, run[0].header.base_offset, run[-1].header.last_offset)
    yield from slicer.batches(arrays, start, end)


def _select(
    archive: ArchiveReader, key: str, task: SegmentTask, bounds: tuple[int, int], options: ScanOptions
) -> Iterator[pa.RecordBatch]:
    window = Window(task.lo, task.hi, task.start_ts, task.end_ts)
    slicer = Slicer(task.topic, task.partition, options.include_headers, options.max_rows_per_batch)
    for found in _chunks(archive, key, task, *bounds, options.read_chunk_bytes):
        run: list[_Batch] = []
        for batch in found:
            header = batch.header
            if header.base_offset >= task.hi:
                window.stopped = True
                break
            if header.next_offset <= task.lo or header.is_control:
                yield from _emit(run, window, slicer)
                run = []
                if window.stopped:
                    break
            else:
                run.append(batch)
        yield from _emit(run, window, slicer)
        if window.stopped:
            return


def scan_task(archive: ArchiveReader, options: ScanOptions, task: SegmentTask) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow record batches (schema :data:`ARROW_SCHEMA`, at most
    ``maxRowsPerBatch`` rows each), decoded column-wise (no Python object per record). Control batches
    are skipped, as Kafka consumers skip them.

    Raises:
        CorruptSegmentError: bad bytes in the ``.log`` object (unless ``onCorruption=skip``).
        NotFoundError: the ``.log`` object is missing (the manifest says it was uploaded).
        UnavailableError, UnauthorizedError: the store failed.
    """
    segment_uuid = uuid.UUID(task.segment_uuid)
    log_key = segment_key(task.topic, task.partition, task.base_offset, segment_uuid)
    start, end = task.byte_start, min(task.byte_end, task.size_bytes)
    if not task.whole:
        offset_ref, time_ref = index_refs(
            task.topic, task.partition, task.base_offset, segment_uuid, task.indexes
        )
        if task.start_ts is None and task.end_ts is None:
            offsets, times = _fetch_index(archive, offset_ref, _OFFSET_ENTRY, task.size_bytes), None
        else:
            offsets, times = _fetch_indexes(archive, offset_ref, time_ref, task.size_bytes)
        bounds = _Bounds(task, offsets, times)
        start, end = bounds.start, bounds.end
    try:
        yield from _select(archive, log_key, task, (start, end), options)
    except CorruptRecordError as err:
        where = options.store.display(log_key)
        if not options.skip_corrupt:
            raise CorruptSegmentError(f"corrupt segment object {where}: {err}") from err
        _log.warning("skipped the rest of corrupt segment object %s: %s", where, err)
