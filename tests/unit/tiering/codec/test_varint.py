"""Zigzag varints: known encodings, a round-trip property over the int32/int64 ranges, corrupt input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    zigzag_decode,
    zigzag_encode,
)
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

# Encodings as Kafka writes them (cross-checked with kafka-python's encode_varint, an independent encoder).
GOLDEN_32 = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (8191, "fe7f"),
    (8192, "808001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
GOLDEN_64 = [
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
    (2**31, "8080808010"),
    (1_700_000_000_000, "80a0abfef962"),
]


@pytest.mark.parametrize(("value", "hexed"), GOLDEN_32)
def test_varint_golden(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert encode_varlong(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed), 0) == (value, len(hexed) // 2)
    assert size_of_varint(value) == len(hexed) // 2


@pytest.mark.parametrize(("value", "hexed"), GOLDEN_64)
def test_varlong_golden(value: int, hexed: str) -> None:
    assert encode_varlong(value).hex() == hexed
    assert decode_varlong(b"\xaa" + bytes.fromhex(hexed) + b"\xbb", 1) == (value, 1 + len(hexed) // 2)


@settings(max_examples=300, deadline=None)
@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=4))
def test_varint_roundtrip(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(prefix + encoded + b"\xff", len(prefix)) == (value, len(prefix) + len(encoded))
    assert zigzag_decode(zigzag_encode(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_roundtrip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varint(value) <= 10
    assert decode_varlong(memoryview(encoded), 0) == (value, len(encoded))
    assert zigzag_encode(value) >= 0


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40])
def test_varint_out_of_range_is_rejected(value: int) -> None:
    with pytest.raises(InvalidRequestError):
        encode_varint(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varlong_out_of_range_is_rejected(value: int) -> None:
    with pytest.raises(InvalidRequestError):
        encode_varlong(value)


def test_overlong_varints_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80" * 5 + b"\x00", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x00", 0)
    # Five bytes are a valid varint, ten a valid varlong.
    assert decode_varint(b"\x80" * 4 + b"\x00", 0) == (0, 5)
    assert decode_varlong(b"\x80" * 9 + b"\x00", 0) == (0, 10)


def test_truncated_varints_are_corrupt() -> None:
    for decode in (decode_varint, decode_varlong):
        for data, pos in ((b"", 0), (b"\x80", 0), (b"\x02\xd8", 1), (b"\x02", 1), (b"\x02", -1)):
            with pytest.raises(CorruptRecordError):
                decode(data, pos)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=12), st.integers(-2, 12))
def test_decoding_arbitrary_bytes_raises_only_corrupt(data: bytes, pos: int) -> None:
    for decode, limit in ((decode_varint, 5), (decode_varlong, 10)):
        try:
            value, after = decode(data, pos)
        except CorruptRecordError:
            continue
        assert 0 <= pos < after <= min(len(data), pos + limit)
        bound = 2**31 if limit == 5 else 2**63
        assert -bound <= value < bound
