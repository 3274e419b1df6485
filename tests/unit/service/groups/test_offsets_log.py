"""Committed offsets on a real partition log: persistence, replay and snapshot compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tierlog.service.groups.offsets import LogOffsetStore
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog


class RealOffsetLog:
    """The store's OffsetLog over a real PartitionLog (the broker's adapter does the same via a Partition)."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    async def append(self, batch: bytes) -> int:
        return (await asyncio.to_thread(self.log.append, batch)).base_offset

    async def roll(self) -> None:
        await asyncio.to_thread(self.log.roll)

    async def drop_before(self, offset: int) -> None:
        await asyncio.to_thread(
            self.log.apply_retention, lambda s: s.next_offset > offset, retention_ms=-1, retention_bytes=0
        )

    async def end_offset(self) -> int:
        return self.log.log_end_offset


def replayed(path: Path, clock: ManualClock) -> LogOffsetStore:
    log = PartitionLog.open(path, LogConfig(segment_bytes=4096, retention_ms=-1), clock=clock)
    store = LogOffsetStore(RealOffsetLog(log), clock.now_ms)
    chunks = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        chunks.append(data)
        for _, header in iter_batches(data):
            offset = header.next_offset
    store.replay(chunks)
    log.close()
    return store


async def test_commits_survive_replay_and_compaction_drops_old_segments(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    path = tmp_path / "__consumer_offsets-0"
    log = PartitionLog.open(path, LogConfig(segment_bytes=4096, retention_ms=-1), clock=clock)
    store = LogOffsetStore(RealOffsetLog(log), clock.now_ms, compact_after_bytes=8192)
    for i in range(200):
        await store.commit("g", {("t", i % 3): (i, f"m{i}")}, clock.now_ms())
    await store.commit("other", {("t", 0): (7, "")}, clock.now_ms())
    await store.delete("g", [("t", 2)])
    expected = {g: dict(store.group_offsets(g)) for g in store.group_ids()}
    segments_before = len(log.segments())
    assert segments_before > 3
    assert await store.maybe_compact()
    assert not await store.maybe_compact()  # nothing written since the snapshot
    assert len(log.segments()) < segments_before
    assert log.log_start_offset > 0
    log.close()
    restored = replayed(path, clock)
    assert {g: dict(restored.group_offsets(g)) for g in restored.group_ids()} == expected
    assert restored.group_offsets("g")[("t", 1)].offset == 199
    assert ("t", 2) not in restored.group_offsets("g")


async def test_commits_after_a_snapshot_win_on_replay(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    path = tmp_path / "__consumer_offsets-0"
    log = PartitionLog.open(path, LogConfig(segment_bytes=4096, retention_ms=-1), clock=clock)
    store = LogOffsetStore(RealOffsetLog(log), clock.now_ms, compact_after_bytes=1)
    await store.commit("g", {("t", 0): (1, "")}, clock.now_ms())
    assert await store.maybe_compact()
    await store.commit("g", {("t", 0): (2, "")}, clock.now_ms())
    log.close()
    assert replayed(path, clock).group_offsets("g")[("t", 0)].offset == 2
