"""Conversion between REST Proxy v2 JSON and records: produce bodies in (parsed by
:mod:`tierlog.service.rest_v2.produce_body`, re-exported here), partitions and answers, records arrays out.

A records fetch answers ``[{"topic", "key", "value", "partition", "offset"}]`` in the format the
``Accept`` header chose; with ``json``, a stored key or value that is not valid JSON fails the whole
response with 422 (42201 for a key, 42202 for a value).

Every function here is pure and safe to call from a worker thread.
"""

from __future__ import annotations

import base64
import binascii
import json
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import groupby
from typing import Any

import msgspec

from tierlog.service.rest_v2.produce_body import (
    CONVERSION_BYTES_PER_RECORD,
    ProduceColumns,
    ProduceRecord,
    ProduceRow,
    conversion_estimate,
    drop,
    hand_over,
    parse_produce_body,
    parse_produce_rows,
)
from tierlog.service.web.json_stream import dump_json, load_json
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.codec.columns import RecordColumns, decode_columns
from tierlog.tiering.codec.header import CONTROL_BIT, HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, decode_header
from tierlog.tiering.codec.partitioner import StickyPartitioner, partition_for_key
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import (
    CorruptRecordError,
    InsufficientStorageError,
    InternalError,
    InvalidRequestError,
    InvalidValueError,
    TierlogError,
    UnknownPartitionError,
)

try:  # the binary records array's text in C; absent only where the compiled codec is absent too
    from tierlog.service.rest_v2 import _restjson
except ImportError:  # pragma: no cover - the pure codec's fallback already warned
    _restjson = None  # type: ignore[assignment]

__all__ = [
    "KAFKA_ERROR",
    "KAFKA_RETRIABLE_ERROR",
    "CONVERSION_BYTES_PER_RECORD",
    "ProduceColumns",
    "ProduceRecord",
    "ProduceRow",
    "conversion_estimate",
    "drop",
    "parse_produce_body",
    "parse_produce_rows",
    "assign_partitions",
    "produce_offsets",
    "produce_answer",
    "records_body",
    "renders_in_c",
    "records_to_json",
    "consumer_records",
    "dump_json",
]

# Per-record codes of a produce answer (Confluent's "Kafka error" and "retriable Kafka error"): values in a
# 200 body, never an error raised, so they are not classes of the error table.
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003


def assign_partitions(
    records: Sequence[ProduceRow],
    num_partitions: int,
    *,
    topic: str,
    sticky: StickyPartitioner,
    fixed: int | None = None,
) -> list[int]:
    """The partition of every record, in request order.

    ``fixed`` (a partition-scoped produce) wins over everything; otherwise an explicit ``partition``,
    then ``murmur2(key)``, then one sticky partition shared by all keyless records of this request.
    Safe to call concurrently; not idempotent (the sticky choice advances).

    Raises:
        UnknownPartitionError: (40402) a partition that the topic does not have.
    """
    if fixed is not None:
        if not 0 <= fixed < num_partitions:
            raise UnknownPartitionError(f"Partition not found. (partition {fixed} of topic {topic})")
        return [fixed] * len(records)
    keyless: int | None = None
    result: list[int] = []
    for index, (key, _, partition) in enumerate(records):
        if partition is not None:
            if partition >= num_partitions:
                raise UnknownPartitionError(
                    f"Partition not found. (records[{index}]: partition {partition}; "
                    f"topic {topic} has {num_partitions})"
                )
            result.append(partition)
        elif key is not None:
            result.append(partition_for_key(key, num_partitions))
        else:
            if keyless is None:
                keyless = sticky.next_partition(topic, num_partitions)
            result.append(keyless)
    return result


def _error_code(error: TierlogError) -> int:
    """The per-record code of a failed append: 50701 for a full disk (as the native API answers it),
    50003 for a retriable failure, 50002 otherwise (an InternalError, a broker bug, included)."""
    if isinstance(error, InsufficientStorageError):
        return error.code
    retriable = error.retriable and not isinstance(error, InternalError)
    return KAFKA_RETRIABLE_ERROR if retriable else KAFKA_ERROR


def produce_offsets(
    total: int, outcomes: Sequence[tuple[int, Sequence[int], int | TierlogError]]
) -> list[dict[str, Any]]:
    """The ``offsets`` array of a produce answer, in request order.

    ``outcomes`` holds, per partition, the request positions of its records and either the base offset
    its batch got or the error its append raised. A failed append marks each of its records with
    error_code 50003 when the error is retriable and 50002 otherwise, partition and offset null, as
    Confluent's proxy reports producer errors; a full disk is 50701 (InsufficientStorageError, retriable
    once space is freed), the code the native API answers it with. An :class:`InternalError` (a broker
    bug) is reported as 50002: the native client retries it with backoff, but it is no retriable Kafka
    error. Pure.
    """
    offsets: list[dict[str, Any]] = [{} for _ in range(total)]
    for partition, positions, outcome in outcomes:
        if isinstance(outcome, TierlogError):
            code = _error_code(outcome)
            for i in positions:
                offsets[i] = {"partition": None, "offset": None, "error_code": code, "error": outcome.message}
        else:
            for n, i in enumerate(positions):
                offsets[i] = {
                    "partition": partition,
                    "offset": outcome + n,
                    "error_code": None,
                    "error": None,
                }
    return offsets


_ANSWER_SLICE = 4096
_SHORT_RUN = 16


def produce_answer(partitions: Sequence[int], outcomes: Mapping[int, int | TierlogError]) -> bytearray:
    """The whole produce answer as compact UTF-8 JSON, the text ``dump_json`` makes of
    ``{"offsets": produce_offsets(...), "key_schema_id": null, "value_schema_id": null}``, written record
    by record without a dict per record (a 500k-record answer as dicts took 100 MB).

    ``partitions`` is each record's partition in request order; ``outcomes`` the base offset of each
    partition's batch or the error its append raised. Pure.
    """
    failed = {
        p: b'{"partition":null,"offset":null,"error_code":%d,"error":%b}'
        % (_error_code(o), dump_json(o.message))
        for p, o in outcomes.items()
        if isinstance(o, TierlogError)
    }
    next_offset = {p: o for p, o in outcomes.items() if not isinstance(o, TierlogError)}
    out = bytearray(b'{"offsets":[')
    # A run of records of one partition at a time (all of them for a partition-scoped produce): a long run
    # is formatted by one C call per slice of _ANSWER_SLICE records, not line by line (the compiled core's
    # append_offsets with the compiled codec, bytes formatting without); every line starts with a comma,
    # the first one's is taken out at the end. The GIL is handed over after a run once _ANSWER_SLICE
    # records are written.
    compiled = _restjson.append_offsets if _restjson is not None and _accel.native is not None else None
    written = 0
    runs: Iterable[tuple[int, int]]
    if partitions and partitions.count(partitions[0]) == len(partitions):
        runs = ((partitions[0], len(partitions)),)  # one partition (a partition-scoped produce): one run
    else:
        runs = ((partition, len(list(run))) for partition, run in groupby(partitions))
    for partition, size in runs:
        line = failed.get(partition)
        if line is not None:
            out += (b"," + line) * size
        else:
            offset = next_offset[partition]
            next_offset[partition] = offset + size
            if compiled is not None:  # one C call per slice of _ANSWER_SLICE records
                for low in range(offset, offset + size, _ANSWER_SLICE):
                    compiled(out, partition, low, min(low + _ANSWER_SLICE, offset + size))
            else:
                template = b',{"partition":%d,"offset":%%d,"error_code":null,"error":null}' % partition
                if size < _SHORT_RUN:  # keyed records spread over partitions: runs of a record or two
                    for one in range(offset, offset + size):
                        out += template % one
                else:
                    for low in range(offset, offset + size, _ANSWER_SLICE):
                        high = min(low + _ANSWER_SLICE, offset + size)
                        out += template * (high - low) % tuple(range(low, high))
        written += size
        if written >= _ANSWER_SLICE:
            written = 0
            hand_over()
    if partitions:
        del out[len(b'{"offsets":[')]
    out += b'],"key_schema_id":null,"value_schema_id":null}'
    return out


def _embed(data: bytes | None, fmt: EmbeddedFormat, *, what: str, offset: int) -> str:
    """JSON text for a key or value: a base64 string, the stored JSON text as it is, or null."""
    if data is None:
        return "null"
    if fmt is EmbeddedFormat.BINARY:
        return '"' + binascii.b2a_base64(data, newline=False).decode("ascii") + '"'
    try:
        text = data.decode("utf-8")
        load_json(text)
    except ValueError:
        kind = InvalidRequestError if what == "key" else InvalidValueError
        raise kind(
            f"The {what} of the record at offset {offset} is not valid JSON; "
            "fetch it with Accept: application/vnd.kafka.binary.v2+json"
        ) from None
    return text


def _parsed(data: bytes | None, fmt: EmbeddedFormat, *, what: str, offset: int) -> Any:
    if data is None:
        return None
    if fmt is EmbeddedFormat.BINARY:
        return base64.b64encode(data).decode("ascii")
    return load_json(_embed(data, fmt, what=what, offset=offset))


def _visible(data: bytes, start_offset: int, high_watermark: int) -> Iterator[Record]:
    for header, record in iter_records(data):
        if header.is_control or record.offset < start_offset:
            continue
        if record.offset >= high_watermark:
            break
        yield record


def records_to_json(
    data: bytes,
    *,
    topic: str,
    partition: int,
    start_offset: int,
    high_watermark: int,
    fmt: EmbeddedFormat,
) -> list[dict[str, Any]]:
    """The records :func:`records_body` renders, as Python objects (for callers that merge several
    partitions into one answer). Pure.

    Raises:
        CorruptRecordError, InvalidRequestError: as :func:`records_body`.
    """
    return [
        {
            "topic": topic,
            "key": _parsed(record.key, fmt, what="key", offset=record.offset),
            "value": _parsed(record.value, fmt, what="value", offset=record.offset),
            "partition": partition,
            "offset": record.offset,
        }
        for record in _visible(data, start_offset, high_watermark)
    ]


def consumer_records(
    data: bytes,
    *,
    topic: str,
    partition: int,
    start_offset: int,
    high_watermark: int,
    fmt: EmbeddedFormat,
    max_bytes: int,
    at_least_one: bool,
) -> tuple[list[dict[str, Any]], int]:
    """The records a consumer instance returns from ``data``, within ``max_bytes``, and the bytes they count.

    Each record is ``{"topic", "key", "value", "partition", "offset", "timestamp"}`` (Karapace's fields;
    Confluent's plus ``timestamp``). ``max_bytes`` is counted per record as the key's plus the value's
    length, as Confluent's proxy counts it: records are taken in order while the total stays within it,
    and with ``at_least_one`` the first record is taken whatever its size, so a consumer never stalls
    on a record larger than its ``max_bytes``. Pure.

    A record that cannot be rendered in ``fmt`` (a value that is not JSON for ``json``) ends the list
    before it; when it is the first record, the error is raised and names topic, partition and offset.

    Raises:
        CorruptRecordError: as :func:`records_body`.
        InvalidRequestError (42201, a key) / InvalidValueError (42202, a value): the first record cannot
            be rendered in ``fmt``.
    """
    out: list[dict[str, Any]] = []
    used = 0
    for record in _visible(data, start_offset, high_watermark):
        size = (0 if record.key is None else len(record.key)) + (
            0 if record.value is None else len(record.value)
        )
        if used + size > max_bytes and (out or not at_least_one):
            break
        try:
            key = _parsed(record.key, fmt, what="key", offset=record.offset)
            value = _parsed(record.value, fmt, what="value", offset=record.offset)
        except InvalidRequestError as err:
            if out:  # deliver what precedes it; the next read starts at this record
                break
            raise type(err)(
                f"Record {topic}-{partition} at offset {record.offset} cannot be rendered as "
                f"{fmt.value}: {err}. The position stays at offset {record.offset}: seek past it "
                "(POST .../positions) or read it with a binary consumer."
            ) from None
        used += size
        out.append(
            {
                "topic": topic,
                "key": key,
                "value": value,
                "partition": partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
            }
        )
    return out, used


def records_body(
    data: bytes,
    *,
    topic: str,
    partition: int,
    start_offset: int,
    high_watermark: int,
    fmt: EmbeddedFormat,
) -> tuple[int, bytes | bytearray]:
    """The REST records array for whole batches ``data``, as ``(record_count, UTF-8 JSON text)``.

    Holds the records in ``[start_offset, high_watermark)``, each ``{"topic", "key", "value",
    "partition", "offset"}``; records of control batches are left out, as a consumer never sees them.
    With ``json`` a key or value is checked to be one valid JSON value and embedded as stored. The batches
    are decoded into columns (:func:`~tierlog.tiering.codec.columns.decode_columns`, no object per record).
    With the compiled codec, binary records are written from the columns by the compiled core, a run of
    rows per call with the GIL released (:func:`_binary_body`); otherwise msgspec writes the text (base64
    included) from one struct per record holding views of the columns, 256 records per C call into one
    buffer, the GIL handed over between calls (:func:`_struct_body`). Both write the text the
    record-by-record renderer made, byte for byte.
    The batches decoded are those :func:`~tierlog.tiering.codec.batch.iter_records` would reach: up to the
    first data batch holding an offset at or past ``max(start_offset, high_watermark)``. Pure.

    Raises:
        CorruptRecordError: a batch fails its CRC or is malformed.
        InvalidRequestError: (42201) with ``json``, a key that is not valid JSON; InvalidValueError (42202) a
            value.
    """
    if renders_in_c(fmt):
        return _binary_body(data, json.dumps(topic).encode(), partition, start_offset, high_watermark)
    return _struct_body(data, topic, partition, start_offset, high_watermark, fmt)


def renders_in_c(fmt: EmbeddedFormat) -> bool:
    """Whether :func:`records_body` writes ``fmt`` with the compiled core (the binary format, with the
    compiled codec and the REST extension loaded): some ten times faster than msgspec's path."""
    return _restjson is not None and _accel.native is not None and fmt is EmbeddedFormat.BINARY


def _struct_body(
    data: bytes, topic: str, partition: int, start_offset: int, high_watermark: int, fmt: EmbeddedFormat
) -> tuple[int, bytes]:
    """:func:`records_body` through msgspec: a struct per record holding views of the columns (the json
    format, and the binary one with the pure codec)."""
    topic_json = msgspec.Raw(json.dumps(topic).encode())
    out = bytearray(b"[]")
    count = 0
    pending: list[_Fetched] = []
    for group, (columns, runs) in enumerate(_data_groups(data, start_offset, high_watermark)):
        if group:
            hand_over()  # between decodes (each one C call over about _DECODE_GROUP_BYTES)
        view = _ColumnsView(columns)
        past = False
        for first, last in runs:
            low = bisect_left(view.offsets, start_offset, first, last)
            high = bisect_left(view.offsets, high_watermark, low, last)
            for start in range(low, high, _RENDER_SLICE):
                pending += _rows(view, start, min(start + _RENDER_SLICE, high), fmt, topic_json, partition)
                if len(pending) >= _RENDER_SLICE:
                    count = _write(out, count, pending)
                    pending = []
            if high < last:
                past = True  # at the high watermark: nothing further is delivered
                break
        if past:
            break
    if pending:
        count = _write(out, count, pending)
    return count, bytes(out)


def _binary_body(
    data: bytes, topic_json: bytes, partition: int, start_offset: int, high_watermark: int
) -> tuple[int, bytearray]:
    """:func:`records_body` for the binary format with the compiled core: each run of rows written as JSON
    text straight into the answer in one C call (``_restjson.render_binary_rows``, base64 included, the GIL
    released past 64 KiB), the same text msgspec writes. The GIL is handed over between decodes."""
    assert _restjson is not None
    render = _restjson.render_binary_rows
    out = bytearray(b"[")
    count = 0
    for group, (columns, runs) in enumerate(_data_groups(data, start_offset, high_watermark)):
        if group:
            hand_over()
        for first, last in runs:
            low, high = render(
                columns.offsets, columns.key_offsets, columns.key_data, columns.key_validity,
                columns.value_offsets, columns.value_data, columns.value_validity,
                first, last, start_offset, high_watermark, topic_json, partition, out,
            )  # fmt: skip
            count += high - low
            if high < last:  # at the high watermark: nothing further is delivered
                out.append(0x5D)
                return count, out
    out.append(0x5D)
    return count, out


def _write(out: bytearray, count: int, rows: list[_Fetched]) -> int:
    """Append ``rows`` to the array ``out`` holding ``count`` records; answers the new count. Hands the
    GIL over first when ``out`` already holds records (between writes; see :func:`hand_over`)."""
    at = len(out) - 1 if count else 0  # the rows' '[' replaces the closing ']', then becomes a comma
    if count:
        hand_over()
    _ENCODER.encode_into(rows, out, at)
    if count:
        out[at] = 0x2C
    return count + len(rows)


class _Fetched(msgspec.Struct, gc=False):
    """One record of a records array, its fields in the answer's order. msgspec writes a key or value
    that is a buffer as its base64 string and a ``msgspec.Raw`` as the JSON text it holds."""

    topic: msgspec.Raw
    key: Any
    value: Any
    partition: int
    offset: int


_ENCODER = msgspec.json.Encoder()
# Records rendered per C call: about 0.7 ms for 1 KiB records on the development machine, as YIELD_MASK.
_RENDER_SLICE = 256


class _ColumnsView:
    """The columns of decoded batches as :func:`_rows` reads them: offsets as lists, data as views."""

    def __init__(self, columns: RecordColumns) -> None:
        self.columns = columns
        self.offsets: list[int] = memoryview(columns.offsets).cast("q").tolist()
        self.key_ends: list[int] = memoryview(columns.key_offsets).cast("i").tolist()
        self.value_ends: list[int] = memoryview(columns.value_offsets).cast("i").tolist()
        self.key_data, self.value_data = memoryview(columns.key_data), memoryview(columns.value_data)


def _rows(
    view: _ColumnsView, low: int, high: int, fmt: EmbeddedFormat, topic: msgspec.Raw, partition: int
) -> list[_Fetched]:
    """The records of rows ``[low, high)``, keys and values as views of the columns. Raises as
    :func:`records_body`."""
    columns, offsets = view.columns, view.offsets
    key_ends, value_ends, key_data, value_data = (
        view.key_ends,
        view.value_ends,
        view.key_data,
        view.value_data,
    )
    if fmt is EmbeddedFormat.BINARY and columns.key_nulls == columns.count and not columns.value_nulls:
        # keyless records with values, the common case: no branch per record
        ends = value_ends[low : high + 1]
        return [
            _Fetched(topic, None, value_data[start:end], partition, offset)
            for start, end, offset in zip(ends[:-1], ends[1:], offsets[low:high], strict=True)
        ]
    key_valid, value_valid = columns.key_validity, columns.value_validity
    if fmt is not EmbeddedFormat.BINARY:
        return _json_rows(view, low, high, topic, partition)
    out: list[_Fetched] = []
    for i in range(low, high):
        key = key_data[key_ends[i] : key_ends[i + 1]] if key_valid[i >> 3] >> (i & 7) & 1 else None
        value = value_data[value_ends[i] : value_ends[i + 1]] if value_valid[i >> 3] >> (i & 7) & 1 else None
        out.append(_Fetched(topic, key, value, partition, offsets[i]))
    return out


def _json_rows(view: _ColumnsView, low: int, high: int, topic: msgspec.Raw, partition: int) -> list[_Fetched]:
    """:func:`_rows` for the ``json`` format: each key and value checked, then embedded as stored."""
    columns, offsets, key_ends, value_ends = view.columns, view.offsets, view.key_ends, view.value_ends
    key_data, value_data = columns.key_data, columns.value_data
    key_valid, value_valid = columns.key_validity, columns.value_validity
    raw = msgspec.Raw
    out: list[_Fetched] = []
    for i in range(low, high):
        offset = offsets[i]
        key = value = None
        if key_valid[i >> 3] >> (i & 7) & 1:
            key = raw(_embed_json(key_data[key_ends[i] : key_ends[i + 1]], "key", offset))
        if value_valid[i >> 3] >> (i & 7) & 1:
            value = raw(_embed_json(value_data[value_ends[i] : value_ends[i + 1]], "value", offset))
        out.append(_Fetched(topic, key, value, partition, offset))
    return out


def _embed_json(data: bytes, what: str, offset: int) -> bytes:
    """A stored key or value as JSON text: its bytes as they are, once checked to be one JSON value.
    Raises as :func:`_embed`."""
    try:
        load_json(data.decode("utf-8"))
    except ValueError:
        _embed(data, EmbeddedFormat.JSON, what=what, offset=offset)  # raises the error of the record
    return data


# Batches decoded per decode_columns call when rendering a fetch: one C call, the GIL held, per group.
_DECODE_GROUP_BYTES = 1 << 20


def _data_groups(
    data: bytes, start_offset: int, high_watermark: int
) -> Iterator[tuple[RecordColumns, list[tuple[int, int]]]]:
    """The records of ``data``'s batches as columns, a group of whole batches of about
    :data:`_DECODE_GROUP_BYTES` at a time (one ``decode_columns`` call each, so a large fetch never holds
    the GIL in one long call), each with the ``[first, last)`` row ranges of its data (not control)
    batches, adjacent ones merged, rows counted from the group's first. Decodes the batches
    :func:`_visible` reaches, CRCs checked (the walk here reads header fields only, as tuples; every batch
    it passes is checked whole by ``decode_columns``). Raises CorruptRecordError."""
    stop = max(start_offset, high_watermark)
    runs: list[tuple[int, int]] = []
    rows = start = end = 0
    unpack, size = HEADER.unpack_from, len(data)
    while end < size:
        fields = unpack(data, end) if size - end >= HEADER_SIZE else None
        if fields is None or fields[3] != MAGIC or fields[1] < HEADER_SIZE - LOG_OVERHEAD:
            decode_header(data, end)  # raises the error of this header
            raise CorruptRecordError(f"malformed batch header at position {end}")
        base_offset, batch_length, attributes, last_delta, count = (
            fields[0], fields[1], fields[5], fields[6], fields[12]
        )  # fmt: skip
        if end + batch_length + LOG_OVERHEAD > size:
            raise CorruptRecordError(f"truncated batch at position {end}")
        data_batch = not attributes & CONTROL_BIT and count > 0
        if data_batch:
            if runs and runs[-1][1] == rows:  # no control batch in between: one run
                runs[-1] = (runs[-1][0], rows + count)
            else:
                runs.append((rows, rows + count))
        rows += count
        end += batch_length + LOG_OVERHEAD
        if data_batch and base_offset + last_delta >= stop:
            break
        if end - start >= _DECODE_GROUP_BYTES:
            yield decode_columns(memoryview(data)[start:end]), runs
            runs, rows, start = [], 0, end
    if end > start:
        yield decode_columns(memoryview(data)[start:end]), runs
