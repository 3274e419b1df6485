"""The sans-I/O request header parser: golden bytes, a round trip of every field, and corrupt input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.kafka.frames import FrameError, parse_request_header, response_frame


def _header(key: int, version: int, correlation: int, client: str | None, tags: bytes = b"") -> bytes:
    raw = struct.pack(">hhi", key, version, correlation)
    if client is None:
        raw += struct.pack(">h", -1)
    else:
        encoded = client.encode()
        raw += struct.pack(">h", len(encoded)) + encoded
    return raw + tags


def test_a_v1_header_golden_bytes() -> None:
    frame = bytes.fromhex("0003000c0000002a0003616263") + b"BODY"
    header = parse_request_header(frame, flexible=False)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 42, "abc")
    assert frame[header.body_offset :] == b"BODY"


def test_a_v2_header_skips_its_tagged_fields() -> None:
    tags = bytes([2, 0, 1, 0xAA, 5, 2, 0xBB, 0xCC])  # two tagged fields
    frame = _header(18, 3, 1, None, tags) + b"X"
    header = parse_request_header(frame, flexible=True)
    assert header.client_id is None
    assert frame[header.body_offset :] == b"X"


@given(
    key=st.integers(-(2**15), 2**15 - 1),
    version=st.integers(-(2**15), 2**15 - 1),
    correlation=st.integers(-(2**31), 2**31 - 1),
    client=st.none() | st.text(max_size=50),
    body=st.binary(max_size=20),
)
def test_every_field_round_trips(
    key: int, version: int, correlation: int, client: str | None, body: bytes
) -> None:
    frame = _header(key, version, correlation, client) + body
    header = parse_request_header(frame, flexible=False)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        key,
        version,
        correlation,
        client,
    )
    assert frame[header.body_offset :] == body


@given(st.binary(max_size=40), st.booleans())
def test_any_bytes_parse_or_raise_frame_error(data: bytes, flexible: bool) -> None:
    try:
        header = parse_request_header(data, flexible=flexible)
    except FrameError:
        return
    assert 0 <= header.body_offset <= len(data)


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x00\x03", _header(3, 1, 1, "abc")[:-1], struct.pack(">hhih", 3, 1, 1, -2)],
)
def test_truncated_or_malformed_headers_raise(frame: bytes) -> None:
    with pytest.raises(FrameError):
        parse_request_header(frame, flexible=False)


def test_a_response_frame_is_size_header_body() -> None:
    assert response_frame(5, b"ab", flexible_header=False) == struct.pack(">ii", 6, 5) + b"ab"
    assert response_frame(5, b"ab", flexible_header=True) == struct.pack(">ii", 7, 5) + b"\x00ab"
