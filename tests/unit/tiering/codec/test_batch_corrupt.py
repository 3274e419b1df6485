"""Corrupt, truncated, extended and hostile batches raise CorruptRecordError: never another error, a hang,
or an allocation sized by the attacker."""

from __future__ import annotations

import pathlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import (
    Compression,
    DecodedBatch,
    Record,
    build_batch,
    compress,
    decode_batch,
    iter_records,
)
from tierlog.tiering.codec.header import CRC_OFFSET, HEADER, HEADER_SIZE, crc32c
from tierlog.tiering.codec.varint import encode_varint
from tierlog.wire.errors import CorruptRecordError

DATA = pathlib.Path(__file__).parent / "data"
SMALL = {c: (DATA / f"small-{c.kafka_name}.bin").read_bytes() for c in Compression}
NOW = 1_750_000_000_000
MiB = 2**20


def seal(data: bytes | bytearray) -> bytes:
    """Recompute the CRC so that a deliberate corruption reaches the parser behind the CRC check."""
    out = bytearray(data)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[21:])))
    return bytes(out)


def make_batch(section: bytes, count: int, *, attributes: int = 0, last_offset_delta: int = 0) -> bytes:
    """A batch around a hand-made records section, with a valid CRC."""
    header = HEADER.pack(0, HEADER_SIZE - 12 + len(section), 0, 2, 0, attributes, last_offset_delta,
                         NOW, NOW, -1, -1, -1, count)  # fmt: skip
    return seal(header + section)


def record_bytes(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def attempt(data: bytes, *, verify: bool = True, max_uncompressed: int = 4 * MiB) -> DecodedBatch | None:
    """Decode, allowing only success or CorruptRecordError."""
    try:
        return decode_batch(data, verify=verify, max_uncompressed=max_uncompressed)
    except CorruptRecordError:
        return None


@pytest.mark.parametrize("codec", list(Compression))
def test_every_single_byte_flip(codec: Compression) -> None:
    original = decode_batch(SMALL[codec])
    for i in range(len(SMALL[codec])):
        flipped = bytearray(SMALL[codec])
        flipped[i] ^= 0xFF
        result = attempt(bytes(flipped))
        if i >= 16:  # magic, CRC and everything it covers
            assert result is None, f"flip at {i} went unnoticed"
        elif result is not None:  # base offset or leader epoch: outside the CRC by design
            assert [(r.key, r.value) for r in result.records] == [(r.key, r.value) for r in original.records]
        attempt(bytes(flipped), verify=False)
        attempt(seal(flipped))


@pytest.mark.parametrize(
    "name", [*(f"small-{c.kafka_name}" for c in Compression), "large-lz4", "small-snappy-raw"]
)
def test_every_truncation(name: str) -> None:
    data = (DATA / f"{name}.bin").read_bytes()
    for cut in range(len(data)):
        for verify in (True, False):
            with pytest.raises(CorruptRecordError):
                decode_batch(data[:cut], verify=verify)


def test_truncated_tail_after_whole_batches() -> None:
    stream = SMALL[Compression.NONE] + SMALL[Compression.ZSTD][:-1]
    seen = []
    with pytest.raises(CorruptRecordError):
        for _, record in iter_records(stream):
            seen.append(record.offset)
    assert seen == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", list(Compression))
def test_garbage_after_a_batch(codec: Compression) -> None:
    data = SMALL[codec]
    assert decode_batch(data + b"\x00garbage").records == decode_batch(data).records
    with pytest.raises(CorruptRecordError):
        list(iter_records(data + b"\x00garbage"))


@pytest.mark.parametrize("codec", list(Compression))
def test_garbage_inside_a_batch(codec: Compression) -> None:
    data = bytearray(SMALL[codec] + b"\x00garbage")
    struct.pack_into(">i", data, 8, len(data) - 12)
    result = attempt(seal(data))
    # Leftover bytes after the records are corrupt; a codec may ignore bytes after its own stream end.
    assert result is None or result.records == decode_batch(SMALL[codec]).records
    if codec == Compression.NONE:
        assert result is None


GOOD_BODY = (
    b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"
)  # attrs, ts delta, offset delta, key, value, 0 headers
INT32_MAX = 2**31 - 1

HOSTILE_SECTIONS = {
    "key length 2^31-1": record_bytes(b"\x00\x00\x00" + encode_varint(INT32_MAX) + b"k" * 20),
    "value length 2^31-1": record_bytes(b"\x00\x00\x00\x02k" + encode_varint(INT32_MAX) + b"v" * 20),
    # Parses as a valid record if the odd one-byte varint 0x03 were read as length 1.
    "key length -2": record_bytes(b"\x00\x00\x00" + encode_varint(-2) + b"k\x02v\x00"),
    "value length -2": record_bytes(b"\x00\x00\x00\x02k" + encode_varint(-2) + b"v\x00"),
    "header count 2^31-1": record_bytes(b"\x00\x00\x00\x02k\x02v" + encode_varint(INT32_MAX) + b"\x02h" * 5),
    "header count -1": record_bytes(b"\x00\x00\x00\x02k\x02v\x01"),
    "header key length 2^31-1": record_bytes(
        b"\x00\x00\x00\x02k\x02v\x02" + encode_varint(INT32_MAX) + b"h" * 9
    ),
    "null header key": record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x01\x02v"),
    "header key not utf-8": record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x02\xff\x02v"),
    "header value length -3": record_bytes(b"\x00\x00\x00\x02k\x02v\x02\x02h" + encode_varint(-3)),
    "record length 2^31-1": encode_varint(INT32_MAX) + GOOD_BODY,
    "record length -1": encode_varint(-1) + GOOD_BODY,
    "record longer than its body": encode_varint(len(GOOD_BODY) + 1) + GOOD_BODY + b"\x00",
    "record shorter than its body": encode_varint(len(GOOD_BODY) - 1) + GOOD_BODY,
    "six-byte offset delta varint": record_bytes(b"\x00\x00" + b"\x80" * 5 + b"\x00" + b"\x02k\x02v\x00"),
    "eleven-byte varlong": record_bytes(b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00\x02k\x02v\x00"),
    "bytes after the last record": record_bytes(GOOD_BODY) + b"\x00",
    "one record missing": b"",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SECTIONS))
def test_hostile_records(name: str) -> None:
    section = HOSTILE_SECTIONS[name]
    count = 2 if name == "one record missing" else 1
    section = record_bytes(GOOD_BODY) + section if name == "one record missing" else section
    with pytest.raises(CorruptRecordError):
        decode_batch(make_batch(section, count))
    # The same records, compressed, fail the same way.
    with pytest.raises(CorruptRecordError):
        decode_batch(make_batch(compress(Compression.ZSTD, section), count, attributes=4))


def test_the_hand_made_batches_are_otherwise_valid() -> None:
    batch = decode_batch(make_batch(record_bytes(GOOD_BODY) * 2, 2, last_offset_delta=1))
    assert [(r.key, r.value, r.timestamp) for r in batch.records] == [(b"k", b"v", NOW)] * 2


@pytest.mark.parametrize(
    ("offset", "fmt", "value"),
    [
        (57, ">i", INT32_MAX),  # records_count
        (57, ">i", 6),  # one more record than there is
        (57, ">i", -1),
        (8, ">i", INT32_MAX),  # batch_length
        (8, ">i", 10),
        (16, ">b", 1),  # magic
        (16, ">b", 3),
        (23, ">i", -1),  # last_offset_delta
        (21, ">h", 5),  # compression codec 5, 6, 7 are unknown
        (21, ">h", 7),
    ],
)
def test_absurd_header_fields(offset: int, fmt: str, value: int) -> None:
    data = bytearray(SMALL[Compression.NONE])
    struct.pack_into(fmt, data, offset, value)
    for candidate in (bytes(data), seal(data)):
        for verify in (True, False):
            with pytest.raises(CorruptRecordError):
                decode_batch(candidate, verify=verify)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_decompression_bomb_batch(codec: Compression) -> None:
    zeros = bytes(16 * MiB)
    section = compress(codec, zeros)
    assert len(section) < MiB
    with pytest.raises(CorruptRecordError, match="more than"):
        decode_batch(make_batch(section, 1, attributes=int(codec)), max_uncompressed=MiB)


def test_bomb_past_the_default_limit() -> None:
    section = compress(Compression.ZSTD, bytes(65 * MiB))
    with pytest.raises(CorruptRecordError, match="more than"):
        decode_batch(make_batch(section, 1, attributes=int(Compression.ZSTD)))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(Compression)),
    st.lists(st.tuples(st.integers(0, 2**16), st.integers(1, 255)), min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_random_flips_raise_only_corrupt(
    codec: Compression, flips: list[tuple[int, int]], reseal: bool, verify: bool
) -> None:
    data = bytearray(SMALL[codec])
    for where, mask in flips:
        data[where % len(data)] ^= mask
    candidate = seal(data) if reseal else bytes(data)
    result = attempt(candidate, verify=verify)
    if result is not None:
        assert len(result.records) == result.header.records_count


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=HEADER_SIZE - 12, max_size=400), st.integers(0, 7), st.integers(0, 40))
def test_random_sections_raise_only_corrupt(section: bytes, codec: int, count: int) -> None:
    result = attempt(make_batch(section, count, attributes=codec), max_uncompressed=64 * 1024)
    if result is not None:
        assert len(result.records) == count


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(Record, st.binary(max_size=20), st.binary(max_size=20)), min_size=1, max_size=8),
       st.sampled_from(list(Compression)), st.data())  # fmt: skip
def test_any_truncation_of_built_batches(
    records: list[Record], codec: Compression, data: st.DataObject
) -> None:
    batch = build_batch(records, compression=codec, now_ms=NOW)
    cut = data.draw(st.integers(0, len(batch) - 1))
    with pytest.raises(CorruptRecordError):
        decode_batch(batch[:cut], verify=data.draw(st.booleans()))
