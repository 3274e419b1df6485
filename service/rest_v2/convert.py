"""Conversion between REST Proxy v2 JSON and records: produce bodies in, records arrays out.

Produce body (``POST /topics/{t}`` and ``POST /topics/{t}/partitions/{p}``)::

    {"records": [{"key": ..., "value": ..., "partition": 0}, ...],
     "key_schema": ..., "key_schema_id": ..., "value_schema": ..., "value_schema_id": ...}

With the ``binary`` embedded format keys and values are base64 strings (standard alphabet, padded);
with ``json`` they are any JSON value, stored as its compact UTF-8 serialization. ``null`` or an
absent key/value stays null. A records fetch answers ``[{"topic", "key", "value", "partition",
"offset"}]`` in the format the ``Accept`` header chose; with ``json``, a stored key or value that is
not valid JSON fails the whole response with 422 (42201 for a key, 42202 for a value).

Every function here is pure and safe to call from a worker thread.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from tierlog.service.rest_v2.json_stream import JsonCursor, Skipped, decode_text
from tierlog.service.rest_v2.media import EmbeddedFormat
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.codec.records import Record
from tierlog.tiering.errors import (
    BadRequestError,
    InsufficientStorageError,
    InternalError,
    InvalidBodyError,
    InvalidRequestError,
    InvalidValueError,
    SchemaRegistryRequiredError,
    TierlogError,
    UnknownPartitionError,
)
from tierlog.tiering.partitioner import StickyPartitioner, partition_for_key

__all__ = [
    "KAFKA_ERROR",
    "KAFKA_RETRIABLE_ERROR",
    "CONVERSION_BYTES_PER_RECORD",
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
    "records_to_json",
    "consumer_records",
    "dump_json",
]

# Per-record codes of a produce answer (Confluent's "Kafka error" and "retriable Kafka error"): values in a
# 200 body, never an error raised, so they are not classes of the error table.
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003
# Memory a produce request holds per record from parsing to its answer, measured with tracemalloc
# (tests/unit/test_rest_v2_produce_parse.py checks the bound): the ProduceRow and its list slot, the
# partition list, the batch builder's Record, and the record's line of the answer.
CONVERSION_BYTES_PER_RECORD = 400


class ProduceRecord(NamedTuple):
    """One record of a produce request, already converted to bytes: ``(key, value, partition)``.

    The broker's route works on :data:`ProduceRow` plain tuples of the same fields instead (equal to
    ProduceRecords, read by unpacking): only an exact tuple of bytes, ints and None is untracked by the
    garbage collector after its first collection, so the full collections a 500k-record request triggers
    (each one holding the GIL, so stalling the event loop) do not walk every record again (they took up
    to 230 ms each with a slots dataclass or a NamedTuple)."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(data: bytes | str) -> Any:
    return json.loads(data, parse_constant=_reject_constant)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dump_json(value: Any) -> bytes:
    """Compact UTF-8 JSON for a response or a stored value. Pure.

    Raises ValueError for NaN or an infinity, TypeError for a value JSON cannot hold."""
    return _ENCODER.encode(value).encode()


def _binary_field(record: dict[str, Any], field: str, index: int) -> bytes | None:
    raw = record.get(field)
    return None if raw is None else _base64(raw, field, index)


def _base64(raw: Any, field: str, index: int) -> bytes:
    if not isinstance(raw, str):
        raise BadRequestError(f"records[{index}].{field} must be a base64 string or null")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequestError(f"records[{index}].{field} is not valid base64") from None


def _json_field(record: dict[str, Any], field: str) -> bytes | None:
    raw = record.get(field)
    return None if raw is None else dump_json(raw)


def _partition_field(record: dict[str, Any], index: int) -> int | None:
    raw = record.get("partition")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise BadRequestError(f"records[{index}].partition must be a non-negative integer or null")
    return raw


def _check_schemas(
    has_key_schema: bool, has_value_schema: bool, any_key: bool, any_value: bool, fmt: EmbeddedFormat
) -> None:
    if not has_key_schema and any_key:
        raise InvalidRequestError("Request includes keys but does not include key schema")
    if not has_value_schema and any_value:
        raise InvalidValueError("Request includes values but does not include value schema")
    raise SchemaRegistryRequiredError(
        "Payload error. Schema Registry must be configured when using schemas. "
        f"This broker has no schema registry, so the {fmt.value} embedded format cannot be produced; "
        "use application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
    )


_BODY_FIELDS = frozenset(("records", "key_schema", "key_schema_id", "value_schema", "value_schema_id"))
_RECORD_FIELDS = frozenset(("key", "value", "partition"))
MAX_REPORTED_PROBLEMS = 10


def _record_problem(index: int, record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"records[{index}] must be a JSON object, not {type(record).__name__}"
    unknown = record.keys() - _RECORD_FIELDS
    if unknown:
        names = ", ".join(sorted(repr(name) for name in unknown))
        return f"records[{index}] has unknown field(s) {names} (a record has key, value and partition)"
    return None


def _invalid_body(problems: list[str], total: int | None = None) -> InvalidBodyError:
    shown = problems[:MAX_REPORTED_PROBLEMS]
    more = (len(problems) if total is None else total) - len(shown)
    detail = "; ".join(shown) + (f"; and {more} more" if more else "")
    return InvalidBodyError(f"Invalid request format: {detail}")


class _RecordsReader:
    """The state of one walk over a ``records`` array: converted records while all is well; once a record
    is misshapen or fails to convert, only what the error needs (the first ten problems and their count,
    the first conversion error, whether keys or values were seen)."""

    def __init__(self, fmt: EmbeddedFormat, max_records: int | None) -> None:
        self.fmt = fmt
        self.max_records = max_records
        self.count = 0
        self.out: list[ProduceRow] = []
        self.problems: list[str] = []
        self.problem_count = 0
        self.failure: BadRequestError | None = None
        self.any_key = self.any_value = False
        # False once the request is sure to fail (a schema format, a misshapen record, a conversion error)
        self.converting = not fmt.needs_schema

    def read(self, cursor: JsonCursor) -> None:
        """Walk the array at ``cursor`` (any other value was checked by the caller). Raises InvalidBodyError
        (422) as soon as the count passes ``max_records``, and as :class:`JsonCursor`."""
        limit = sys.maxsize if self.max_records is None else self.max_records
        out, binary, fields = self.out, self.fmt is EmbeddedFormat.BINARY, _RECORD_FIELDS
        for index, record in enumerate(cursor.objects()):
            self.count = index + 1
            if index >= limit:
                drop(out)  # here, not where the error is handled (the event loop)
                raise InvalidBodyError(
                    f"Invalid request format: at least {self.count} records, "
                    f"more than rest.produce.max.records={self.max_records}"
                )
            if not self.converting or type(record) is not dict or not fields.issuperset(record):
                self._check(index, record)
                continue
            key, value, partition = record.get("key"), record.get("value"), record.get("partition")
            try:  # the conversion, inlined: this loop runs once per record
                if binary:
                    key = None if key is None else _base64(key, "key", index)
                    value = None if value is None else _base64(value, "value", index)
                else:
                    key = None if key is None else dump_json(key)
                    value = None if value is None else dump_json(value)
                if partition is not None:
                    partition = _partition_field(record, index)
            except BadRequestError as err:
                self.failure = err
                self.converting = False
                drop(out)
                continue
            out.append((key, value, partition))

    def _check(self, index: int, record: Any) -> None:
        """A record that is misshapen, or read once the request is sure to fail: note what the error
        needs."""
        if isinstance(record, Skipped):
            problem: str | None = f"records[{index}] must be a JSON object, not {record.type_name}"
        else:
            problem = _record_problem(index, record)
        if problem is not None:
            self.problem_count += 1
            if len(self.problems) < MAX_REPORTED_PROBLEMS:
                self.problems.append(problem)
            if self.failure is None:
                self.converting = False
                drop(self.out)
            return
        self.any_key = self.any_key or record.get("key") is not None
        self.any_value = self.any_value or record.get("value") is not None

    def check(self) -> list[ProduceRow]:
        """The converted records, or the error that decides the request: the first misshapen record or
        conversion error in request order (a misshapen record names every other, up to ten)."""
        if not self.count:
            raise _invalid_body(["'records' must be a non-empty array"])
        if self.failure is not None:
            raise self.failure
        if self.problems:
            raise _invalid_body(self.problems, self.problem_count)
        return self.out


def _walk_body(cursor: JsonCursor, fmt: EmbeddedFormat, max_records: int | None) -> _RecordsReader:
    """Walk the produce body object; returns the reader of its (last) ``records`` array."""
    if cursor.peek() != "{":
        cursor.skip()
        cursor.end()
        raise _invalid_body(["the request body must be a JSON object with a 'records' array"])
    reader: _RecordsReader | None = None
    records_ok = False
    schemas: dict[str, bool] = {}
    unknown: set[str] = set()
    for name in cursor.members():
        if name == "records":
            reader = _RecordsReader(fmt, max_records)  # a repeated key: the last one wins, as in json.loads
            records_ok = cursor.peek() == "["
            if records_ok:
                reader.read(cursor)
            else:
                cursor.skip()
        elif name in _BODY_FIELDS:
            schemas[name] = cursor.skip() != "NoneType"
        else:
            unknown.add(name)
            cursor.skip()
    cursor.end()
    if unknown:
        names = ", ".join(sorted(repr(name) for name in unknown))
        raise _invalid_body([f"unknown field(s) {names} in the request body"])
    if reader is None or not records_ok:
        raise _invalid_body(["'records' must be a non-empty array"])
    if fmt.needs_schema and reader.count:
        if reader.problems:
            raise _invalid_body(reader.problems, reader.problem_count)
        has_key = schemas.get("key_schema", False) or schemas.get("key_schema_id", False)
        has_value = schemas.get("value_schema", False) or schemas.get("value_schema_id", False)
        _check_schemas(has_key, has_value, reader.any_key, reader.any_value, fmt)
    return reader


ProduceRow = tuple[bytes | None, bytes | None, int | None]


def parse_produce_body(
    body: bytes, fmt: EmbeddedFormat, *, max_records: int | None = None
) -> list[ProduceRecord]:
    """:func:`parse_produce_rows` as :class:`ProduceRecord` objects (which the garbage collector tracks:
    the broker's route takes the rows). Raises as :func:`parse_produce_rows`."""
    return [ProduceRecord(*row) for row in parse_produce_rows(body, fmt, max_records=max_records)]


def parse_produce_rows(
    body: bytes, fmt: EmbeddedFormat, *, max_records: int | None = None
) -> list[ProduceRow]:
    """Parse and convert a produce body into ``(key, value, partition)`` tuples; nothing is appended, so
    a failure here rejects the request whole.

    The body is walked one record at a time (:class:`~tierlog.service.rest_v2.json_stream.JsonCursor`):
    each record is converted as soon as it is decoded and its dict dropped, so the memory is the body's
    text and the converted records, and a worker thread running this gives up the GIL between records.
    ``max_records`` bounds the record count: the walk stops with 422 at record ``max_records + 1``, never
    reading further. Errors are those of parsing the whole body first: bad JSON anywhere wins over every
    other error, then the body's shape, then the first misshapen or unconvertible record. Pure and
    idempotent.

    Raises:
        BadRequestError: (40001) malformed JSON, bad base64, bad ``partition``.
        InvalidBodyError: (422) an empty body, no ``records`` or an empty one, an unknown field in the body
            or in a record (the message names every offending record, up to ten), a record not an object,
            or more than ``max_records`` records.
        InvalidRequestError: (42201) a schema format without the key schema it needs.
        InvalidValueError: (42202) a schema format without the value schema it needs.
        SchemaRegistryRequiredError: (42206) a schema-based embedded format (avro, protobuf, jsonschema).
    """
    if not body.strip():
        raise _invalid_body(['the request body is empty; send {"records": [...]}'])
    try:
        reader = _walk_body(JsonCursor(decode_text(body), _reject_constant), fmt, max_records)
    except ValueError as err:
        raise BadRequestError(f"request body is not valid JSON: {err}") from None
    except RecursionError:
        raise BadRequestError("request body is not valid JSON: nested too deeply") from None
    return reader.check()


_DROP_CHUNK = 16_384


def drop(rows: list[Any]) -> None:
    """Empty ``rows`` a slice at a time, so that freeing a large list of records gives the GIL up between
    slices (``list.clear`` frees them all in one C call). Not thread-safe for the same list."""
    while rows:
        del rows[-_DROP_CHUNK:]


def conversion_estimate(body: bytes, max_records: int | None) -> int:
    """An upper bound of the bytes converting ``body`` holds at once: the body, its decoded text and
    :data:`CONVERSION_BYTES_PER_RECORD` per record, counting a record per ``{`` (every record object opens
    with one), at most ``max_records + 1``. Pure; one pass over the body in C."""
    records = body.count(b"{")
    if max_records is not None:
        records = min(records, max_records + 1)
    return 2 * len(body) + records * CONVERSION_BYTES_PER_RECORD


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
    for position, partition in enumerate(partitions):
        if position:
            out += b","
        line = failed.get(partition)
        if line is None:
            offset = next_offset[partition]
            next_offset[partition] = offset + 1
            line = b'{"partition":%d,"offset":%d,"error_code":null,"error":null}' % (partition, offset)
        out += line
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
        _load_json(text)
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
    return _load_json(_embed(data, fmt, what=what, offset=offset))


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
) -> tuple[int, bytes]:
    """The REST records array for whole batches ``data``, as ``(record_count, UTF-8 JSON text)``.

    Holds the records in ``[start_offset, high_watermark)``, each ``{"topic", "key", "value",
    "partition", "offset"}``; records of control batches are left out, as a consumer never sees them.
    With ``json`` a key or value is checked to be one valid JSON value and embedded as stored. The text
    is assembled directly rather than through ``json.dumps`` of dicts, which took twice as long. Pure.

    Raises:
        CorruptRecordError: a batch fails its CRC or is malformed.
        InvalidRequestError: (42201) with ``json``, a key that is not valid JSON; InvalidValueError (42202) a
            value.
    """
    head = '{"topic":' + json.dumps(topic) + ',"key":'
    tail = f',"partition":{partition},"offset":'
    parts: list[str] = []
    for record in _visible(data, start_offset, high_watermark):
        key = _embed(record.key, fmt, what="key", offset=record.offset)
        value = _embed(record.value, fmt, what="value", offset=record.offset)
        parts.append(f'{head}{key},"value":{value}{tail}{record.offset}}}')
    return len(parts), ("[" + ",".join(parts) + "]").encode()
