"""Finding what a fetch or a timestamp lookup returns, over the segment list, under the partition lock.

Only positions are computed here (index lookups and a few header ``pread`` calls); the caller reads the
data itself outside the lock.
"""

from __future__ import annotations

from bisect import bisect_right

from tierlog.tiering.log.segment import LogSegment

__all__ = ["locate", "first_at_or_after"]


def locate(
    segments: list[LogSegment], bases: list[int], offset: int, max_bytes: int, max_offset: int | None
) -> tuple[LogSegment, int, int]:
    """``(segment, start, end)``: the byte range of whole batches from the one holding ``offset``, at
    least one batch, otherwise within ``max_bytes``, base offsets below ``max_offset``; all in one
    segment. An empty range at the end of the active segment when nothing is there.

    The caller has checked ``offset`` against the log range. Not thread-safe (partition lock).

    Raises:
        CorruptRecordError: a batch header on the way does not parse.
        OSError: a read fails.
    """
    i = max(bisect_right(bases, offset) - 1, 0)
    while i < len(segments):
        seg = segments[i]
        found = seg.locate(offset)
        if found is not None:
            start, base, size = found
            return seg, start, seg.end_position(start, base, size, max(max_bytes, 0), max_offset)
        i += 1
    active = segments[-1]
    return active, active.size, active.size


def first_at_or_after(segments: list[LogSegment], timestamp: int, log_start: int) -> tuple[int, int] | None:
    """``(offset, max_timestamp)`` of the first batch at or after ``log_start`` whose max timestamp is
    >= ``timestamp`` (offset clamped to ``log_start``), or ``None``. Not thread-safe (partition lock).

    Raises:
        CorruptRecordError: a batch header does not parse.
        OSError: a read fails.
    """
    for seg in segments:
        if seg.next_offset <= log_start:
            continue
        seg.ensure_loaded()
        if seg.max_timestamp < timestamp:
            continue
        found = seg.find_timestamp(timestamp)
        if found is not None:
            return max(found[0], log_start), found[1]
    return None
