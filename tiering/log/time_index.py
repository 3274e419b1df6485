"""The sparse time index of one segment (``<base>.timeindex``), Kafka's layout byte for byte.

Each entry records the largest timestamp seen so far in the segment and the offset of the batch that
carried it::

    0   timestamp         int64 big-endian   max timestamp so far (ms)
    8   relative_offset   int32 big-endian   last offset of that batch - segment base offset

As Kafka does, an entry is added only at offset-index points and only when the max timestamp has grown,
so timestamps are strictly increasing; when the segment is sealed one last entry records the segment's
max timestamp. The last slot is kept for that final entry (the index counts as full one entry early).
"""

from __future__ import annotations

import struct
from array import array
from typing import ClassVar

from tierlog.tiering.log.index_file import IndexCorruptError, SparseIndex

__all__ = ["TimeIndex", "ENTRY", "ENTRY_SIZE"]

ENTRY = struct.Struct(
    ">"
    "q"  # timestamp: largest timestamp so far
    "i"  # relative_offset: offset of the batch carrying it - base offset
)
ENTRY_SIZE = ENTRY.size


class TimeIndex(SparseIndex):
    """Timestamp -> offset, searched in memory. Not thread-safe (the partition lock guards it)."""

    ENTRY: ClassVar[struct.Struct] = ENTRY
    KIND: ClassVar[str] = "time index"

    def check_entries(self, keys: array[int], values: array[int], limit_key: int, limit_value: int) -> None:
        """Timestamps strictly increasing, offsets non-decreasing and below ``limit_value``.

        Raises:
            IndexCorruptError: otherwise.
        """
        previous_key = previous_value = -(2**63)
        for key, value in zip(keys, values, strict=True):
            if key <= previous_key or value < previous_value or value < 0:
                raise IndexCorruptError(f"{self.path.name}: entries are not increasing at timestamp {key}")
            previous_key, previous_value = key, value
        if values and values[-1] >= limit_value:
            raise IndexCorruptError(
                f"{self.path.name}: last entry points past the log ({limit_value} offsets)"
            )

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` exceeds the last entry's (and a slot is free).

        ``final`` may use the slot kept for the entry written when the segment is sealed.

        Raises:
            OSError: the write-through fails.
        """
        if timestamp < 0 or (self.keys and timestamp <= self.keys[-1]):
            return
        if len(self.keys) >= (self.max_entries if final else self.max_entries - 1):
            return
        self.append_entry(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= ``timestamp``, or ``(-1, base)``."""
        i = self.floor(timestamp)
        if i < 0:
            return -1, self.base_offset
        return self.keys[i], self.base_offset + self.values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries pointing at ``offset`` or later.

        Raises:
            OSError: the write-through fails.
        """
        keep = len(self.values)
        relative = offset - self.base_offset
        while keep and self.values[keep - 1] >= relative:
            keep -= 1
        self.truncate_entries(keep)

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base)``."""
        if not self.keys:
            return -1, self.base_offset
        return self.keys[-1], self.base_offset + self.values[-1]
