"""Kafka's message bodies through ``kio`` (schemas generated from Kafka's own message definitions), sans I/O.

:func:`decode_request` turns a frame's body into the request entity of its API key and version;
:func:`encode_response` turns a response entity into bytes. Handlers do not build version-specific
entities field by field: they describe an answer once, as plain mappings, and :func:`shape` builds the
entity of the version asked for from it, keeping the fields that version has and giving the others their
schema default (or the zero of their type), as Kafka's generated ``toStruct`` drops fields a version
lacks. So one handler serves every version of its API.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

__all__ = [
    "DecodeError",
    "ErrorCode",
    "check_lengths",
    "decode_request",
    "encode_response",
    "is_flexible",
    "response_class",
    "shape",
]


class DecodeError(ValueError):
    """A request body that does not decode as its API key and version say."""


@functools.cache
def _request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    """The kio response entity class of ``api_key`` at ``version``. Raises KeyError-like kio errors for an
    unknown pair (callers ask only for versions they serve)."""
    return load_response_schema(api_key, version)


@functools.cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of ``api_key`` is flexible (compact encodings, tagged fields, header v2)."""
    return bool(_request_class(api_key, version).__flexible__)


@functools.cache
def _reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(_request_class(api_key, version))


def decode_request(api_key: int, version: int, frame: bytes, offset: int) -> Any:
    """The request entity in ``frame`` from ``offset``. Raises DecodeError on bytes that do not decode.

    Every length and count in the body is checked against the bytes the frame holds first
    (:func:`check_lengths`): kio's native reader allocates what a count declares before reading, and a
    count past 2**32 aborts the whole process instead of raising.
    """
    cls = _request_class(api_key, version)
    check_lengths(cls, frame, offset)
    try:
        entity, _end = _reader(api_key, version)(frame, offset)
    except (SerialError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as err:
        raise DecodeError(f"api {api_key} v{version}: {type(err).__name__}: {err}") from None
    return entity


# ---- bounds of a body, before kio reads it ----------------------------------------------------------------

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
}
_VARINTS = ("uvarint", "uvarlong", "svarint", "svarlong")
_MAX_LENGTH = 2**31 - 1  # Kafka's lengths and counts are int32s, compact ones included


@dataclass(frozen=True, slots=True)
class _Step:
    """How one field is encoded: its kafka type (None for entities), whether it is an array, the entity
    class of it or of its items, whether the entity may be null (a marker byte precedes it)."""

    kafka_type: str
    array: bool
    nested: type[Any] | None
    nullable: bool


_LAYOUTS: dict[type[Any], tuple[bool, tuple[_Step, ...], dict[int, _Step]]] = {}


def _layout(cls: type[Any]) -> tuple[bool, tuple[_Step, ...], dict[int, _Step]]:
    """(flexible, untagged fields in order, tagged fields by tag) of entity class ``cls``."""
    found = _LAYOUTS.get(cls)
    if found is None:
        steps: list[_Step] = []
        tagged: dict[int, _Step] = {}
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        for name, field_type, kafka_type, _default, nested in _fields(cls):
            args = typing.get_args(field_type)
            nullable = type(None) in args
            inner = next((a for a in args if a is not type(None)), field_type) if nullable else field_type
            step = _Step(kafka_type or "", typing.get_origin(inner) is tuple, nested, nullable)
            tag = by_name[name].metadata.get("tag")
            if tag is None:
                steps.append(step)
            else:
                tagged[int(tag)] = step
        found = _LAYOUTS[cls] = (bool(cls.__flexible__), tuple(steps), tagged)
    return found


def check_lengths(cls: type[Any], data: bytes, offset: int) -> int:
    """Walk the encoding of entity ``cls`` in ``data`` from ``offset`` without building it, checking that
    every string, bytes and array length and every tagged field fits in the bytes left; the offset after
    the entity. Pure; linear in the body's size.

    Raises: DecodeError at the first length, count or varint that cannot be right.
    """
    return _Walk(data).entity(cls, offset)


class _Walk:
    """One walk over one body (:func:`check_lengths`)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def take(self, pos: int, size: int) -> int:
        end = pos + size
        if size < 0 or end > len(self.data):
            raise DecodeError(f"{size} bytes at offset {pos} run past the {len(self.data)}-byte frame")
        return end

    def uvarint(self, pos: int, *, limit: int = _MAX_LENGTH) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= len(self.data):
                raise DecodeError("truncated varint")
            byte = self.data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeError("varint longer than 10 bytes")
        if value > limit:
            raise DecodeError(f"length {value} at offset {pos} is larger than an int32")
        return value, pos

    def signed(self, pos: int, fmt: str) -> tuple[int, int]:
        size = struct.calcsize(fmt)
        end = self.take(pos, size)
        return struct.unpack_from(fmt, self.data, pos)[0], end

    def length(self, pos: int, *, flexible: bool, fmt: str) -> tuple[int, int]:
        """A length or count: -1 for null."""
        if flexible:
            value, pos = self.uvarint(pos)
            return value - 1, pos
        value, pos = self.signed(pos, fmt)
        if value < -1:
            raise DecodeError(f"negative length {value}")
        return value, pos

    def primitive(self, kafka_type: str, pos: int, flexible: bool) -> int:
        fixed = _FIXED_SIZES.get(kafka_type)
        if fixed is not None:
            return self.take(pos, fixed)
        if kafka_type in _VARINTS:
            return self.uvarint(pos, limit=2**70)[1]
        if kafka_type == "string":
            size, pos = self.length(pos, flexible=flexible, fmt=">h")
        elif kafka_type in ("bytes", "records"):
            size, pos = self.length(pos, flexible=flexible, fmt=">i")
        else:
            raise DecodeError(f"unknown kafka type {kafka_type!r}")
        return pos if size < 0 else self.take(pos, size)

    def field(self, step: _Step, pos: int, flexible: bool) -> int:
        if not step.array:
            if step.nested is None:
                return self.primitive(step.kafka_type, pos, flexible)
            if step.nullable:
                marker, pos = self.signed(pos, ">b")
                if marker < 0:
                    return pos
            return self.entity(step.nested, pos)
        count, pos = self.length(pos, flexible=flexible, fmt=">i")
        if count > len(self.data) - pos:
            raise DecodeError(f"an array of {count} items in {len(self.data) - pos} bytes")
        for _ in range(count):
            if step.nested is not None:
                pos = self.entity(step.nested, pos)
            else:
                pos = self.primitive(step.kafka_type, pos, flexible)
        return pos

    def entity(self, cls: type[Any], pos: int) -> int:
        flexible, steps, tagged = _layout(cls)
        for step in steps:
            pos = self.field(step, pos, flexible)
        if not flexible:
            return pos
        count, pos = self.uvarint(pos)
        for _ in range(count):
            tag, pos = self.uvarint(pos)
            size, pos = self.uvarint(pos)
            end = self.take(pos, size)
            known = tagged.get(tag)
            if known is not None and self.field(known, pos, flexible) > end:
                raise DecodeError(f"tagged field {tag} runs past its {size} bytes")
            pos = end
        return pos


_WRITERS: dict[type[Any], Callable[[io.BytesIO, Any], None]] = {}


def _writer(cls: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def encode_response(entity: Any) -> bytes:
    """The bytes of a response entity (without frame or header)."""
    buffer = io.BytesIO()
    _writer(type(entity))(buffer, entity)
    return buffer.getvalue()


# ---- shaping an answer into a version's entity ------------------------------------------------------------

_ZERO_TIMEDELTA = datetime.timedelta(0)


def _zero(field_type: Any, kafka_type: str | None) -> Any:
    """The value a field gets when the handler gave none and the schema has no default."""
    origin = typing.get_origin(field_type)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(field_type):
        return None
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _ZERO_TIMEDELTA
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "float64":
        return 0.0
    if field_type is ErrorCode:
        return ErrorCode.none
    return 0


_Field = tuple[str, Any, str | None, Any, type[Any] | None]
_FIELDS: dict[type[Any], tuple[_Field, ...]] = {}


def _fields(cls: type[Any]) -> tuple[_Field, ...]:
    """(name, type, kafka type, default or MISSING, nested entity class or None) of each field."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _read_fields(cls)
    return found


def _read_fields(cls: type[Any]) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out: list[_Field] = []
    for f in dataclasses.fields(cls):
        field_type = hints[f.name]
        nested: type[Any] | None = None
        candidates = [field_type]
        if typing.get_origin(field_type) in (typing.Union, types.UnionType):
            candidates = [a for a in typing.get_args(field_type) if a is not type(None)]
        for candidate in candidates:
            if typing.get_origin(candidate) is tuple:
                inner = typing.get_args(candidate)[0]
                if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                    nested = inner
            elif isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
                nested = candidate
        default: Any = dataclasses.MISSING
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append((f.name, field_type, f.metadata.get("kafka_type"), default, nested))
    return tuple(out)


def _is_tuple(field_type: Any) -> bool:
    origin: object = typing.get_origin(field_type)
    return origin is tuple


def shape(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """An entity of ``cls`` from ``data``: fields ``cls`` has are taken from ``data`` (nested entities and
    tuples of them from mappings and sequences of mappings, recursively), missing ones get their schema
    default or the zero of their type, and keys ``cls`` lacks are ignored. Error codes may be given as
    ints. Pure."""
    values: dict[str, Any] = {}
    for name, field_type, kafka_type, default, nested in _fields(cls):
        if name in data:
            value = data[name]
            if nested is not None and value is not None:
                if isinstance(value, Mapping):
                    value = shape(nested, value)
                elif not dataclasses.is_dataclass(value):
                    value = tuple(v if dataclasses.is_dataclass(v) else shape(nested, v) for v in value)
            elif field_type is ErrorCode and not isinstance(value, ErrorCode):
                value = ErrorCode(value)
            elif kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
                value = datetime.timedelta(milliseconds=value)
            elif isinstance(value, list) and _is_tuple(field_type):
                value = tuple(value)
        elif default is not dataclasses.MISSING:
            value = default
        else:
            value = _zero(field_type, kafka_type)
        values[name] = value
    return cls(**values)
