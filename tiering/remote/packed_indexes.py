"""The packed index object: a remote segment's offset index and time index in one ``.indexes`` object, so
an upload costs one small request per segment instead of two. Pure: no I/O, nothing async (Spark
executors import it).

Layout (all integers big-endian)::

    offset  size  field
    0       4     magic ``TLIX``
    4       4     format, 1
    8       4     O: bytes of the offset index
    12      4     T: bytes of the time index
    16      O     the offset index, byte for byte as the local ``.index`` file (8-byte entries)
    16+O    T     the time index, byte for byte as the local ``.timeindex`` file (12-byte entries)

The manifest entry records ``[O, T]`` too (``RemoteSegment.indexes``), so a reader fetches either index
with one ranged GET and never needs the header; the header makes the object readable on its own
(manifest recovery re-derives an entry's sizes from it). Indexes carry no checksum, here as in the local
files: the reader validates their entries against the manifest and the log, and scans the segment if
they fail.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.manifest import RemoteSegment
from tierlog.wire.errors import CorruptRecordError

__all__ = [
    "MAGIC",
    "FORMAT",
    "HEADER_SIZE",
    "pack",
    "unpack_header",
    "unpack",
    "IndexRef",
    "index_refs",
    "segment_index_refs",
]

MAGIC = b"TLIX"
FORMAT = 1
_HEADER = struct.Struct(">4sIII")  # magic, format, offset index bytes (O), time index bytes (T)
HEADER_SIZE = _HEADER.size


def pack(offset_index: bytes, time_index: bytes) -> bytes:
    """The ``.indexes`` object holding both indexes. Pure."""
    return _HEADER.pack(MAGIC, FORMAT, len(offset_index), len(time_index)) + offset_index + time_index


def unpack_header(data: bytes) -> tuple[int, int]:
    """``(offset index bytes, time index bytes)`` from the object's first :data:`HEADER_SIZE` bytes.

    Raises:
        CorruptRecordError: too short, another magic or an unknown format.
    """
    if len(data) < HEADER_SIZE:
        raise CorruptRecordError(f"packed index object is {len(data)} bytes, shorter than its header")
    magic, fmt, offset_bytes, time_bytes = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptRecordError(f"packed index object starts with {magic!r}, not {MAGIC!r}")
    if fmt != FORMAT:
        raise CorruptRecordError(f"packed index object format {fmt} is not supported (this reader knows 1)")
    return offset_bytes, time_bytes


def unpack(data: bytes) -> tuple[bytes, bytes]:
    """The offset index and the time index of a whole ``.indexes`` object. Pure.

    Raises:
        CorruptRecordError: a bad header, or a length that disagrees with it.
    """
    offset_bytes, time_bytes = unpack_header(data)
    expected = HEADER_SIZE + offset_bytes + time_bytes
    if len(data) != expected:
        raise CorruptRecordError(f"packed index object is {len(data)} bytes; its header says {expected}")
    middle = HEADER_SIZE + offset_bytes
    return data[HEADER_SIZE:middle], data[middle:]


@dataclass(frozen=True, slots=True)
class IndexRef:
    """Where one index of a segment is: bytes ``[start, end)`` of ``object_key`` (``end`` None: to the
    object's end). ``cache_key`` names this index alone (two refs may share one object)."""

    cache_key: str
    object_key: str
    start: int = 0
    end: int | None = None

    @property
    def empty(self) -> bool:
        """Whether the ref is known to hold no bytes (no request needed)."""
        return self.end is not None and self.end <= self.start


def index_refs(
    topic: str, partition: int, base_offset: int, segment_uuid: uuid.UUID, indexes: tuple[int, int] | None
) -> tuple[IndexRef, IndexRef]:
    """``(offset index, time index)`` of a segment whose manifest entry has ``indexes`` (see
    ``RemoteSegment.indexes``): ranges of its ``.indexes`` object, or its older separate objects. Pure."""
    keys = segment_keys(topic, partition, base_offset, segment_uuid)
    if indexes is None:
        return IndexRef(keys["index"], keys["index"]), IndexRef(keys["timeindex"], keys["timeindex"])
    offset_bytes, time_bytes = indexes
    key, middle = keys["indexes"], HEADER_SIZE + offset_bytes
    return (
        IndexRef(f"{key}#offset", key, HEADER_SIZE, middle),
        IndexRef(f"{key}#time", key, middle, middle + time_bytes),
    )


def segment_index_refs(topic: str, partition: int, segment: RemoteSegment) -> tuple[IndexRef, IndexRef]:
    """:func:`index_refs` of a manifest entry."""
    return index_refs(topic, partition, segment.base_offset, segment.segment_uuid, segment.indexes)
