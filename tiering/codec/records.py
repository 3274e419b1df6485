"""The records inside a v2 batch: one varint-framed record after another, after the 61-byte header.

One record (``varint`` and ``varlong`` are zigzag, see :mod:`tierlog.tiering.codec.varint`)::

    length            varint    bytes of everything below
    attributes        int8      unused, 0
    timestamp_delta   varlong   timestamp - batch base_timestamp
    offset_delta      varint    offset - batch base_offset
    key_length        varint    -1 for a null key
    key               bytes
    value_length      varint    -1 for a null value
    value             bytes
    header_count      varint
    headers           header_count times:
        key_length    varint    never null
        key           UTF-8
        value_length  varint    -1 for a null value
        value         bytes

The compiled core (:mod:`tierlog.tiering.codec._accel`) replaces :func:`decode_records` when it is
loaded; the code here is the reference it must agree with.

Decoding checks every length against the bytes that remain before slicing, checks that each record
occupies exactly its declared length and that the section holds exactly ``records_count`` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.varint import decode_varint, decode_varlong, write_varint, write_varlong
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = ["Record", "Headers", "MIN_RECORD_SIZE", "write_record", "decode_records"]

Headers = tuple[tuple[str, bytes | None], ...]

# length(1) + attributes(1) + timestamp delta(1) + offset delta(1) + key(1) + value(1) + header count(1)
MIN_RECORD_SIZE = 7
_MIN_BODY_SIZE = MIN_RECORD_SIZE - 1
_MIN_HEADER_SIZE = 2


@dataclass(frozen=True, slots=True)
class Record:
    """One record: what a producer sends and a consumer receives.

    ``timestamp`` is in ms since the epoch; ``-1`` means "now" when building a batch. ``offset`` is the
    absolute offset once decoded and is ignored when building (offsets in a batch are consecutive).
    """

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int = -1
    offset: int = -1


if _accel.available is not None:
    _accel.available.set_record_type(Record)


def write_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    """Append one length-prefixed record to ``out``.

    Raises:
        InvalidRequestError: a delta is out of range, or a header key is not a string.
    """
    body = bytearray(b"\x00")  # attributes
    write_varlong(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    write_varint(body, len(headers))
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise InvalidRequestError(f"header key must be a string, not {type(header_key).__name__}")
        encoded = header_key.encode("utf-8")
        write_varint(body, len(encoded))
        body += encoded
        _write_bytes(body, header_value)
    write_varint(out, len(body))
    out += body


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(0x01)  # varint -1
    else:
        write_varint(out, len(data))
        out += data


def _corrupt(message: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(f"{message} at records position {pos}")


def decode_records(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None = None,
) -> list[Record]:
    """Decode exactly ``count`` records filling all of ``data`` (an uncompressed records section).

    Offsets are ``base_offset + offset_delta``; timestamps are ``append_time`` when given (LogAppendTime
    batches), else ``base_timestamp + timestamp_delta``. Pure and thread-safe.

    This loop is the hot path of every fetch that decodes and of every Spark scan, so the common one-
    and two-byte varints and short keys and values are read inline; longer ones go through
    :mod:`tierlog.tiering.codec.varint` and :func:`_read_bytes`, which apply the same checks.

    Raises:
        CorruptRecordError: a length runs past its record or the section, a varint is too long, a header
            key is null or not UTF-8, a record is not exactly its declared length, or the section holds
            more or fewer than ``count`` records.
    """
    if (native := _accel.native) is not None:
        return native.decode_records(data, count, base_offset, base_timestamp, append_time)
    if not isinstance(data, bytes):
        data = bytes(data)
    n = len(data)
    if count < 0 or count * MIN_RECORD_SIZE > n:
        raise CorruptRecordError(f"records_count {count} cannot fit in {n} bytes of records")
    records: list[Record] = []
    append = records.append
    pos = 0
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                length = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            end = pos + length
            if length < _MIN_BODY_SIZE or end > n:
                raise _corrupt(f"impossible record length {length}", pos)
            pos += 1  # attributes: no bits defined
            b = data[pos]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                timestamp_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                timestamp_delta, pos = decode_varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (u >> 1) ^ -(u & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            b = data[pos]
            if b == 0x01:
                key = None
                pos += 1
            elif not b & 0x81:  # a one-byte, non-negative length
                stop = pos + 1 + (b >> 1)
                if stop > end:
                    raise _corrupt("key runs past the record", pos)
                key = data[pos + 1 : stop]
                pos = stop
            else:
                key, pos = _read_bytes(data, pos, end)
            b = data[pos]
            if b == 0x01:
                value = None
                pos += 1
            elif not b & 0x81:  # a one-byte, non-negative length
                stop = pos + 1 + (b >> 1)
                if stop > end:
                    raise _corrupt("value runs past the record", pos)
                value = data[pos + 1 : stop]
                pos = stop
            else:
                value, pos = _read_bytes(data, pos, end)
            b = data[pos]
            if b < 0x80:
                header_count = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                header_count, pos = decode_varint(data, pos)
            headers: Headers = ()
            if header_count:
                headers, pos = _read_headers(data, pos, end, header_count)
            if pos != end:
                raise _corrupt(f"record body is {pos - end + length} bytes, declared {length}", pos)
            append(
                Record(
                    key,
                    value,
                    headers,
                    base_timestamp + timestamp_delta if append_time is None else append_time,
                    base_offset + offset_delta,
                )
            )
    except IndexError:
        raise _corrupt("truncated record", pos) from None
    if pos != n:
        raise _corrupt(f"{n - pos} bytes left after the last of {count} records", pos)
    return records


def _read_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    b = data[pos]
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        length, pos = decode_varint(data, pos)
    if length < 0:
        if length == -1:
            return None, pos
        raise _corrupt(f"negative length {length}", pos)
    stop = pos + length
    if stop > end:
        raise _corrupt(f"length {length} runs past the record", pos)
    return data[pos:stop], stop


def _read_headers(data: bytes, pos: int, end: int, count: int) -> tuple[Headers, int]:
    if count < 0 or count * _MIN_HEADER_SIZE > end - pos:
        raise _corrupt(f"impossible header count {count}", pos)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        raw_key, pos = _read_bytes(data, pos, end)
        if raw_key is None:
            raise _corrupt("null header key", pos)
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _corrupt(f"header key is not UTF-8 ({err.reason})", pos) from None
        value, pos = _read_bytes(data, pos, end)
        headers.append((key, value))
    return tuple(headers), pos
