"""The pure half of the Kafka protocol fuzzer: headers and bodies of every served API key and version,
random and schema-generated, through :mod:`tierlog.service.kafka.frames` and
:mod:`tierlog.service.kafka.messages`. Bytes either decode or raise FrameError/DecodeError, never anything
else, and never abort the process (kio's native reader does on some counts unless they are checked first)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import types
import typing
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer
from kio.static.primitive import Records

from tierlog.service.kafka import handlers  # noqa: F401  (registers every API)
from tierlog.service.kafka.apis import REGISTRY
from tierlog.service.kafka.frames import FrameError, parse_request_header
from tierlog.service.kafka.messages import DecodeError, check_lengths, decode_request

SERVED = sorted((a.key, v) for a in REGISTRY.values() for v in range(a.min_version, a.max_version + 1))
METADATA_V9 = 3, 9


def request_bytes(key: int, version: int, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(load_request_schema(key, version))(buffer, entity)
    return buffer.getvalue()


_SMALL = {
    # waits a valid request may ask for (fetch's max wait, produce's timeout, a rebalance): short, so a
    # fuzzed request is answered within the fuzzer's bound
    "timedelta_i32": st.integers(0, 50).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "timedelta_i64": st.integers(0, 50).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "records": st.binary(max_size=64).map(Records),
    "bytes": st.binary(max_size=64),
}


def _value(field_type: Any, kafka_type: str | None) -> st.SearchStrategy[Any]:
    args = typing.get_args(field_type)
    if typing.get_origin(field_type) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        return st.none() | _value(inner, kafka_type)
    if typing.get_origin(field_type) is tuple:
        return st.lists(_value(args[0], kafka_type), max_size=3).map(tuple)
    if dataclasses.is_dataclass(field_type):
        return entities(typing.cast(type[Any], field_type))
    if kafka_type in _SMALL:
        return _SMALL[kafka_type]
    return st.from_type(field_type)


_ENTITIES: dict[type[Any], st.SearchStrategy[Any]] = {}


def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Valid entities of kio's schema class ``cls``, built from its dataclass fields: at most three items
    an array, small bytes and records, short waits."""
    found = _ENTITIES.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        fields = {
            f.name: _value(hints[f.name], f.metadata.get("kafka_type")) for f in dataclasses.fields(cls)
        }
        found = _ENTITIES[cls] = st.builds(cls, **fields)
    return found


def served_requests() -> st.SearchStrategy[tuple[int, int, Any]]:
    """A valid request entity of a served API key and version, from kio's schema."""
    return st.sampled_from(SERVED).flatmap(
        lambda kv: st.tuples(st.just(kv[0]), st.just(kv[1]), entities(load_request_schema(*kv)))
    )


def _kio_requests() -> list[tuple[int, int]]:
    found = []
    for key in range(100):
        for version in range(30):
            try:
                load_request_schema(key, version)
            except Exception:  # kio raises several kinds for a pair it lacks
                continue
            found.append((key, version))
    return found


KIO_REQUESTS = _kio_requests()


def test_every_served_version_has_kio_request_and_response_schemas() -> None:
    for key, version in SERVED:
        assert (key, version) in KIO_REQUESTS, f"kio has no request schema for API {key} v{version}"
        assert load_response_schema(key, version)


@given(key_version=st.sampled_from(KIO_REQUESTS), data=st.data())
def test_the_length_check_walks_any_kio_request_to_its_end(
    key_version: tuple[int, int], data: st.DataObject
) -> None:
    # every request schema kio has, served or not yet: the check must never refuse a valid request
    cls = load_request_schema(*key_version)
    encoded = request_bytes(*key_version, data.draw(entities(cls)))
    assert check_lengths(cls, encoded, 0) == len(encoded)


def test_a_compact_count_past_two_to_the_32_is_a_decode_error_not_an_abort() -> None:
    # Metadata v9's topics count as a 5-byte varint of 24_341_820_844: kio's reader alone allocates
    # 194 GB for it and aborts the process.
    body = bytes.fromhex("aceb8ad75a1e6ff574d8d21b76781206")
    with pytest.raises(DecodeError, match="larger than an int32"):
        decode_request(*METADATA_V9, body, 0)


def test_an_array_count_larger_than_the_bytes_left_is_a_decode_error() -> None:
    # Metadata v4: topics count 2**24 with 8 bytes after it
    with pytest.raises(DecodeError, match="array of 16777216 items"):
        decode_request(3, 4, b"\x01\x00\x00\x00" + b"\x00" * 8, 0)


@given(key_version=st.sampled_from(SERVED), body=st.binary(max_size=300))
def test_random_bodies_decode_or_raise_decode_error(key_version: tuple[int, int], body: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_request(*key_version, body, 0)


@given(frame=st.binary(max_size=64), flexible=st.sampled_from([None, False, True]))
def test_random_headers_parse_or_raise_frame_error(frame: bytes, flexible: bool | None) -> None:
    try:
        header = parse_request_header(frame, flexible=flexible)
    except FrameError:
        return
    assert header.body_offset <= len(frame)


@given(request=served_requests())
def test_every_valid_request_is_walked_to_its_end_and_decodes_as_sent(request: tuple[int, int, Any]) -> None:
    key, version, entity = request
    data = request_bytes(key, version, entity)
    assert check_lengths(load_request_schema(key, version), data, 0) == len(data)
    assert decode_request(key, version, data, 0) == entity


@given(request=served_requests(), data=st.data())
def test_truncated_or_corrupted_valid_requests_decode_or_raise_decode_error(
    request: tuple[int, int, Any], data: st.DataObject
) -> None:
    key, version, entity = request
    body = bytearray(request_bytes(key, version, entity))
    if body and data.draw(st.booleans(), label="flip"):
        at = data.draw(st.integers(0, len(body) - 1), label="at")
        body[at] ^= data.draw(st.integers(1, 255), label="xor")
    cut = data.draw(st.integers(0, len(body)), label="cut")
    with contextlib.suppress(DecodeError):
        decode_request(key, version, bytes(body[:cut]), 0)
