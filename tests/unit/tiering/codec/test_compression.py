"""Compression codecs: names, framing, round trips, and bounded, crash-free decompression of bad input."""

from __future__ import annotations

import gzip
import io
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec.compression import XERIAL_MAGIC, Compression, compress, decompress
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]
MiB = 2**20


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Compression.NONE),
        ("uncompressed", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("snappy", Compression.SNAPPY),
        ("lz4", Compression.LZ4),
        ("zstd", Compression.ZSTD),
        ("ZSTD", Compression.ZSTD),
    ],
)
def test_from_name(name: str, codec: Compression) -> None:
    assert Compression.from_name(name) is codec


@pytest.mark.parametrize("name", ["", "brotli", "producer", "none2", "GZIP "[:-2]])
def test_from_name_rejects_unknown(name: str) -> None:
    with pytest.raises(InvalidRequestError):
        Compression.from_name(name)


def test_codec_ids_are_kafkas() -> None:
    assert [(c.kafka_name, int(c)) for c in Compression] == [
        ("none", 0),
        ("gzip", 1),
        ("snappy", 2),
        ("lz4", 3),
        ("zstd", 4),
    ]


def test_snappy_is_written_in_xerial_framing() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes: three 32 KiB blocks
    out = compress(Compression.SNAPPY, data)
    assert out[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data


def test_lz4_is_written_with_independent_blocks_and_no_content_size() -> None:
    out = compress(Compression.LZ4, b"kafka " * 50_000)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20  # block independence, which Kafka's Java reader requires
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size


def test_gzip_output_is_deterministic() -> None:
    assert compress(Compression.GZIP, b"abc" * 100) == compress(Compression.GZIP, b"abc" * 100)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000) | st.binary(max_size=50).map(lambda b: b * 2000))
def test_roundtrip(codec: Compression, data: bytes) -> None:
    out = compress(codec, data)
    assert decompress(codec, out, max_size=len(data)) == data
    assert decompress(codec, memoryview(out), max_size=len(data) + 1) == data


# Streams written by other implementations than ours.
FOREIGN = [
    (Compression.SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),  # raw, as librdkafka writes
    (Compression.LZ4, lambda d: lz4.frame.compress(d)),  # linked blocks, content size stored
    (Compression.LZ4, lambda d: lz4.frame.compress(d, content_checksum=True, block_checksum=True)),
    (Compression.GZIP, lambda d: gzip.compress(d[:100]) + gzip.compress(d[100:])),  # two members
    (Compression.ZSTD, lambda d: _zstd_stream(d)),  # no content size, as zstd-jni streams it
]


def _zstd_stream(data: bytes) -> bytes:
    sink = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(sink, closefd=False) as writer:
        writer.write(data)
    return sink.getvalue()


@pytest.mark.parametrize(("codec", "encoder"), FOREIGN)
def test_decodes_other_framings(codec: Compression, encoder: object) -> None:
    data = b"records " * 20_000
    assert callable(encoder)
    assert decompress(codec, encoder(data), max_size=len(data)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_output_over_max_size_is_corrupt(codec: Compression) -> None:
    data = b"x" * 10_000
    with pytest.raises(CorruptRecordError):
        decompress(codec, compress(codec, data), max_size=len(data) - 1)


BOMBS = [
    (Compression.GZIP, lambda d: gzip.compress(d, compresslevel=1)),
    (Compression.SNAPPY, lambda d: compress(Compression.SNAPPY, d)),
    (Compression.SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    (Compression.LZ4, lambda d: compress(Compression.LZ4, d)),
    (Compression.LZ4, lambda d: lz4.frame.compress(d, block_size=lz4.frame.BLOCKSIZE_MAX4MB)),
    (Compression.ZSTD, lambda d: compress(Compression.ZSTD, d)),
    (Compression.ZSTD, _zstd_stream),
]


@pytest.mark.parametrize(("codec", "encoder"), BOMBS)
def test_decompression_bomb_is_bounded(codec: Compression, encoder: object) -> None:
    assert callable(encoder)
    bomb = encoder(bytes(48 * MiB))
    assert len(bomb) * 16 < 48 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            decompress(codec, bomb, max_size=MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MiB


def test_zstd_declaring_a_huge_content_size_is_rejected_before_allocating() -> None:
    frame = bytearray(compress(Compression.ZSTD, b"tiny"))
    params = zstandard.get_frame_parameters(bytes(frame))
    assert params.content_size == 4
    # Frame header descriptor 0x20 (single segment, 1-byte size) -> 0xE0 (single segment, 8-byte size).
    assert frame[4] & 0xC0 == 0
    forged = frame[:4] + bytes([frame[4] | 0xC0]) + struct.pack("<Q", 2**40) + frame[6:]
    assert zstandard.get_frame_parameters(bytes(forged)).content_size == 2**40
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, bytes(forged), max_size=64 * MiB)


def test_raw_snappy_declaring_a_huge_length_is_rejected() -> None:
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, max_size=64 * MiB)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_streams_are_corrupt(codec: Compression) -> None:
    data = bytes(range(256)) * 400
    out = compress(codec, data)
    for cut in sorted({0, 1, 5, 15, 17, len(out) // 2, len(out) - 4, len(out) - 1}):
        try:
            result = decompress(codec, out[:cut], max_size=len(data))
        except CorruptRecordError:
            continue
        # A cut on a snappy xerial block boundary is a shorter valid stream; it never yields wrong bytes.
        assert codec == Compression.SNAPPY
        assert data.startswith(result)
        assert len(result) < len(data)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_after_the_stream_is_corrupt_or_ignored(codec: Compression) -> None:
    data = b"payload " * 1000
    try:
        result = decompress(codec, compress(codec, data) + b"\x00garbage", max_size=MiB)
    except CorruptRecordError:
        return
    assert result == data


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(COMPRESSED),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_byte_flips_raise_only_corrupt(codec: Compression, flips: list[tuple[int, int]]) -> None:
    data = (b"flip me " * 500) + bytes(range(256)) * 4
    out = bytearray(compress(codec, data))
    for where, what in flips:
        out[where % len(out)] ^= what or 1
    try:
        result = decompress(codec, bytes(out), max_size=len(data) * 2)
    except CorruptRecordError:
        return
    assert len(result) <= len(data) * 2


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COMPRESSED), st.binary(max_size=300))
def test_random_bytes_raise_only_corrupt(codec: Compression, data: bytes) -> None:
    for prefix in (
        b"",
        XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01",
        b"\x04\x22\x4d\x18",
        b"\x28\xb5\x2f\xfd",
    ):
        try:
            result = decompress(codec, prefix + data, max_size=4096)
        except CorruptRecordError:
            continue
        assert len(result) <= 4096


def test_zstd_stream_larger_than_the_first_buffer_guess() -> None:
    data = bytes(4 * MiB) + b"end"
    frame = _zstd_stream(data)
    assert zstandard.get_frame_parameters(frame).content_size == 2**64 - 1  # no declared size
    assert 32 * len(frame) < MiB
    assert decompress(Compression.ZSTD, frame, max_size=8 * MiB) == data
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, frame, max_size=4 * MiB)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, frame[:-2], max_size=8 * MiB)
