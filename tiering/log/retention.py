"""Which sealed segments local retention deletes: a pure decision, applied by the partition log.

Kafka's rules: by time, a segment whose largest timestamp is more than ``retention.ms`` old; by size,
the oldest segments while the log stays at or above ``retention.bytes`` without them. Only a prefix of
the sealed segments is ever deleted (the log stays contiguous), so the walk stops at the first segment
that is kept, including one the remote tier vetoes because it is not uploaded yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tierlog.tiering.log.types import SegmentInfo

__all__ = ["deletable_prefix", "largest_timestamp"]


def deletable_prefix(
    sealed: Sequence[SegmentInfo],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    total_bytes: int,
    largest_timestamp: Callable[[SegmentInfo], int],
    veto: Callable[[SegmentInfo], bool] | None = None,
) -> int:
    """How many of the oldest ``sealed`` segments retention deletes (-1 limits mean unlimited).

    ``largest_timestamp`` gives a segment's age reference (its max timestamp, or the file's mtime when no
    batch has a timestamp, as Kafka does). Pure apart from calling ``veto`` and ``largest_timestamp``.
    """
    excess = total_bytes - retention_bytes if retention_bytes >= 0 else -1
    count = 0
    for info in sealed:
        by_time = retention_ms >= 0 and now_ms - largest_timestamp(info) > retention_ms
        by_size = retention_bytes >= 0 and excess - info.size_bytes >= 0
        if not (by_time or by_size):
            break
        if veto is not None and veto(info):
            break
        excess -= info.size_bytes
        count += 1
    return count


def largest_timestamp(info: SegmentInfo) -> int:
    """A segment's max timestamp, or its file's mtime (ms) when no batch carries one, as Kafka does."""
    if info.max_timestamp >= 0:
        return info.max_timestamp
    try:
        return info.log_path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return -1
