"""Reading one task's records on an executor: ranged GETs of a segment, decoded with the shared codec,
yielded as Arrow record batches with the schema of Spark's Kafka source.

For a task that needs only part of its segment (a byte range of a large segment, or the segment at
the edge of an offset or time range) the uploaded ``.index`` (and ``.timeindex``) are read first to
find where the wanted batches start and end, exactly as a Kafka broker seeks; the ``.log`` object is
then read in ranged GETs of ``readChunkBytes``. Indexes are derived data: a missing or inconsistent
index only costs reading more of the log, never a wrong answer, because every record is still checked
against the task's offset and timestamp bounds.

Every batch's CRC is verified and every codec (none, gzip, snappy, lz4, zstd) is decoded by
:func:`tierlog.tiering.codec.batch.decode_batch`. A corrupt batch raises :class:`CorruptSegmentError` naming
the object and the byte position, or, with ``onCorruption=skip``, ends the task's read of that object
and is logged as a WARNING on the logger ``tierlog.spark`` (one per skipped object, so counting the
warnings counts the objects; Spark 4.1+ exposes them as ``spark.tvf.python_worker_logs()``).

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

from tierlog.client.spark.options import ScanOptions
from tierlog.client.spark.plan import SegmentTask
from tierlog.client.spark.store import ArchiveReader
from tierlog.tiering.codec.batch import DecodedBatch, decode_batch
from tierlog.tiering.codec.header import LOG_OVERHEAD
from tierlog.tiering.codec.records import Record
from tierlog.tiering.errors import CorruptRecordError, NotFoundError
from tierlog.tiering.remote.layout import segment_keys

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
_HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", _HEADERS_TYPE),
    ]
)
ARROW_SCHEMA_NO_HEADERS = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))
_TS_MS = pa.timestamp("ms", tz="UTC")
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


def _fetch_index(archive: ArchiveReader, key: str, entry: struct.Struct, size: int | None) -> _Index | None:
    try:
        return _decode_index(archive.get(key), entry, size)
    except NotFoundError:
        return None


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


class _Columns:
    """Selected records waiting to become Arrow record batches of at most ``limit`` rows."""

    def __init__(self, topic: str, partition: int, include_headers: bool, limit: int) -> None:
        self.topic, self.partition = topic, partition
        self.include_headers, self.limit = include_headers, limit
        self.records: list[Record] = []
        self.types: list[int] = []

    def add(self, records: list[Record], ts_type: int) -> None:
        self.records.extend(records)
        self.types.extend([ts_type] * len(records))

    def __len__(self) -> int:
        return len(self.records)

    def full(self) -> bool:
        return len(self.records) >= self.limit

    def build(self) -> pa.RecordBatch:
        """An Arrow batch of the first ``limit`` pending records (all of them if fewer)."""
        take, self.records = self.records[: self.limit], self.records[self.limit :]
        types, self.types = self.types[: self.limit], self.types[self.limit :]
        n = len(take)
        arrays = [
            pa.array([r.key for r in take], type=pa.binary()),
            pa.array([r.value for r in take], type=pa.binary()),
            pa.array([self.topic] * n, type=pa.string()),
            pa.array([self.partition] * n, type=pa.int32()),
            pa.array([r.offset for r in take], type=pa.int64()),
            pa.array([r.timestamp for r in take], type=_TS_MS).cast(ARROW_SCHEMA.field("timestamp").type),
            pa.array(types, type=pa.int32()),
        ]
        if not self.include_headers:
            return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_NO_HEADERS)
        if any(r.headers for r in take):
            headers = [[{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in take]
            arrays.append(pa.array(headers, type=_HEADERS_TYPE))
        else:
            arrays.append(pa.nulls(n, type=_HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _records(
    archive: ArchiveReader, key: str, task: SegmentTask, start: int, end: int, chunk: int
) -> Iterator[DecodedBatch]:
    """Yield every batch starting in ``[start, end)``, reading ranged chunks of ``chunk`` bytes.

    Raises:
        CorruptRecordError: bad bytes (the message gives the byte position, not the object name).
    """
    size = task.size_bytes
    buffer = b""
    buffer_pos = start  # object position of buffer[0]
    pos = start
    while pos < end:
        local = pos - buffer_pos
        need = LOG_OVERHEAD
        if len(buffer) - local >= LOG_OVERHEAD:
            _, batch_length = _BATCH_LENGTH.unpack_from(buffer, local)
            need = LOG_OVERHEAD + max(batch_length, 0)
        if len(buffer) - local < need:
            fetch_from = buffer_pos + len(buffer)
            fetch_to = min(size, max(pos + need, min(fetch_from + chunk, end)))
            if fetch_to <= fetch_from:
                raise CorruptRecordError(f"the batch at byte {pos} runs past the object's end ({size} bytes)")
            data = archive.get_range(key, fetch_from, fetch_to)
            if len(data) != fetch_to - fetch_from:
                raise CorruptRecordError(
                    f"object is {fetch_from + len(data)} bytes, shorter than the {size} the manifest records"
                )
            buffer = buffer[local:] + data
            buffer_pos = pos
            continue
        try:
            batch = decode_batch(buffer, local)
        except CorruptRecordError as err:
            raise CorruptRecordError(f"the batch at byte {pos}: {err}") from err
        yield batch
        pos += batch.header.size


def scan_task(archive: ArchiveReader, options: ScanOptions, task: SegmentTask) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow record batches (schema :data:`ARROW_SCHEMA`, at most
    ``maxRowsPerBatch`` rows each). Control batches are skipped, as Kafka consumers skip them.

    Raises:
        CorruptSegmentError: bad bytes in the ``.log`` object (unless ``onCorruption=skip``).
        NotFoundError: the ``.log`` object is missing (the manifest says it was uploaded).
        UnavailableError, UnauthorizedError: the store failed.
    """
    keys = segment_keys(task.topic, task.partition, task.base_offset, uuid.UUID(task.segment_uuid))
    start, end = task.byte_start, min(task.byte_end, task.size_bytes)
    if not task.whole:
        offsets = _fetch_index(archive, keys["index"], _OFFSET_ENTRY, task.size_bytes)
        times = None
        if task.start_ts is not None or task.end_ts is not None:
            times = _fetch_index(archive, keys["timeindex"], _TIME_ENTRY, None)
        bounds = _Bounds(task, offsets, times)
        start, end = bounds.start, bounds.end
    columns = _Columns(task.topic, task.partition, options.include_headers, options.max_rows_per_batch)
    started = task.start_ts is None
    lo, hi, start_ts, end_ts = task.lo, task.hi, task.start_ts, task.end_ts
    try:
        for batch in _records(archive, keys["log"], task, start, end, options.read_chunk_bytes):
            header = batch.header
            if header.next_offset <= lo or header.is_control:
                continue
            if header.base_offset >= hi:
                break
            records, stop = batch.records, False
            ts_type = 1 if header.log_append_time else 0
            if started and end_ts is None and header.base_offset >= lo and header.last_offset < hi:
                columns.add(records, ts_type)  # the common case: the whole batch
            else:  # an edge batch: the selected records are one contiguous run
                first, last = len(records), len(records)
                for i, record in enumerate(records):
                    if record.offset < lo:
                        continue
                    if record.offset >= hi or (end_ts is not None and record.timestamp >= end_ts):
                        last, stop = i, True
                        break
                    if not started:
                        if start_ts is not None and record.timestamp < start_ts:
                            continue
                        started = True
                    first = min(first, i)
                if first < last:
                    columns.add(records[first:last], ts_type)
            while columns.full():
                yield columns.build()
            if stop:
                break
    except CorruptRecordError as err:
        where = options.store.display(keys["log"])
        if not options.skip_corrupt:
            raise CorruptSegmentError(f"corrupt segment object {where}: {err}") from err
        _log.warning("skipped the rest of corrupt segment object %s: %s", where, err)
    if len(columns):
        yield columns.build()
