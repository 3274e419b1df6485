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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.service.rest_v2.media import EmbeddedFormat
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.codec.records import Record
from tierlog.tiering.errors import (
    BadRequestError,
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
    "ProduceRecord",
    "parse_produce_body",
    "assign_partitions",
    "produce_offsets",
    "records_body",
    "records_to_json",
    "consumer_records",
    "dump_json",
]

# Per-record codes of a produce answer (Confluent's "Kafka error" and "retriable Kafka error"): values in a
# 200 body, never an error raised, so they are not classes of the error table.
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One record of a produce request, already converted to bytes."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(data: bytes | str) -> Any:
    return json.loads(data, parse_constant=_reject_constant)


def dump_json(value: Any) -> bytes:
    """Compact UTF-8 JSON for a response or a stored value. Pure."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _binary_field(record: dict[str, Any], field: str, index: int) -> bytes | None:
    raw = record.get(field)
    if raw is None:
        return None
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


def _check_schemas(body: dict[str, Any], records: list[Any], fmt: EmbeddedFormat) -> None:
    has_key_schema = body.get("key_schema") is not None or body.get("key_schema_id") is not None
    has_value_schema = body.get("value_schema") is not None or body.get("value_schema_id") is not None
    if not has_key_schema and any(isinstance(r, dict) and r.get("key") is not None for r in records):
        raise InvalidRequestError("Request includes keys but does not include key schema")
    if not has_value_schema and any(isinstance(r, dict) and r.get("value") is not None for r in records):
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


def _check_shapes(records: list[Any]) -> None:
    problems = [p for p in (_record_problem(i, r) for i, r in enumerate(records)) if p is not None]
    if problems:
        raise _invalid_body(problems)


def _invalid_body(problems: list[str]) -> InvalidBodyError:
    shown = problems[:MAX_REPORTED_PROBLEMS]
    more = len(problems) - len(shown)
    detail = "; ".join(shown) + (f"; and {more} more" if more else "")
    return InvalidBodyError(f"Invalid request format: {detail}")


def _records_of(body: bytes) -> tuple[dict[str, Any], list[Any]]:
    if not body.strip():
        raise _invalid_body(['the request body is empty; send {"records": [...]}'])
    try:
        parsed = _load_json(body)
    except ValueError as err:
        raise BadRequestError(f"request body is not valid JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise _invalid_body(["the request body must be a JSON object with a 'records' array"])
    unknown = parsed.keys() - _BODY_FIELDS
    if unknown:
        names = ", ".join(sorted(repr(name) for name in unknown))
        raise _invalid_body([f"unknown field(s) {names} in the request body"])
    records = parsed.get("records")
    if not isinstance(records, list) or not records:
        raise _invalid_body(["'records' must be a non-empty array"])
    return parsed, records


def parse_produce_body(
    body: bytes, fmt: EmbeddedFormat, *, max_records: int | None = None
) -> list[ProduceRecord]:
    """Parse and convert a produce body; nothing is appended, so a failure here rejects the request whole.

    ``max_records`` bounds the record count, checked right after the JSON is parsed and before any
    record is converted. Pure and idempotent.

    Raises:
        BadRequestError: (40001) malformed JSON, bad base64, bad ``partition``.
        InvalidBodyError: (422) an empty body, no ``records`` or an empty one, an unknown field in the body
            or in a record (the message names every offending record, up to ten), a record not an object,
            or more than ``max_records`` records.
        InvalidRequestError: (42201) a schema format without the key schema it needs.
        InvalidValueError: (42202) a schema format without the value schema it needs.
        SchemaRegistryRequiredError: (42206) a schema-based embedded format (avro, protobuf, jsonschema).
    """
    parsed, records = _records_of(body)
    if max_records is not None and len(records) > max_records:
        raise InvalidBodyError(
            f"Invalid request format: {len(records)} records, "
            f"more than rest.produce.max.records={max_records}"
        )
    if fmt.needs_schema:
        _check_shapes(records)
        _check_schemas(parsed, records, fmt)
    out: list[ProduceRecord] = []
    for index, record in enumerate(records):
        if type(record) is not dict or not _RECORD_FIELDS.issuperset(record):
            _check_shapes(records)  # names every offending record, not only this one
        if fmt is EmbeddedFormat.BINARY:
            key = _binary_field(record, "key", index)
            value = _binary_field(record, "value", index)
        else:
            key = _json_field(record, "key")
            value = _json_field(record, "value")
        out.append(ProduceRecord(key, value, _partition_field(record, index)))
    return out


def assign_partitions(
    records: Sequence[ProduceRecord],
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
    for index, record in enumerate(records):
        if record.partition is not None:
            if record.partition >= num_partitions:
                raise UnknownPartitionError(
                    f"Partition not found. (records[{index}]: partition {record.partition}; "
                    f"topic {topic} has {num_partitions})"
                )
            result.append(record.partition)
        elif record.key is not None:
            result.append(partition_for_key(record.key, num_partitions))
        else:
            if keyless is None:
                keyless = sticky.next_partition(topic, num_partitions)
            result.append(keyless)
    return result


def produce_offsets(
    total: int, outcomes: Sequence[tuple[int, Sequence[int], int | TierlogError]]
) -> list[dict[str, Any]]:
    """The ``offsets`` array of a produce answer, in request order.

    ``outcomes`` holds, per partition, the request positions of its records and either the base offset
    its batch got or the error its append raised. A failed append marks each of its records with
    error_code 50003 when the error is retriable and 50002 otherwise, partition and offset null, as
    Confluent's proxy reports producer errors. An :class:`InternalError` (a broker bug) is reported as 50002:
    the native client retries it with backoff, but it is no retriable Kafka error. Pure.
    """
    offsets: list[dict[str, Any]] = [{} for _ in range(total)]
    for partition, positions, outcome in outcomes:
        if isinstance(outcome, TierlogError):
            retriable = outcome.retriable and not isinstance(outcome, InternalError)
            code = KAFKA_RETRIABLE_ERROR if retriable else KAFKA_ERROR
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
