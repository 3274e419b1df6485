"""Consumer lag: how far each committed offset is behind its partition's log end."""

from __future__ import annotations

import inspect
from typing import Any

from tierlog.service.groups.consumers import PartitionReader
from tierlog.service.groups.coordination import Coordination

__all__ = ["group_lag"]


async def group_lag(
    coordinator: Coordination, reader: PartitionReader, group_id: str
) -> list[dict[str, Any]]:
    """Per partition with a committed offset or an owner: committed offset, log end offset and lag.

    A partition without a committed offset reports ``committed_offset`` -1 and lag from the log start.
    Topics deleted since the commit are left out. Pure apart from reading watermarks; never raises for
    a missing topic.
    """
    owners: dict[tuple[str, int], str] = {}
    for member in coordinator.describe(group_id).members:
        for tp in member.assignment:
            owners[tp] = member.member_id
    committed = coordinator.committed(group_id)
    counts = reader.partition_counts()
    rows = []
    for tp in sorted(set(owners) | set(committed)):
        if tp[1] >= counts.get(tp[0], 0):
            continue
        bounds = reader.log_bounds(*tp)
        start, end = await bounds if inspect.isawaitable(bounds) else bounds
        offset = committed[tp].offset if tp in committed else -1
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": offset,
                "log_end_offset": end,
                "lag": max(0, end - (offset if offset >= 0 else start)),
                "member_id": owners.get(tp, ""),
            }
        )
    return rows
