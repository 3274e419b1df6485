"""What a partition's remote tier does next, decided from snapshots: which sealed segments go up together,
which leader epochs a segment carries, which remote segments whole-log retention deletes.

Pure functions of their arguments (the epoch lookup only reads the log's epoch cache);
:class:`~tierlog.tiering.remote.remote_log.RemoteLog` calls them under its lock and carries them out.
"""

from __future__ import annotations

from tierlog.tiering.log import PartitionLog, SegmentInfo
from tierlog.tiering.remote import manifest as mf

__all__ = ["remote_retention_plan", "segment_epochs", "upload_batches"]


def upload_batches(
    sealed: list[SegmentInfo], *, done: int | None, limit: int, max_bytes: int, max_segments: int
) -> list[list[SegmentInfo]]:
    """The ``sealed`` segments past ``done`` (the remote next offset; None: nothing remote yet), oldest
    first, in batches of consecutive segments of at most ``max_bytes`` together (a larger segment goes
    alone) and ``max_segments``. Planning stops at the first segment that ends past ``limit``. A segment
    straddling ``done`` goes alone: it is uploaded as a trimmed copy (:mod:`.trim`). Empty segments are
    skipped.
    """
    batches: list[list[SegmentInfo]] = []
    size = 0
    for info in sealed:
        if info.size_bytes == 0 or (done is not None and info.next_offset <= done):
            continue
        if info.next_offset > limit:
            break
        if done is not None and info.base_offset < done:
            batches.append([info])  # straddles the remote end: uploaded trimmed, alone
            size = max_bytes  # nothing joins it
            continue
        current = batches[-1] if batches else None
        if current is None or size + info.size_bytes > max_bytes or len(current) >= max_segments:
            batches.append([info])
            size = info.size_bytes
        else:
            current.append(info)
            size += info.size_bytes
    return batches


def segment_epochs(log: PartitionLog, base: int, last: int) -> tuple[tuple[int, int], ...]:
    """The leader epochs of offsets ``[base, last]`` from ``log``'s epoch cache, as
    ``RemoteSegment.leader_epochs`` (the epoch in force at ``base`` starting there); () without a cache."""
    cache = getattr(log, "epochs", None)
    if cache is None:
        return ()
    entries = list(cache.entries())
    found: list[tuple[int, int]] = []
    for index, entry in enumerate(entries):
        end = entries[index + 1].start_offset - 1 if index + 1 < len(entries) else None
        if (end is not None and end < base) or entry.start_offset > last:
            continue
        found.append((entry.epoch, max(entry.start_offset, base)))
    return tuple(found)


def remote_retention_plan(
    readable: tuple[mf.RemoteSegment, ...],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    local_only_bytes: int,
) -> list[mf.RemoteSegment]:
    """The oldest readable remote segments whole-log retention deletes (-1 limits mean unlimited).

    By time: a segment whose max timestamp (its creation time when it has none) is more than
    ``retention_ms`` old. By size: the oldest while remote bytes plus ``local_only_bytes`` (local data
    not in the remote tier) stay at or above ``retention_bytes`` without them. A prefix only. Pure.
    """
    total = sum(s.size_bytes for s in readable) + local_only_bytes
    doomed: list[mf.RemoteSegment] = []
    for segment in readable:
        reference = segment.max_timestamp if segment.max_timestamp >= 0 else segment.created_ms
        by_time = retention_ms >= 0 and now_ms - reference > retention_ms
        by_size = retention_bytes >= 0 and total - segment.size_bytes >= retention_bytes
        if not (by_time or by_size):
            break
        total -= segment.size_bytes
        doomed.append(segment)
    return doomed
