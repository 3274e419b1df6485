"""Record columns to Arrow: the buffers of :func:`tierlog.tiering.codec.columns.decode_columns` become the
arrays of Spark's Kafka source schema with no Python object per record.

``key``/``value`` are ``binary`` arrays over the decoder's offsets, data and validity buffers (no copy);
``offset`` is its int64 buffer; ``timestamp`` its int64 milliseconds, cast to Spark's microseconds by
Arrow; ``headers`` a ``list<struct<key: string, value: binary>>`` over the header entry columns, null
where a record has no header (as Spark's Kafka source gives it); ``timestampType`` is filled per batch
and ``topic``/``partition`` are slices of one constant column per task. Row selection (offset and
timestamp bounds) is done with ``pyarrow.compute`` over whole runs of batches.

Every function here is pure and thread-safe.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.tiering.codec.columns import RecordColumns

__all__ = [
    "ARROW_SCHEMA",
    "ARROW_SCHEMA_NO_HEADERS",
    "HEADERS_TYPE",
    "RunArrays",
    "Slicer",
    "Window",
    "run_arrays",
]

_ENTRY_FIELDS = [pa.field("key", pa.string()), pa.field("value", pa.binary())]
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct(_ENTRY_FIELDS)))
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", HEADERS_TYPE),
    ]
)
ARROW_SCHEMA_NO_HEADERS = ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))
_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = ARROW_SCHEMA.field("timestamp").type


def _binary(
    kind: pa.DataType, count: int, validity: bytes, nulls: int, offsets: bytes, data: bytes
) -> pa.Array:
    bitmap = pa.py_buffer(validity) if nulls else None
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, count, buffers, null_count=nulls)


def _headers(c: RecordColumns) -> pa.Array:
    if c.header_count == 0:
        return pa.nulls(c.count, type=HEADERS_TYPE)
    entries = pa.StructArray.from_arrays(
        [
            _binary(pa.string(), c.header_count, b"", 0, c.header_key_offsets, c.header_key_data),
            _binary(pa.binary(), c.header_count, c.header_value_validity, c.header_value_nulls,
                    c.header_value_offsets, c.header_value_data),
        ],
        fields=_ENTRY_FIELDS,
    )  # fmt: skip
    starts = pa.Array.from_buffers(pa.int32(), c.count + 1, [None, pa.py_buffer(c.header_offsets)])
    present = pc.not_equal(pc.subtract(starts[1:], starts[:-1]), 0)  # a record without headers is null
    nulls = c.count - pc.sum(present).as_py()
    validity = present.buffers()[1] if nulls else None
    buffers = [validity, pa.py_buffer(c.header_offsets)]
    return pa.Array.from_buffers(HEADERS_TYPE, c.count, buffers, null_count=nulls, children=[entries])


def _timestamp_types(types: Sequence[tuple[int, int]], count: int) -> pa.Array:
    """``[(records, type), ...]`` per batch -> one int32 per record."""
    kinds = {kind for _, kind in types}
    if len(kinds) == 1:
        return pa.repeat(pa.scalar(kinds.pop(), pa.int32()), count)
    out: array[int] = array("i")
    for records, kind in types:
        out.extend(array("i", [kind]) * records)
    return pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(out)])


@dataclass(frozen=True, slots=True)
class RunArrays:
    """The per-record columns of a run of batches (``topic`` and ``partition`` are added per slice)."""

    key: pa.Array
    value: pa.Array
    offset: pa.Array
    timestamp: pa.Array
    timestamp_ms: pa.Array
    timestamp_type: pa.Array
    headers: pa.Array | None

    def __len__(self) -> int:
        return len(self.offset)


def run_arrays(c: RecordColumns, types: Sequence[tuple[int, int]], include_headers: bool) -> RunArrays:
    """The arrays over ``c``'s buffers. ``types`` gives each batch's record count and timestamp type.

    Raises:
        pyarrow.ArrowInvalid: a timestamp in milliseconds overflows microseconds.
    """
    n = c.count
    millis = pa.Array.from_buffers(_TS_MS, n, [None, pa.py_buffer(c.timestamps)])
    return RunArrays(
        key=_binary(pa.binary(), n, c.key_validity, c.key_nulls, c.key_offsets, c.key_data),
        value=_binary(pa.binary(), n, c.value_validity, c.value_nulls, c.value_offsets, c.value_data),
        offset=pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c.offsets)]),
        timestamp=millis.cast(_TS_US),
        timestamp_ms=millis.view(pa.int64()),
        timestamp_type=_timestamp_types(types, n),
        headers=_headers(c) if include_headers else None,
    )


@dataclass(slots=True)
class Window:
    """Which records of a task's runs are selected: offsets in ``[lo, hi)``, from the first record whose
    timestamp is >= ``start_ts`` up to (not including) the first whose timestamp is >= ``end_ts``.
    Records arrive in offset order, so each run's selection is one contiguous slice. Not thread-safe
    (``started`` and ``stopped`` carry over from one run to the next).
    """

    lo: int
    hi: int
    start_ts: int | None
    end_ts: int | None
    started: bool = False
    stopped: bool = False

    def __post_init__(self) -> None:
        self.started = self.start_ts is None

    def select(self, run: RunArrays, first_offset: int, last_offset: int) -> tuple[int, int]:
        """The slice ``[a, b)`` of ``run`` (whose batches span ``first_offset .. last_offset``) to keep;
        sets ``stopped`` once a record at or past the end is seen.
        """
        n = len(run)
        if self.started and self.end_ts is None and first_offset >= self.lo and last_offset < self.hi:
            return 0, n
        a = _count_below(run.offset, self.lo) if first_offset < self.lo else 0
        b = _count_below(run.offset, self.hi) if last_offset >= self.hi else n
        self.stopped = self.stopped or b < n
        if a >= b:
            return b, b
        if self.end_ts is not None:
            past = _first_at_or_above(run.timestamp_ms[a:b], self.end_ts)
            if past >= 0:
                b, self.stopped = a + past, True
        if not self.started and a < b:
            assert self.start_ts is not None
            first = _first_at_or_above(run.timestamp_ms[a:b], self.start_ts)
            if first < 0:
                return b, b
            a, self.started = a + first, True
        return a, b


def _count_below(offsets: pa.Array, bound: int) -> int:
    """How many of the ascending ``offsets`` are below ``bound`` (the index of the first at or above)."""
    return int(pc.sum(pc.less(offsets, bound)).as_py() or 0)


def _first_at_or_above(timestamps: pa.Array, bound: int) -> int:
    """The index of the first of ``timestamps`` >= ``bound``, or -1."""
    return int(pc.index(pc.greater_equal(timestamps, bound), True).as_py())


class Slicer:
    """Cuts selected runs into record batches of at most ``limit`` rows in :data:`ARROW_SCHEMA` (or
    :data:`ARROW_SCHEMA_NO_HEADERS`). ``topic`` and ``partition`` are zero-copy slices of one column.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool, limit: int) -> None:
        self.limit, self.include_headers = limit, include_headers
        self.schema = ARROW_SCHEMA if include_headers else ARROW_SCHEMA_NO_HEADERS
        self._topic = pa.repeat(pa.scalar(topic, pa.string()), limit)
        self._partition = pa.repeat(pa.scalar(partition, pa.int32()), limit)

    def batches(self, run: RunArrays, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """Record batches of rows ``[start, end)`` of ``run``."""
        for a in range(start, end, self.limit):
            n = min(self.limit, end - a)
            arrays = [
                run.key.slice(a, n),
                run.value.slice(a, n),
                self._topic.slice(0, n),
                self._partition.slice(0, n),
                run.offset.slice(a, n),
                run.timestamp.slice(a, n),
                run.timestamp_type.slice(a, n),
            ]
            if run.headers is not None:
                arrays.append(run.headers.slice(a, n))
            yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)
