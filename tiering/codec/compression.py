"""Compression of the records section of a v2 batch: none, gzip, snappy, lz4 and zstd.

The codec id lives in bits 0-2 of the batch attributes. Each codec compresses the whole records section
(everything after byte 61) as one stream, framed as Apache Kafka's Java client frames it:

* gzip: one RFC 1952 member (level 6, mtime 0). Concatenated members decode too.
* snappy: the xerial block stream the Java client writes::

      +------+-------+-------+--------+----------+---------+--------+----------+---------+
      | 0x82 SNAPPY 0x00   | version | compat | length 1 | block 1 | ...    | length n | block n |
      | 8 bytes magic      | int32 1 | int32 1| int32 BE | raw     |        | int32 BE | raw     |
      +------+-------+-------+--------+----------+---------+--------+----------+---------+

  each block being raw snappy of at most 32 KiB of input. Streams without the magic are raw snappy (as
  librdkafka-based clients write them) and decode too.
* lz4: the LZ4 frame format (Kafka since KIP-57) with independent 64 KiB blocks and no content size, which
  is what Kafka's Java reader requires.
* zstd: one zstd frame (level 3).

Decompression never trusts a length from the input: the output is bounded by ``max_size`` before anything
of that size is allocated, and any malformed stream raises
:class:`~tierlog.wire.errors.CorruptRecordError`. Every function here is pure and thread-safe.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    """A record batch compression codec; the value is the id in the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """The codec for a Kafka ``compression.type`` name (case-insensitive; ``uncompressed`` = none).

        Raises:
            InvalidRequestError: the name is not a known codec.
        """
        key = name.strip().lower()
        if key == "uncompressed":
            return cls.NONE
        try:
            return cls[key.upper()]
        except KeyError:
            raise InvalidRequestError(f"unknown compression type {name!r}") from None

    @property
    def kafka_name(self) -> str:
        """The lower-case name Kafka uses for this codec in configs and tools."""
        return self.name.lower()


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_VERSION = 1
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")

_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3
_ZSTD_UNKNOWN_SIZE = 2**64 - 1
_ZSTD_FIRST_GUESS = 256 * 1024


def compress(codec: Compression, data: bytes) -> bytes:
    """Compress ``data`` with ``codec`` in the framing Kafka's Java client writes.

    Pure, thread-safe, and deterministic for a given library version.

    Raises:
        InvalidRequestError: ``codec`` is not a known codec.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return bytes(
            lz4.frame.compress(
                data,
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec == Compression.ZSTD:
        return bytes(zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data))
    raise InvalidRequestError(f"unknown compression codec {codec!r}")


def decompress(codec: Compression, data: bytes | memoryview, *, max_size: int) -> bytes:
    """Decompress ``data`` compressed with ``codec``; the result is at most ``max_size`` bytes.

    Pure and thread-safe.

    Raises:
        CorruptRecordError: the stream is malformed or truncated, or would decompress to more than
            ``max_size`` bytes (checked before allocating that much).
        InvalidRequestError: ``codec`` is not a known codec.
    """
    if codec == Compression.NONE:
        if len(data) > max_size:
            raise CorruptRecordError(f"records section of {len(data)} bytes exceeds {max_size}")
        return bytes(data)
    if codec == Compression.GZIP:
        return _gunzip(data, max_size)
    if codec == Compression.SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == Compression.LZ4:
        return _lz4_decompress(data, max_size)
    if codec == Compression.ZSTD:
        return _zstd_decompress(data, max_size)
    raise InvalidRequestError(f"unknown compression codec {codec!r}")


def _too_large(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"records decompress to more than {max_size} bytes")


def _gunzip(data: bytes | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest: bytes | memoryview = data
    if not rest:
        raise CorruptRecordError("empty gzip stream")
    while rest:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(rest, max_size - len(out) + 1)
        except zlib.error as err:
            raise CorruptRecordError(f"corrupt gzip stream: {err}") from err
        if len(out) > max_size:
            raise _too_large(max_size)
        if not inflater.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = inflater.unused_data
    return bytes(out)


def _xerial_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION))
    view = memoryview(data)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_length(block: bytes | memoryview) -> int:
    """The uncompressed length a raw snappy block declares in its preamble (an unsigned varint)."""
    length = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        length |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return length
    raise CorruptRecordError("corrupt snappy block length")


def _snappy_raw(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    if _snappy_length(block) > budget:
        raise _too_large(max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as err:
        raise CorruptRecordError(f"corrupt snappy block: {err}") from err


def _snappy_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return _snappy_raw(view, max_size, max_size)
    if len(view) < _XERIAL_HEADER.size:
        raise CorruptRecordError("truncated xerial snappy header")
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block length {length} exceeds the stream")
        out += _snappy_raw(view[pos : pos + length], max_size - len(out), max_size)
        pos += length
    return bytes(out)


def _lz4_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest: bytes | memoryview = data
    if not rest:
        raise CorruptRecordError("empty lz4 stream")
    while rest:
        decoder = lz4.frame.LZ4FrameDecompressor()
        try:
            out += decoder.decompress(rest, max_length=max_size - len(out) + 1)
        except RuntimeError as err:
            raise CorruptRecordError(f"corrupt lz4 frame: {err}") from err
        if len(out) > max_size:
            raise _too_large(max_size)
        if not decoder.eof:
            raise CorruptRecordError("truncated lz4 frame")
        rest = decoder.unused_data or b""
    return bytes(out)


def _zstd_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    dctx = zstandard.ZstdDecompressor()
    try:
        declared = zstandard.get_frame_parameters(data).content_size
        if declared != _ZSTD_UNKNOWN_SIZE:
            if declared > max_size:
                raise _too_large(max_size)
            return bytes(dctx.decompress(data, allow_extra_data=False))
    except zstandard.ZstdError as err:
        raise CorruptRecordError(f"corrupt zstd frame: {err}") from err
    # No declared size (as streaming compressors write): the output buffer is the limit. A guess from
    # the input size comes first, so that a small frame does not cost an allocation of max_size.
    guess = min(max_size, max(_ZSTD_FIRST_GUESS, 32 * len(data)))
    for limit in (guess, max_size) if guess < max_size else (max_size,):
        try:
            out = dctx.decompress(data, max_output_size=max(limit, 1), allow_extra_data=False)
        except zstandard.ZstdError as err:
            if limit < max_size:
                continue
            raise CorruptRecordError(f"corrupt zstd frame or more than {max_size} bytes: {err}") from err
        if len(out) > max_size:
            raise _too_large(max_size)
        return bytes(out)
    raise _too_large(max_size)  # pragma: no cover - the loop returns or raises on its last pass
