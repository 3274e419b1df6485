"""Decoding a remote segment's ``.index`` and ``.timeindex`` objects for lookups. Pure: no I/O, nothing async.

The objects are the broker's sealed index files byte for byte (``docs/format-segments.md``)::

    .index      0 relative_offset int32 | 4 position int32              (8 bytes, big-endian)
    .timeindex  0 timestamp int64       | 8 relative_offset int32       (12 bytes, big-endian)

Indexes are derived data and carry no checksum, so everything is checked against what the manifest says
about the segment: relative offsets within ``[0, last_offset - base_offset]``, positions below the
``.log`` object's size, both strictly increasing (timestamps strictly increasing, time-index offsets
non-decreasing). Trailing all-zero entries are preallocation padding and dropped, as the local log does.
A failed check raises :class:`IndexInvalid`; the reader then scans the segment from position 0 instead.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from dataclasses import dataclass

from tierlog.wire.errors import CorruptRecordError

__all__ = [
    "OFFSET_ENTRY",
    "TIME_ENTRY",
    "IndexInvalid",
    "RemoteOffsetIndex",
    "RemoteTimeIndex",
    "decode_offset_index",
    "decode_time_index",
]

OFFSET_ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset: last offset of the batch - segment base offset
    "i"  # position: byte position of the batch in the .log object
)
TIME_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp: largest batch max timestamp so far in the segment
    "i"  # relative_offset: last offset of the batch carrying it - segment base offset
)


class IndexInvalid(CorruptRecordError):
    """An index object that cannot be trusted (wrong length, not increasing, pointing past the segment)."""


def _ints(data: bytes, code: str) -> array[int]:
    values: array[int] = array(code)
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


@dataclass(frozen=True, slots=True)
class RemoteOffsetIndex:
    """A segment's offset index: ``offsets[i]`` (absolute, a batch's last offset) starts at ``positions[i]``.

    ``missing`` marks the stand-in used when the object is absent or invalid: no entries, so every lookup
    starts at position 0. Immutable, so safe to share between concurrent readers.
    """

    base_offset: int
    offsets: array[int]
    positions: array[int]
    missing: bool = False

    @property
    def nbytes(self) -> int:
        """Memory held by the entries (for the index cache's byte bound)."""
        return 16 * len(self.offsets) + 64

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset <= ``offset``; ``(base, 0)`` if none."""
        i = bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]


@dataclass(frozen=True, slots=True)
class RemoteTimeIndex:
    """A time index: ``timestamps[i]`` is the max timestamp up to the batch ending at ``offsets[i]``."""

    base_offset: int
    timestamps: array[int]
    offsets: array[int]
    missing: bool = False

    @property
    def nbytes(self) -> int:
        return 16 * len(self.offsets) + 64

    def lookup(self, timestamp: int) -> int:
        """The offset of the largest entry with timestamp <= ``timestamp``, or the segment's base offset."""
        i = bisect_right(self.timestamps, timestamp) - 1
        return self.offsets[i] if i >= 0 else self.base_offset


def _strip_padding(data: bytes, size: int) -> bytes:
    if len(data) % size:
        raise IndexInvalid(f"length {len(data)} is not a multiple of the {size}-byte entry")
    end = len(data)
    zero = bytes(size)
    while end and data[end - size : end] == zero:
        end -= size
    return data[:end]


def decode_offset_index(data: bytes, base_offset: int, last_offset: int, log_size: int) -> RemoteOffsetIndex:
    """Decode and check the ``.index`` object of segment ``[base_offset, last_offset]`` (``log_size`` bytes).

    Pure. Raises :class:`IndexInvalid` if an entry is out of range or the entries are not increasing.
    """
    data = _strip_padding(data, OFFSET_ENTRY.size)
    ints = _ints(data, "i")
    relative, positions = array("q", ints[0::2]), array("q", ints[1::2])
    limit = last_offset - base_offset
    previous_offset = previous_position = -1
    for rel, pos in zip(relative, positions, strict=True):
        if rel <= previous_offset or pos <= previous_position:
            raise IndexInvalid(f"entries are not increasing at relative offset {rel}")
        previous_offset, previous_position = rel, pos
    if relative and (relative[-1] > limit or positions[-1] >= log_size):
        raise IndexInvalid(
            f"last entry ({relative[-1]}, {positions[-1]}) points past the segment "
            f"({limit + 1} offsets, {log_size} bytes)"
        )
    offsets = array("q", (base_offset + rel for rel in relative))
    return RemoteOffsetIndex(base_offset, offsets, positions)


def decode_time_index(data: bytes, base_offset: int, last_offset: int) -> RemoteTimeIndex:
    """Decode and check a ``.timeindex`` object of the segment ``[base_offset, last_offset]``.

    Pure. Raises :class:`IndexInvalid` if an entry is out of range or the entries are not increasing.
    """
    data = _strip_padding(data, TIME_ENTRY.size)
    timestamps: array[int] = array("q")
    offsets: array[int] = array("q")
    limit = last_offset - base_offset
    previous_ts, previous_rel = -(2**63), 0
    for timestamp, rel in TIME_ENTRY.iter_unpack(data):
        if timestamp <= previous_ts or rel < previous_rel or rel > limit:
            raise IndexInvalid(f"entries not increasing or past the segment at timestamp {timestamp}")
        previous_ts, previous_rel = timestamp, rel
        timestamps.append(timestamp)
        offsets.append(base_offset + rel)
    return RemoteTimeIndex(base_offset, timestamps, offsets)
