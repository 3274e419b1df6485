"""Validation of a produced record batch, record by record, before the broker appends it.

Kafka's broker (``LogValidator``) checks every record of every batch a producer sends; a batch that only
has a good header and CRC can still hold records no reader can decode, and a stored batch must never make
reads of other batches fail. :func:`validate_batch` checks, in this order::

    header      whole batch present, magic 2, CRC-32C, size <= max.message.bytes
    attributes  codec id 0-4, no control bit, no delete-horizon bit, no bit above 0x3f
    count       records_count >= 1 and records_count == last_offset_delta + 1
    section     decompressed size <= max.message.bytes (never inflating more than that + 1 byte)
    records     exactly records_count records filling the section; per record:
                  length varint, then attributes, timestamp delta, offset delta == its index,
                  key, value and header lengths inside the record, header keys non-null UTF-8,
                  the record's timestamp (base_timestamp + delta) in [0, 2**63)

Uncompressed records are walked in place (``buf`` with positions, no copy) and no Python object is built
per record: only integers are read. :func:`validate_records` runs in the compiled core when it is loaded
(:mod:`tierlog.tiering.codec._accel`). Every function here is pure and thread-safe.
"""

from __future__ import annotations

from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.compression import Compression, decompress
from tierlog.tiering.codec.header import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    BatchHeader,
    verify_batch,
)
from tierlog.tiering.codec.records import MIN_RECORD_SIZE
from tierlog.tiering.codec.varint import INT64_MAX, decode_varint, decode_varlong
from tierlog.wire.errors import CorruptRecordError

__all__ = ["PRODUCER_ATTRIBUTES", "validate_batch", "validate_records"]

Buffer = bytes | bytearray | memoryview

PRODUCER_ATTRIBUTES = 0x3F  # codec (0-2), timestamp type (3), transactional (4), control (5)
_MIN_BODY_SIZE = MIN_RECORD_SIZE - 1


def validate_batch(buf: Buffer, pos: int = 0, *, max_size: int) -> BatchHeader:
    """Check the batch at ``buf[pos]`` and every one of its records as a producer may send them.

    ``max_size`` is the topic's ``max.message.bytes``: it bounds the batch and its decompressed records.
    Pure, thread-safe and idempotent.

    Raises:
        CorruptRecordError: a rule in the module docstring fails; the message says which.
        RecordTooLargeError: the batch itself is larger than ``max_size``.
    """
    header = verify_batch(buf, pos, max_size=max_size)
    attributes = header.attributes
    if attributes & CONTROL_BIT:
        raise CorruptRecordError("control batch; producers cannot send those")
    if attributes & DELETE_HORIZON_BIT or attributes & ~PRODUCER_ATTRIBUTES:
        raise CorruptRecordError(f"attributes {attributes:#06x} set bits a producer may not set")
    try:
        codec = Compression(header.compression)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {header.compression}") from None
    if header.records_count == 0:
        raise CorruptRecordError("batch holds no records")
    if header.records_count != header.last_offset_delta + 1:
        raise CorruptRecordError(
            f"records_count {header.records_count} disagrees with last_offset_delta "
            f"{header.last_offset_delta}"
        )
    start, end = pos + HEADER_SIZE, pos + header.size
    if codec == Compression.NONE:
        validate_records(buf, start, end, header.records_count, header.base_timestamp)
    else:
        data = decompress(codec, memoryview(buf)[start:end], max_size=max_size)
        validate_records(data, 0, len(data), header.records_count, header.base_timestamp)
    return header


def validate_records(buf: Buffer, start: int, end: int, count: int, base_timestamp: int) -> None:
    """Check that ``buf[start:end]`` holds exactly ``count`` well-formed records (see the module docstring).

    Reads integers only; builds no object per record. One- and two-byte varints (lengths, deltas) are read
    inline, longer ones through :mod:`tierlog.tiering.codec.varint`; positions only move forward, so a field
    that runs past its record is caught by the check that each record ends exactly at its declared length.
    Pure and thread-safe.

    Raises:
        CorruptRecordError: a length runs past its record or the section, a varint is too long, an offset
            delta is not the record's index, a timestamp is negative or overflows, a header key is null
            or not UTF-8, or the section holds more or fewer than ``count`` records.
    """
    if (native := _accel.native) is not None:
        native.validate_records(buf, start, end, count, base_timestamp)
        return
    if count * MIN_RECORD_SIZE > end - start:
        raise CorruptRecordError(f"records_count {count} cannot fit in {end - start} bytes of records")
    if end > len(buf):
        raise CorruptRecordError(f"records section ends at {end}, past the buffer's {len(buf)} bytes")
    pos = start
    index = 0
    try:
        for index in range(count):
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                u = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = decode_varint(buf, pos)
            stop = pos + length
            if length < _MIN_BODY_SIZE or stop > end:
                raise _corrupt(index, f"impossible record length {length}")
            pos += 1  # attributes: no bits defined
            b = buf[pos]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                delta, pos = decode_varlong(buf, pos)
            if not 0 <= base_timestamp + delta <= INT64_MAX:
                raise _corrupt(index, f"timestamp {base_timestamp + delta} is negative or overflows")
            b = buf[pos]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                delta, pos = decode_varint(buf, pos)
            if delta != index:
                raise _corrupt(index, f"offset delta {delta}, expected {index}")
            b = buf[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                u = (b & 0x7F) | (buf[pos + 1] << 7)
                size = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                size, pos = decode_varint(buf, pos)
            if size > 0:
                pos += size
            elif size < -1:
                raise _corrupt(index, f"key length {size}")
            if pos > stop:
                raise _corrupt(index, "key runs past the record")
            b = buf[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                u = (b & 0x7F) | (buf[pos + 1] << 7)
                size = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                size, pos = decode_varint(buf, pos)
            if size > 0:
                pos += size
            elif size < -1:
                raise _corrupt(index, f"value length {size}")
            if pos > stop:
                raise _corrupt(index, "value runs past the record")
            b = buf[pos]
            if b == 0:
                pos += 1
            else:
                headers, pos = decode_varint(buf, pos)
                pos = _skip_headers(buf, pos, stop, index, headers)
            if pos != stop:
                raise _corrupt(index, f"record body is {length - (stop - pos)} bytes, declared {length}")
    except IndexError:
        raise _corrupt(index, "truncated record") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last of {count} records")


def _corrupt(index: int, reason: str) -> CorruptRecordError:
    return CorruptRecordError(f"record {index}: {reason}")


def _varint(buf: Buffer, pos: int, limit: int) -> tuple[int, int]:
    if pos < limit and buf[pos] < 0x80:
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    value, after = decode_varint(buf, pos)
    if after > limit:
        raise CorruptRecordError(f"varint at position {pos} runs past its record")
    return value, after


def _skip_bytes(buf: Buffer, pos: int, stop: int, index: int, what: str) -> int:
    length, pos = _varint(buf, pos, stop)
    if length < -1:
        raise _corrupt(index, f"{what} length {length}")
    if length > 0:
        pos += length
        if pos > stop:
            raise _corrupt(index, f"{what} of {length} bytes runs past the record")
    return pos


def _skip_headers(buf: Buffer, pos: int, stop: int, index: int, count: int) -> int:
    if count < 0 or 2 * count > stop - pos:
        raise _corrupt(index, f"impossible header count {count}")
    for _ in range(count):
        length, pos = _varint(buf, pos, stop)
        if length < 0 or pos + length > stop:
            raise _corrupt(index, f"header key length {length}")
        try:
            str(memoryview(buf)[pos : pos + length], "utf-8")
        except UnicodeDecodeError:
            raise _corrupt(index, "header key is not UTF-8") from None
        pos = _skip_bytes(buf, pos + length, stop, index, "header value")
    return pos
