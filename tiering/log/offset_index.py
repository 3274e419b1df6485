"""The sparse offset index of one segment (``<base>.index``), Kafka's layout byte for byte.

Each entry maps the last offset of a batch to the file position where that batch starts::

    0   relative_offset   int32 big-endian   batch last offset - segment base offset
    4   position          int32 big-endian   byte position of the batch in the .log file

Entries are strictly increasing in both fields. One is added before a batch when more than
``index.interval.bytes`` have been written since the previous entry, so a lookup lands at most about
that many bytes before the batch holding the target offset.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from typing import ClassVar

from tierlog.tiering.log.index_file import IndexCorruptError, SparseIndex

__all__ = ["OffsetIndex", "ENTRY", "ENTRY_SIZE"]

ENTRY = struct.Struct(
    ">"
    "i"  # relative_offset: batch last offset - base offset
    "i"  # position: where the batch starts in the .log file
)
ENTRY_SIZE = ENTRY.size


class OffsetIndex(SparseIndex):
    """Offset -> file position, searched in memory. Not thread-safe (the partition lock guards it)."""

    ENTRY: ClassVar[struct.Struct] = ENTRY
    KIND: ClassVar[str] = "offset index"

    @classmethod
    def decode(cls, data: bytes) -> tuple[array[int], array[int]]:
        ints: array[int] = array("i")
        ints.frombytes(data[: len(data) - len(data) % ENTRY_SIZE])
        if struct.pack("=i", 1) != struct.pack(">i", 1):
            ints.byteswap()
        return array("q", ints[0::2]), array("q", ints[1::2])

    def check_entries(self, keys: array[int], values: array[int], limit_key: int, limit_value: int) -> None:
        """Relative offsets and positions strictly increasing, below ``limit_key`` / ``limit_value``.

        Raises:
            IndexCorruptError: otherwise.
        """
        previous_key = previous_value = -1
        for key, value in zip(keys, values, strict=True):
            if key <= previous_key or value <= previous_value:
                raise IndexCorruptError(f"{self.path.name}: entries are not increasing at offset {key}")
            previous_key, previous_value = key, value
        if keys and (keys[-1] >= limit_key or values[-1] >= limit_value):
            raise IndexCorruptError(
                f"{self.path.name}: last entry ({keys[-1]}, {values[-1]}) points past the log "
                f"({limit_key} offsets, {limit_value} bytes)"
            )

    def append(self, offset: int, position: int) -> None:
        """Index the batch whose last offset is ``offset`` starting at ``position``.

        Raises:
            OSError: the write-through fails.
        """
        self.append_entry(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset <= ``offset``; ``(base, 0)`` if none."""
        i = self.floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.keys[i], self.values[i]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position that is <= ``position``, or 0."""
        i = bisect_right(self.values, position) - 1
        return self.values[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries of batches starting at or after ``position``.

        Raises:
            OSError: the write-through fails.
        """
        self.truncate_entries(bisect_right(self.values, position - 1))

    @property
    def last_position(self) -> int:
        """Position of the last indexed batch, or 0."""
        return self.values[-1] if self.values else 0
