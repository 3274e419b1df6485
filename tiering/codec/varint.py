"""Zigzag variable-length integers, as Kafka's record format v2 writes them.

A value is first zigzag-mapped so that small negative numbers stay small (``0 -> 0, -1 -> 1, 1 -> 2,
-2 -> 3 ...``), then written seven bits at a time, least significant group first; the high bit of each
byte says whether another byte follows::

    value 300, zigzag 600 = 0b100_1011000

    byte 0          byte 1
    +-+-------+     +-+-------+
    |1|1011000|     |0|0000100|
    +-+-------+     +-+-------+
     |  bits 0-6     |  bits 7-13
     continuation    last byte

A *varint* holds a 32-bit signed value in at most 5 bytes, a *varlong* a 64-bit one in at most 10.
A longer encoding is corrupt. Bits beyond the 32 (or 64) the reader keeps are dropped, exactly as
Kafka's Java reader (``ByteUtils.readVarint``) drops them.

Every function here is pure, thread-safe and idempotent. The encode and decode functions run in the
compiled core when it is loaded (see :mod:`tierlog.tiering.codec._accel`); the code here is the reference.
"""

from __future__ import annotations

from tierlog.tiering.codec import _accel
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = [
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MIN",
    "INT64_MAX",
    "zigzag_encode",
    "zigzag_decode",
    "encode_varint",
    "encode_varlong",
    "write_varint",
    "write_varlong",
    "decode_varint",
    "decode_varlong",
    "size_of_varint",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_MASK32 = 0xFFFF_FFFF
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF

# The encodings of -64..63 (one byte each), by value + 64: the common case for lengths and deltas.
_ONE_BYTE: tuple[bytes, ...] = tuple(bytes([-2 * v - 1 if v < 0 else 2 * v]) for v in range(-64, 64))


def zigzag_encode(value: int) -> int:
    """Map a signed integer to the unsigned integer Kafka writes (``(v << 1) ^ (v >> 63)`` for int64)."""
    return -2 * value - 1 if value < 0 else 2 * value


def zigzag_decode(value: int) -> int:
    """Inverse of :func:`zigzag_encode` for a non-negative ``value``."""
    return (value >> 1) ^ -(value & 1)


def _encode_unsigned(u: int, out: bytearray) -> None:
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def write_varint(out: bytearray, value: int) -> None:
    """Append the zigzag varint of the 32-bit ``value`` to ``out``.

    Raises:
        InvalidRequestError: ``value`` does not fit in a signed 32-bit integer.
    """
    if -64 <= value < 64:
        out += _ONE_BYTE[value + 64]
        return
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidRequestError(f"varint out of int32 range: {value}")
    _encode_unsigned(zigzag_encode(value), out)


def write_varlong(out: bytearray, value: int) -> None:
    """Append the zigzag varlong of the 64-bit ``value`` to ``out``.

    Raises:
        InvalidRequestError: ``value`` does not fit in a signed 64-bit integer.
    """
    if -64 <= value < 64:
        out += _ONE_BYTE[value + 64]
        return
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidRequestError(f"varlong out of int64 range: {value}")
    _encode_unsigned(zigzag_encode(value), out)


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes of the 32-bit ``value``. Raises InvalidRequestError out of range."""
    if (native := _accel.native) is not None:
        return native.encode_varint(value)
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_varlong(value: int) -> bytes:
    """The zigzag varlong bytes of the 64-bit ``value``. Raises InvalidRequestError out of range."""
    if (native := _accel.native) is not None:
        return native.encode_varlong(value)
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Bytes the zigzag varint (or varlong) of ``value`` occupies."""
    u = zigzag_encode(value)
    size = 1
    while u > 0x7F:
        u >>= 7
        size += 1
    return size


def _decode(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, mask: int) -> tuple[int, int]:
    if pos < 0:
        raise CorruptRecordError(f"negative varint position {pos}")
    result = 0
    shift = 0
    end = len(buf)
    for i in range(pos, pos + max_bytes):
        if i >= end:
            raise CorruptRecordError(f"truncated varint at position {pos}")
        b = buf[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return zigzag_decode(result & mask), i + 1
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes at position {pos}")


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at ``buf[pos]``; return ``(value, position after it)``.

    Raises:
        CorruptRecordError: the buffer ends inside the varint, or it is longer than 5 bytes.
    """
    if (native := _accel.native) is not None:
        return native.decode_varint(buf, pos)
    if 0 <= pos < len(buf) - 1:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            u = (b & 0x7F) | (c << 7)
            return (u >> 1) ^ -(u & 1), pos + 2
    return _decode(buf, pos, 5, _MASK32)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varlong at ``buf[pos]``; return ``(value, position after it)``.

    Raises:
        CorruptRecordError: the buffer ends inside the varlong, or it is longer than 10 bytes.
    """
    if (native := _accel.native) is not None:
        return native.decode_varlong(buf, pos)
    if 0 <= pos < len(buf) - 1:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            u = (b & 0x7F) | (c << 7)
            return (u >> 1) ^ -(u & 1), pos + 2
    return _decode(buf, pos, 10, _MASK64)
