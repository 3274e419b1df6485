"""validate_batch, the producer-side check of every record: golden batches, properties, corruptions, bombs."""

from __future__ import annotations

import pathlib
import struct
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import Compression, Record, build_batch, compress, decode_batch
from tierlog.tiering.codec.header import CRC_OFFSET, HEADER, HEADER_SIZE, crc32c
from tierlog.tiering.codec.validate import validate_batch
from tierlog.tiering.codec.varint import encode_varint, encode_varlong
from tierlog.wire.errors import CorruptRecordError, RecordTooLargeError

DATA = pathlib.Path(__file__).parent / "data"
NOW = 1_750_000_000_000
MiB = 2**20
GiB = 2**30
MAX = 1_048_588  # the default max.message.bytes


def seal(data: bytes | bytearray) -> bytes:
    """Recompute the CRC so that a corruption reaches the checks behind it."""
    out = bytearray(data)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[21:])))
    return bytes(out)


def make_batch(
    section: bytes,
    count: int,
    *,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    base_ts: int = NOW,
) -> bytes:
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(0, HEADER_SIZE - 12 + len(section), 0, 2, 0, attributes, delta,
                         base_ts, base_ts, -1, -1, -1, count)  # fmt: skip
    return seal(header + section)


def record(offset_delta: int, *, ts_delta: int = 0, key: bytes = b"k", headers: bytes = b"\x00") -> bytes:
    body = b"\x00" + encode_varlong(ts_delta) + encode_varint(offset_delta)
    body += encode_varint(len(key)) + key + encode_varint(1) + b"v" + headers
    return encode_varint(len(body)) + body


def reason(data: bytes, max_size: int = MAX) -> str:
    with pytest.raises(CorruptRecordError) as info:
        validate_batch(data, max_size=max_size)
    return info.value.message


# Golden: batches written by another implementation (see data/README.md) validate as they decode.


@pytest.mark.parametrize("name", [*(f"small-{c.kafka_name}" for c in Compression), "small-snappy-raw"])
def test_golden_batches_validate(name: str) -> None:
    data = (DATA / f"{name}.bin").read_bytes()
    header = validate_batch(data, max_size=MAX)
    assert header.records_count == len(decode_batch(data).records)
    assert header.size == len(data)


def test_hand_made_section_validates_and_names_its_count() -> None:
    section = record(0) + record(1, ts_delta=5) + record(2, headers=encode_varint(1) + b"\x04hk\x01")
    assert validate_batch(make_batch(section, 3), max_size=MAX).records_count == 3


# Property: whatever a producer builds validates, and whatever validates decodes.

records = st.builds(
    Record,
    key=st.none() | st.binary(max_size=30),
    value=st.none() | st.binary(max_size=300),
    headers=st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=2).map(
        tuple
    ),
    timestamp=st.just(-1) | st.integers(0, 2**41),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(records, min_size=1, max_size=20), st.sampled_from(Compression), st.booleans())
def test_built_batches_validate(batch: list[Record], codec: Compression, transactional: bool) -> None:
    data = build_batch(batch, compression=codec, now_ms=NOW, is_transactional=transactional)
    assert validate_batch(data, max_size=4 * MiB).records_count == len(batch)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_whatever_validates_also_decodes(batch: list[Record], data: st.DataObject) -> None:
    raw = bytearray(build_batch(batch, now_ms=NOW))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(21, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    sealed = seal(raw)
    try:
        validate_batch(sealed, max_size=4 * MiB)
    except (CorruptRecordError, RecordTooLargeError):
        return
    decode_batch(sealed)  # a batch the broker accepts never fails its readers


# Corruption: each rule refuses, with its reason.


def test_lying_records_count() -> None:
    section = record(0) + record(1)
    assert "cannot fit" in reason(make_batch(section, 200))
    assert "bytes left after the last of 1 records" in reason(make_batch(section, 1))
    assert "disagrees with last_offset_delta" in reason(make_batch(section, 2, last_offset_delta=5))


def test_garbage_under_a_recomputed_crc() -> None:
    assert "varint longer than 5 bytes" in reason(make_batch(b"\xff" * 40, 2))
    assert "impossible record length" in reason(make_batch(b"\x7f" + b"\x00" * 40, 1))


def test_codec_7_header_only_and_control() -> None:
    assert "unknown compression codec 7" in reason(make_batch(record(0), 1, attributes=7))
    assert "holds no records" in reason(make_batch(b"", 0, last_offset_delta=0))
    assert "cannot fit in 0 bytes" in reason(make_batch(b"", 1))
    assert "control batch" in reason(make_batch(record(0), 1, attributes=0x20))
    assert "may not set" in reason(make_batch(record(0), 1, attributes=0x40))


def test_offset_deltas_timestamps_and_header_keys() -> None:
    assert "offset delta 0, expected 1" in reason(make_batch(record(0) + record(0), 2))
    assert "negative" in reason(make_batch(record(0, ts_delta=-NOW - 1), 1))
    assert "negative" in reason(make_batch(record(0), 1, base_ts=-1))
    assert "not UTF-8" in reason(make_batch(record(0, headers=encode_varint(1) + b"\x02\xff\x01"), 1))
    assert "header key length -1" in reason(make_batch(record(0, headers=encode_varint(1) + b"\x01\x01"), 1))
    assert "key runs past the record" in reason(make_batch(b"\x0c\x00\x00\x00\x28\x01\x00", 1))


def test_a_batch_over_max_message_bytes_is_too_large() -> None:
    data = build_batch([Record(None, b"x" * 2000)], now_ms=NOW)
    with pytest.raises(RecordTooLargeError):
        validate_batch(data, max_size=1000)


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_decompressed_size_is_bounded_by_max_size(codec: Compression) -> None:
    section = b"".join(record(i, key=b"z" * 100) for i in range(200))
    data = make_batch(compress(codec, section), 200, attributes=int(codec))
    assert validate_batch(data, max_size=len(section)).records_count == 200
    assert "more than" in reason(data, max_size=len(section) - 1)


def test_gzip_bomb_of_one_gib_is_refused() -> None:
    member = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    sixteen_mib = member.compress(bytes(16 * MiB)) + member.flush()
    bomb = sixteen_mib * 64  # 1 GiB of zeros as 64 concatenated gzip members, about 1 MiB
    assert len(bomb) < MiB + 64 * 1024
    assert "more than 1048588 bytes" in reason(make_batch(bomb, 1, attributes=1), max_size=MAX)


def test_zstd_bombs_are_refused() -> None:
    unknown_size = zstandard.ZstdCompressor(level=3).compressobj()
    bomb = b"".join(unknown_size.compress(bytes(MiB)) for _ in range(1024)) + unknown_size.flush()
    assert len(bomb) < 64 * 1024
    assert "more than" in reason(make_batch(bomb, 1, attributes=4))
    declared = zstandard.ZstdCompressor(level=3).compressobj(size=GiB)
    bomb = b"".join(declared.compress(bytes(MiB)) for _ in range(1024)) + declared.flush()
    assert "more than" in reason(make_batch(bomb, 1, attributes=4))


def test_lz4_bomb_is_refused() -> None:
    frame = lz4.frame.compress(bytes(64 * MiB), block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert "more than" in reason(make_batch(frame, 1, attributes=3))
