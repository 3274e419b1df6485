"""Walking the record batches of a segment file: the CRC-checking scan recovery uses, and header reads.

Only the 61-byte batch header is ever parsed (:mod:`tierlog.tiering.codec.header`); records stay opaque bytes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from tierlog.tiering.codec.header import HEADER_SIZE, BatchHeader, decode_header, verify_batch
from tierlog.wire.errors import CorruptRecordError

__all__ = ["INT32_MAX", "read_header", "read_span", "scan_batches"]

INT32_MAX = 2**31 - 1
_CHUNK = 4 << 20
_SPAN = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length
    "4x"  # partition_leader_epoch
    "b"  # magic
    "6x"  # crc, attributes
    "i"  # last_offset_delta
)
_MIN_BATCH_LENGTH = HEADER_SIZE - 12


def read_span(fd: int, position: int) -> tuple[int, int, int]:
    """``(base_offset, size, last_offset)`` of the batch at ``position``: the 27 header bytes a walk
    needs, without building a full header. Thread-safe (pread).

    Raises:
        CorruptRecordError: the bytes there cannot start a v2 batch.
        OSError: the read fails.
    """
    raw = os.pread(fd, _SPAN.size, position)
    if len(raw) < _SPAN.size:
        raise CorruptRecordError(f"truncated batch header at position {position}")
    base, length, magic, delta = _SPAN.unpack(raw)
    if magic != 2 or length < _MIN_BATCH_LENGTH or delta < 0:
        raise CorruptRecordError(f"not a v2 record batch at position {position}")
    return base, length + 12, base + delta


def read_header(fd: int, position: int) -> BatchHeader:
    """Decode the batch header at ``position`` of the file ``fd`` (no CRC check). Thread-safe (pread).

    Raises:
        CorruptRecordError: fewer than 61 bytes there, or an impossible header.
        OSError: the read fails.
    """
    return decode_header(os.pread(fd, HEADER_SIZE, position))


def scan_batches(
    fd: int,
    *,
    base_offset: int,
    start: int = 0,
    end: int | None = None,
    next_offset: int | None = None,
    verify: bool = True,
    chunk_size: int = _CHUNK,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for the valid batches of a segment file from ``start`` up to ``end``.

    Stops silently at the first batch that is truncated, malformed, fails its CRC (with ``verify``), has
    a base offset below ``next_offset`` (the previous batch's next offset) or below the segment's
    ``base_offset``, or whose offset does not fit the index's int32 relative offsets. The caller compares
    the end of the last yielded batch with the file size to detect a torn or corrupt tail.

    Reads the file in chunks of ``chunk_size`` (whole batches when larger). Thread-safe (pread only).

    Raises:
        OSError: a read fails.
    """
    limit = os.fstat(fd).st_size if end is None else end
    expected = base_offset if next_offset is None else next_offset
    buf = b""
    buf_start = start
    pos = start
    while pos < limit:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            buf, buf_start, rel = _refill(fd, buf, buf_start, rel, HEADER_SIZE, chunk_size, limit)
            if len(buf) - rel < HEADER_SIZE:
                return
        try:
            header = decode_header(buf, rel)
        except CorruptRecordError:
            return
        size = header.size
        if pos + size > limit:
            return
        if len(buf) - rel < size:
            buf, buf_start, rel = _refill(fd, buf, buf_start, rel, size, chunk_size, limit)
            if len(buf) - rel < size:
                return
        if verify:
            try:
                verify_batch(buf, rel)
            except CorruptRecordError:
                return
        if (
            header.base_offset < expected
            or header.last_offset - base_offset > INT32_MAX
            or header.base_offset < base_offset
        ):
            return
        yield pos, header
        expected = header.next_offset
        pos += size


def _refill(
    fd: int, buf: bytes, buf_start: int, rel: int, need: int, chunk_size: int, limit: int
) -> tuple[bytes, int, int]:
    """Keep ``buf[rel:]`` and read more so that at least ``need`` bytes (or up to ``limit``) are held."""
    kept = buf[rel:]
    new_start = buf_start + rel
    want = min(max(need, chunk_size) - len(kept), limit - new_start - len(kept))
    if want > 0:
        kept += os.pread(fd, want, new_start + len(kept))
    return kept, new_start, 0
