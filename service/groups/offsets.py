"""Committed offsets of consumer groups, kept in memory and persisted as a log of commit records.

The persisted form is the internal topic ``__consumer_offsets``, written through the same log engine as
every topic. Each commit is one record::

    key   = {"v": 1, "group": <group id>, "topic": <topic>, "partition": <int>}        (compact JSON, UTF-8)
    value = {"v": 1, "offset": <int>, "metadata": <str>, "commit_ms": <int>}        or null (a tombstone)

Replaying the topic from its start and keeping the last value per key (a null value deletes the key)
rebuilds the state, which is how the broker restores committed offsets on restart. The records of one
commit call are appended as one batch, so a commit is all or nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import CorruptRecordError

__all__ = [
    "CommittedOffset",
    "OffsetStore",
    "OffsetLog",
    "MemoryOffsetStore",
    "LogOffsetStore",
    "OFFSETS_TOPIC",
]

OFFSETS_TOPIC = "__consumer_offsets"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_ms: int


class OffsetStore(Protocol):
    async def commit(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]], now_ms: int
    ) -> None: ...

    async def delete(self, group_id: str, partitions: Sequence[TopicPartition]) -> None: ...

    def group_offsets(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]: ...

    def group_ids(self) -> list[str]: ...


class MemoryOffsetStore:
    """Committed offsets in memory only. Not thread-safe; use from one event loop."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    async def commit(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]], now_ms: int
    ) -> None:
        self.apply(group_id, {tp: CommittedOffset(o, m, now_ms) for tp, (o, m) in offsets.items()})

    async def delete(self, group_id: str, partitions: Sequence[TopicPartition]) -> None:
        self.apply(group_id, dict.fromkeys(partitions))

    def apply(self, group_id: str, changes: Mapping[TopicPartition, CommittedOffset | None]) -> None:
        """Set (or, for ``None``, remove) offsets. Idempotent."""
        group = self._groups.setdefault(group_id, {})
        for tp, committed in changes.items():
            if committed is None:
                group.pop(tp, None)
            else:
                group[tp] = committed
        if not group:
            del self._groups[group_id]

    def group_offsets(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group_id, {}))

    def group_ids(self) -> list[str]:
        return sorted(self._groups)


def encode_commit(
    group_id: str, tp: TopicPartition, committed: CommittedOffset | None, now_ms: int
) -> Record:
    key = json.dumps({"v": 1, "group": group_id, "topic": tp[0], "partition": tp[1]}, separators=(",", ":"))
    value = None
    if committed is not None:
        value = json.dumps(
            {
                "v": 1,
                "offset": committed.offset,
                "metadata": committed.metadata,
                "commit_ms": committed.commit_ms,
            },
            separators=(",", ":"),
        ).encode()
    return Record(key=key.encode(), value=value, timestamp=now_ms)


def decode_commit(record: Record) -> tuple[str, TopicPartition, CommittedOffset | None]:
    """Decode one commit record.

    Raises:
        CorruptRecordError: the key or value is not a commit record of a known version.
    """
    try:
        if record.key is None:
            raise ValueError("no key")
        key = json.loads(record.key)
        if key.get("v") != 1:
            raise ValueError(f"unknown key version {key.get('v')!r}")
        tp = (str(key["topic"]), int(key["partition"]))
        group_id = str(key["group"])
        if record.value is None:
            return group_id, tp, None
        value = json.loads(record.value)
        if value.get("v") != 1:
            raise ValueError(f"unknown value version {value.get('v')!r}")
        committed = CommittedOffset(int(value["offset"]), str(value["metadata"]), int(value["commit_ms"]))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptRecordError(
            f"malformed record in {OFFSETS_TOPIC} at offset {record.offset}: {err}"
        ) from err
    return group_id, tp, committed


class OffsetLog(Protocol):
    """The ``__consumer_offsets`` partition as the store uses it."""

    async def append(self, batch: bytes) -> int:
        """Append one batch; returns its base offset."""
        ...

    async def roll(self) -> None:
        """Seal the active segment."""
        ...

    async def drop_before(self, offset: int) -> None:
        """Delete every whole segment below ``offset``."""
        ...

    async def end_offset(self) -> int: ...


class LogOffsetStore(MemoryOffsetStore):
    """Committed offsets persisted to ``__consumer_offsets`` (one batch per commit call) through ``log``.

    The in-memory state changes only after the append succeeded, so a failed write loses nothing that was
    acknowledged.

    **Compaction.** The engine only deletes whole segments, so the store compacts by snapshot: once the
    bytes written since the last snapshot exceed ``compact_after_bytes`` (and twice the last snapshot), it
    appends every live entry again as a snapshot, then drops the segments wholly before the snapshot's first
    offset (the log is rolled first, so the snapshot starts a segment of its own and everything older can
    go). Replaying from the log start still yields exactly the live state: every key that was live before
    the snapshot is in it, and later commits follow it. Writes and compaction are serialised by one lock, so
    no commit can land between the snapshot's reading of the state and its append.

    Use from one event loop.
    """

    SNAPSHOT_BATCH = 500

    def __init__(
        self, log: OffsetLog, clock_ms: Callable[[], int], *, compact_after_bytes: int = 16 * 2**20
    ) -> None:
        super().__init__()
        self._log = log
        self._clock_ms = clock_ms
        self._compact_after = compact_after_bytes
        self._written = 0
        self._snapshot_bytes = 0
        self._lock = asyncio.Lock()

    @property
    def bytes_since_snapshot(self) -> int:
        return self._written

    def replay(self, batches: Iterable[bytes]) -> int:
        """Rebuild the state from the topic's raw batches, oldest first. Returns the records applied.

        Raises:
            CorruptRecordError: a batch or a record is corrupt.
        """
        applied = 0
        for chunk in batches:
            self._written += len(chunk)
            for _, record in iter_records(chunk):
                group_id, tp, committed = decode_commit(record)
                self.apply(group_id, {tp: committed})
                applied += 1
        return applied

    async def commit(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]], now_ms: int
    ) -> None:
        changes = {tp: CommittedOffset(o, m, now_ms) for tp, (o, m) in offsets.items()}
        await self._write(group_id, changes)

    async def delete(self, group_id: str, partitions: Sequence[TopicPartition]) -> None:
        await self._write(group_id, dict.fromkeys(partitions))

    async def _write(self, group_id: str, changes: Mapping[TopicPartition, CommittedOffset | None]) -> None:
        if not changes:
            return
        now = self._clock_ms()
        records = [encode_commit(group_id, tp, c, now) for tp, c in changes.items()]
        batch = build_batch(records, now_ms=now)
        async with self._lock:
            await self._log.append(batch)
            self._written += len(batch)
            self.apply(group_id, changes)

    async def maybe_compact(self) -> bool:
        """Compact if enough was written since the last snapshot. Returns whether it compacted.

        Idempotent; safe to call concurrently with commits. Raises what ``append`` / ``drop_before`` raise.
        """
        if self._written < max(self._compact_after, 2 * self._snapshot_bytes):
            return False
        async with self._lock:
            await self._log.roll()
            now = self._clock_ms()
            live = [
                encode_commit(group_id, tp, committed, now)
                for group_id in self.group_ids()
                for tp, committed in sorted(self.group_offsets(group_id).items())
            ]
            first = -1
            size = 0
            for i in range(0, len(live), self.SNAPSHOT_BATCH):
                batch = build_batch(live[i : i + self.SNAPSHOT_BATCH], now_ms=now)
                base = await self._log.append(batch)
                first = base if first < 0 else first
                size += len(batch)
            self._written = 0
            self._snapshot_bytes = size
            await self._log.drop_before(first if first >= 0 else await self._log.end_offset())
        return True
