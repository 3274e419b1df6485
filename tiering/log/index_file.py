"""What the offset index and the time index share: a preallocated file of fixed-size big-endian entries,
mirrored in memory as two parallel arrays (keys, values) searched with :mod:`bisect`.

Lifecycle, as Kafka's ``AbstractIndex``:

* an *active* index (the active segment's) is preallocated to ``segment.index.bytes`` rounded down to a
  whole number of entries, zero filled (a sparse file), and every entry is written through to the file as
  it is appended; the entries live in memory;
* *sealing* (segment roll or close) trims the file to its real size and closes its descriptor;
* a *sealed* index is read from its file lazily, on first use, and validated: trailing all-zero entries
  are preallocation padding and are dropped; anything else that is not strictly increasing or that points
  past the log raises :class:`IndexCorruptError` and the caller rebuilds the index from the log.

Not thread-safe: the owning segment serialises access under its partition lock.
"""

from __future__ import annotations

import abc
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path
from typing import ClassVar

from tierlog.wire.errors import CorruptRecordError

__all__ = ["IndexCorruptError", "SparseIndex"]


class IndexCorruptError(CorruptRecordError):
    """An index file is inconsistent with itself or its log. Indexes are derived: rebuild it."""


class SparseIndex(abc.ABC):
    """Base of :class:`.offset_index.OffsetIndex` and :class:`.time_index.TimeIndex`."""

    ENTRY: ClassVar[struct.Struct]
    KIND: ClassVar[str] = "index"

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_bytes = max_index_bytes
        self.max_entries = max_index_bytes // self.ENTRY.size
        self.keys: array[int] = array("q")
        self.values: array[int] = array("q")
        self.loaded = False
        self.write_through = True
        self._fd: int | None = None

    # ----------------------------------------------------------------- encoding
    @classmethod
    def decode(cls, data: bytes) -> tuple[array[int], array[int]]:
        """Parse whole entries from ``data`` (a trailing partial entry is ignored). Pure."""
        keys: array[int] = array("q")
        values: array[int] = array("q")
        usable = len(data) - len(data) % cls.ENTRY.size
        for key, value in cls.ENTRY.iter_unpack(memoryview(data)[:usable]):
            keys.append(key)
            values.append(value)
        return keys, values

    def encode(self, start: int = 0, end: int | None = None) -> bytes:
        """The file bytes of entries ``[start, end)``. Pure."""
        pack = self.ENTRY.pack
        stop = len(self.keys) if end is None else end
        return b"".join(pack(self.keys[i], self.values[i]) for i in range(start, stop))

    # --------------------------------------------------------------- validation
    @abc.abstractmethod
    def check_entries(self, keys: array[int], values: array[int], limit_key: int, limit_value: int) -> None:
        """Raise :class:`IndexCorruptError` unless the entries are well-formed for this kind and log."""

    def _strip_padding(self, keys: array[int], values: array[int]) -> int:
        count = len(keys)
        while count and keys[count - 1] == 0 and values[count - 1] == 0:
            count -= 1
        return count

    # ---------------------------------------------------------------- lifecycle
    @property
    def active(self) -> bool:
        return self._fd is not None

    def create(self) -> None:
        """Create (or empty) the file, preallocated and zero filled, and make this index active.

        Raises:
            OSError: the file cannot be created or sized.
        """
        self.close()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self._fd, self.max_entries * self.ENTRY.size)
        self.keys = array("q")
        self.values = array("q")
        self.loaded = True

    def load(self, *, limit_key: int, limit_value: int) -> None:
        """Read and validate the file; entries must be below ``limit_key`` / ``limit_value``. Trailing
        zero padding is dropped and trimmed from the file. Idempotent.

        Raises:
            IndexCorruptError: the file is missing, of a wrong size, or inconsistent.
        """
        if self.loaded:
            return
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise IndexCorruptError(f"{self.KIND} file {self.path.name} is missing") from None
        if len(data) % self.ENTRY.size:
            raise IndexCorruptError(f"{self.KIND} file {self.path.name} has a partial entry")
        keys, values = self.decode(data)
        count = self._strip_padding(keys, values)
        del keys[count:]
        del values[count:]
        self.check_entries(keys, values, limit_key, limit_value)
        if count * self.ENTRY.size != len(data):
            os.truncate(self.path, count * self.ENTRY.size)
        self.keys, self.values = keys, values
        self.loaded = True

    def open_active(self) -> None:
        """Make a loaded index writable again: preallocate its file and keep a descriptor. Idempotent.

        Raises:
            OSError: the file cannot be opened or sized.
        """
        if self._fd is not None:
            return
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = len(self.keys) * self.ENTRY.size
        os.ftruncate(self._fd, size)
        os.ftruncate(self._fd, max(self.max_entries * self.ENTRY.size, size))

    def write_all(self) -> None:
        """Write every in-memory entry to the open file at once (after appends with ``write_through`` off).

        Raises:
            OSError: the write fails.
        """
        if self._fd is not None and self.keys:
            os.pwrite(self._fd, self.encode(), 0)

    def seal(self) -> None:
        """Trim the file to its entries and close it for writing. Idempotent.

        Raises:
            OSError: the file cannot be trimmed.
        """
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, len(self.keys) * self.ENTRY.size)
        finally:
            os.close(fd)

    close = seal

    def fsync(self) -> None:
        """fsync the file if it is open for writing. Idempotent."""
        if self._fd is not None:
            os.fsync(self._fd)

    def unload(self) -> None:
        """Forget the in-memory entries of a sealed index (they are re-read on next use)."""
        if self._fd is None:
            self.keys = array("q")
            self.values = array("q")
            self.loaded = False

    # ------------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def append_entry(self, key: int, value: int) -> None:
        """Append one entry and write it through to the file.

        Raises:
            OSError: the write fails.
        """
        position = len(self.keys) * self.ENTRY.size
        if self._fd is not None and self.write_through:
            os.pwrite(self._fd, self.ENTRY.pack(key, value), position)
        self.keys.append(key)
        self.values.append(value)

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries, zeroing the dropped ones in the file. Idempotent.

        Raises:
            OSError: the write fails.
        """
        dropped = len(self.keys) - count
        if dropped <= 0:
            return
        if self._fd is not None:
            os.pwrite(self._fd, bytes(dropped * self.ENTRY.size), count * self.ENTRY.size)
        elif self.path.exists():
            os.truncate(self.path, count * self.ENTRY.size)
        del self.keys[count:]
        del self.values[count:]

    def floor(self, key: int) -> int:
        """Index of the largest entry whose key is <= ``key``, or -1. Pure."""
        return bisect_right(self.keys, key) - 1
