"""REST Proxy v2 produce bodies in: parsing and converting ``{"records": [...]}`` to records.

Produce body (``POST /topics/{t}`` and ``POST /topics/{t}/partitions/{p}``)::

    {"records": [{"key": ..., "value": ..., "partition": 0}, ...],
     "key_schema": ..., "key_schema_id": ..., "value_schema": ..., "value_schema_id": ...}

With the ``binary`` embedded format keys and values are base64 strings (standard alphabet, padded);
with ``json`` they are any JSON value, stored as its compact UTF-8 serialization. ``null`` or an
absent key/value stays null. The body is walked record by record (:mod:`.json_stream`) with the
semantics of parsing it whole; see :func:`parse_produce_rows`. A ``binary`` body of at most
:data:`FAST_PATH_MAX_BYTES` is first tried whole (:func:`_fast_binary_rows`): by the compiled
``_restjson.parse_binary_records`` when it is exactly ``{"records": [...]}``, else with msgspec. Both only
ever answer the records of a valid body: anything else falls back to the walk, so errors are the walk's.

Every function here is pure and safe to call from a worker thread.
"""

from __future__ import annotations

import asyncio
import binascii
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Generic, NamedTuple, TypeVar, overload

import msgspec

from tierlog.service.web.json_stream import JsonCursor, Skipped, decode_text, dump_json, reject_constant
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.wire.errors import (
    BadRequestError,
    InvalidBodyError,
    InvalidRequestError,
    InvalidValueError,
    SchemaRegistryRequiredError,
)

try:  # the plain shape of a binary body parsed in C; absent only where the compiled codec is absent too
    from tierlog.service.rest_v2 import _restjson
except ImportError:  # pragma: no cover - the pure codec's fallback already warned
    _restjson = None  # type: ignore[assignment]

__all__ = [
    "CONVERSION_BYTES_PER_RECORD",
    "FAST_PATH_MAX_BYTES",
    "FAST_PATH_MAX_RECORDS",
    "MAX_REPORTED_PROBLEMS",
    "YIELD_MASK",
    "ProduceRecord",
    "ProduceColumns",
    "ProduceRow",
    "conversion_estimate",
    "count_bytes",
    "drop",
    "hand_over",
    "parse_produce_body",
    "parse_produce_rows",
]

# Memory a produce request holds per record from parsing to its answer, measured with tracemalloc
# (tests/unit/service/rest_v2/test_produce_parse.py checks the bound): the record's three column slots, its
# key and
# value, the partition list, the batch builder's Record, and the record's line of the answer.
CONVERSION_BYTES_PER_RECORD = 400

# The walk over ``records`` hands the GIL over (``time.sleep(0)``) every this many records, about every
# 0.7 ms on the development machine (3 us per record). A thread running Python code gives the GIL up only
# when another thread has waited for it a whole switch interval (5 ms), and the event loop thread gives it up
# on every system call it makes (epoll, recv, send): while a conversion ran, each of those calls cost the loop
# up to 5 ms to get the GIL back, and one turn of the loop over 16 connections sending bodies made about 20
# of them. Measured with py-spy (docs/benchmarks-hostile.md): the loop spent half its time waiting for the
# GIL, 12-17% with the hand-over, and /health's median under the hostile load went from 6-15 ms to 2 ms.
# A power of two minus one: the check is one ``&`` per record.
YIELD_MASK = 255


def hand_over() -> None:
    """Give the GIL to the event loop if it waits for it (``time.sleep(0)``, see :data:`YIELD_MASK`), from a
    worker thread only. On the event loop's own thread (small bodies are converted inline,
    :func:`~tierlog.service.web.requests.offload`) it would do the opposite: hand the GIL to a busy worker
    and wait up to a switch interval to get it back."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not the loop's thread
        time.sleep(0)


# The largest ``binary`` body decoded whole by msgspec: one C call holding the GIL, about 2 ms per MiB on
# the development machine with base64 decoded in it (the pure codec), under 1 ms with the base64 left as
# text for the compiled core; so at most some 4 ms, under a switch interval (5 ms). Larger bodies are
# walked record by record.
FAST_PATH_MAX_BYTES = 2 * 2**20
# ... and of at most this many records: decoding costs per record too, and 2 MiB of tiny records would be
# some 100k structs built in one call. 16k records of 1 KiB are 22 MiB, past the byte bound anyway.
FAST_PATH_MAX_RECORDS = 16_384


class ProduceRecord(NamedTuple):
    """One record of a produce request, already converted to bytes: ``(key, value, partition)``.

    The broker's route works on :class:`ProduceColumns` instead, which holds no object per record."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None


def _binary_field(record: dict[str, Any], field: str, index: int) -> bytes | None:
    raw = record.get(field)
    return None if raw is None else _base64(raw, field, index)


def _base64(raw: Any, field: str, index: int) -> bytes:
    if not isinstance(raw, str):
        raise BadRequestError(f"records[{index}].{field} must be a base64 string or null")
    try:  # accepts and decodes exactly as base64.b64decode(raw, validate=True), in C (a test checks it)
        return binascii.a2b_base64(raw, strict_mode=True)
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
        self.out = ProduceColumns()
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
        append = out.append
        mask = YIELD_MASK
        for index, record in enumerate(cursor.objects()):
            self.count = index + 1
            if index and not index & mask:
                hand_over()
            if index >= limit:
                out.clear()  # here, not where the error is handled (the event loop)
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
                out.clear()
                continue
            append(key, value, partition)

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
                self.out.clear()
            return
        self.any_key = self.any_key or record.get("key") is not None
        self.any_value = self.any_value or record.get("value") is not None

    def check(self) -> ProduceColumns:
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


class ProduceColumns(Sequence[ProduceRow]):
    """The records of a produce request as three columns: keys, values and partitions.

    A sequence of ``(key, value, partition)`` rows (equal to :class:`ProduceRecord` objects), but stored
    without an object per record: reading a record then allocates nothing the garbage collector tracks,
    so converting 500k records triggers almost no collection. With a tracked object per record
    (a dataclass, a tuple) the collections a large request triggered walked every record, each one
    holding the GIL: the event loop stalled up to 120 ms at a time, and the parse took 2.5 times as long.
    Not thread-safe."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.partitions: list[int | None] = []

    def append(self, key: bytes | None, value: bytes | None, partition: int | None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.partitions.append(partition)

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> ProduceRow: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ProduceRow]: ...
    def __getitem__(self, index: int | slice) -> ProduceRow | Sequence[ProduceRow]:
        if isinstance(index, slice):
            return list(zip(self.keys[index], self.values[index], self.partitions[index], strict=True))
        return self.keys[index], self.values[index], self.partitions[index]

    def __iter__(self) -> Iterator[ProduceRow]:
        return zip(self.keys, self.values, self.partitions, strict=True)

    def clear(self) -> None:
        """Empty the columns a slice at a time (see :func:`drop`)."""
        for column in (self.keys, self.values, self.partitions):
            drop(column)


def parse_produce_body(
    body: bytes, fmt: EmbeddedFormat, *, max_records: int | None = None
) -> list[ProduceRecord]:
    """:func:`parse_produce_rows` as :class:`ProduceRecord` objects (which the garbage collector tracks:
    the broker's route takes the rows). Raises as :func:`parse_produce_rows`."""
    return [ProduceRecord(*row) for row in parse_produce_rows(body, fmt, max_records=max_records)]


def parse_produce_rows(body: bytes, fmt: EmbeddedFormat, *, max_records: int | None = None) -> ProduceColumns:
    """Parse and convert a produce body into :class:`ProduceColumns`; nothing is appended, so a failure
    here rejects the request whole.

    The body is walked one record at a time (:class:`~tierlog.service.web.json_stream.JsonCursor`):
    each record is converted as soon as it is decoded and its dict dropped, so the memory is the body's
    text and the converted records, and a worker thread running this hands the GIL over every
    :data:`YIELD_MASK` + 1 records (``time.sleep(0)``): the event loop never waits a switch interval for it.
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
    if fmt is EmbeddedFormat.BINARY:
        fast = _fast_binary_rows(body, max_records)
        if fast is not None:
            return fast
    if not body.strip():
        raise _invalid_body(['the request body is empty; send {"records": [...]}'])
    try:
        reader = _walk_body(JsonCursor(decode_text(body), reject_constant), fmt, max_records)
    except ValueError as err:
        raise BadRequestError(f"request body is not valid JSON: {err}") from None
    except RecursionError:
        raise BadRequestError("request body is not valid JSON: nested too deeply") from None
    return reader.check()


_Data = TypeVar("_Data", bytes, str)


class _Record(msgspec.Struct, Generic[_Data], forbid_unknown_fields=True, gc=False):
    """A record of a ``binary`` body as the fast path reads it, no bool for an int. ``_Record[bytes]``:
    base64 decoded by msgspec (what it accepts it decodes as ``base64.b64decode(validate=True)``; it refuses
    a little more, a test checks both), for the pure codec. ``_Record[str]``: the base64 text, for the
    compiled core to decode (``decode_base64_list``) with the GIL released. Holds no container, so the
    garbage collector does not track it."""

    key: _Data | None = None
    value: _Data | None = None
    partition: Annotated[int, msgspec.Meta(ge=0)] | None = None


_Scalar = str | int | float | bool | None


class _Body(msgspec.Struct, Generic[_Data], forbid_unknown_fields=True, gc=False):
    records: list[_Record[_Data]]
    key_schema: _Scalar = None
    key_schema_id: _Scalar = None
    value_schema: _Scalar = None
    value_schema_id: _Scalar = None


_DECODER = msgspec.json.Decoder(_Body[bytes])
_TEXT_DECODER = msgspec.json.Decoder(_Body[str])


def _fast_binary_rows(body: bytes, max_records: int | None) -> ProduceColumns | None:
    """The records of a valid ``binary`` body, decoded and checked whole by msgspec, or None: then the
    body may be invalid, and only the walk knows the exact error. Pure.

    Taken only where msgspec and the walk agree on everything: a UTF-8 body of at most
    :data:`FAST_PATH_MAX_BYTES` that starts with ``{`` (no BOM, not UTF-16/32), holds no backslash (no
    escapes, so no key spelled two ways, no lone surrogate) and names ``"records"`` once (no repeated array
    that could pass ``max_records`` before the last one), and has at most ``max_records`` records going by
    its ``{`` (every record a struct comes from opens with one: so no more structs are built than
    :func:`conversion_estimate` counts, and too many records cost no decoding), and at most
    :data:`FAST_PATH_MAX_RECORDS` (one C call holds the GIL a few ms at most). msgspec refuses NaN, the
    infinities and numbers beyond a double (the stdlib reads ``1e400`` as infinity: then the walk decides),
    every other body field that is not a scalar (the walk recurses into containers and may run out of
    stack where msgspec does not), a record with an unknown field, a key or value that is not a base64
    string or null, a partition that is not a non-negative integer, and (with the pure codec) a repeated
    field whose first value is bad (the walk keeps the last one, as msgspec does with text fields). The
    records come out as structs the garbage collector does not track; their columns are taken a slice of
    :data:`YIELD_MASK` + 1 at a time with the GIL handed over between slices. With the compiled codec
    msgspec reads keys and values as text, and the compiled core decodes them a slice at a time
    (:func:`_decode_base64`) with the GIL released, declining any text that is not canonical base64 (then
    the walk decides). Before msgspec, with the compiled extensions, a body that is exactly
    ``{"records": [...]}`` of plain records (at most ``key``, ``value`` and ``partition`` each, canonical
    base64, a partition of at most 18 digits) is parsed and decoded in C with the GIL released
    (``service/rest_v2/_restjson.c``); it answers None for any other body, and msgspec goes on."""
    if len(body) > FAST_PATH_MAX_BYTES or body[:1] != b"{" or b"\\" in body:
        return None
    if count_bytes(body, b'"records"', 2) != 1:
        return None
    braces = count_bytes(body, b"{", FAST_PATH_MAX_RECORDS + 2) - 1  # at least the record count
    if braces > FAST_PATH_MAX_RECORDS or (max_records is not None and braces > max_records):
        return None
    native = _accel.native
    if native is not None and _restjson is not None:
        # {"records": [...]} alone, in C with the GIL released (no struct, no text per record); any other
        # shape answers None and msgspec below decides
        limit = FAST_PATH_MAX_RECORDS if max_records is None else min(max_records, FAST_PATH_MAX_RECORDS)
        parsed = _restjson.parse_binary_records(body, limit)
        if parsed is not None:
            out = ProduceColumns()
            out.keys, out.values, out.partitions = parsed
            return out
    try:
        records: list[_Record[bytes]] | list[_Record[str]] = (
            (_DECODER if native is None else _TEXT_DECODER).decode(body).records
        )
    except (msgspec.MsgspecError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not records or (max_records is not None and len(records) > max_records):
        return None
    out = ProduceColumns()
    keys: list[Any] = []  # base64 text until decoded below, with the compiled core
    values: list[Any] = []
    partitions = out.partitions
    step = YIELD_MASK + 1
    for low in range(0, len(records), step):
        if low:
            hand_over()
        chunk = records[low : low + step]
        keys += [record.key for record in chunk]
        values += [record.value for record in chunk]
        partitions += [record.partition for record in chunk]
    del records, chunk  # the structs: from here each text is held by its column alone
    if native is not None and not (_decode_base64(native, keys) and _decode_base64(native, values)):
        return None  # some key or value is not canonical base64: the walk knows whether it is an error
    out.keys, out.values = keys, values
    return out


def _decode_base64(native: _accel.Native, column: list[Any]) -> bool:
    """Decode a column of base64 texts in place, a slice of :data:`YIELD_MASK` + 1 at a time: each slice's
    texts are freed as its bytes replace them, so the column never holds all of both (the conversion
    estimate counts the body twice, not three times). False, the column partly decoded, at the first text
    that is not canonical base64."""
    step = YIELD_MASK + 1
    for low in range(0, len(column), step):
        chunk = column[low : low + step]
        if not native.decode_base64_list(chunk):  # the GIL is released past 64 KiB of text
            return False
        column[low : low + step] = chunk
    return True


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
    records = count_bytes(body, b"{", None if max_records is None else max_records + 1)
    return 2 * len(body) + records * CONVERSION_BYTES_PER_RECORD


def count_bytes(body: bytes, needle: bytes, limit: int | None) -> int:
    """``body.count(needle)``, at most ``limit`` (None: no bound). Pure.

    The compiled core's scan when it is loaded: a byte is counted with vector compares and a longer needle
    found with ``memmem``, 3-7x faster than ``bytes.count`` on a produce body, and it stops at ``limit``.

    Raises:
        ValueError: an empty ``needle`` or a negative ``limit``.
    """
    if not needle or (limit is not None and limit < 0):
        raise ValueError(f"count_bytes needs a needle and a limit of at least 0 (got {needle!r}, {limit})")
    native = _accel.native
    if native is not None:
        return native.count_bytes(body, needle, -1 if limit is None else limit)
    found = body.count(needle)
    return found if limit is None else min(found, limit)
