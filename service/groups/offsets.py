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

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tiering.codec.batch import build_batch, iter_records
from tiering.codec.records import Record
from tiering.errors import CorruptRecordError

__all__ = ["CommittedOffset", "OffsetStore", "MemoryOffsetStore", "LogOffsetStore", "OFFSETS_TOPIC"]

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


class LogOffsetStore(MemoryOffsetStore):
    """Committed offsets persisted to ``__consumer_offsets`` through ``append`` (one batch per call).

    The in-memory state changes only after the append succeeded, so a failed write loses nothing that was
    acknowledged. Use from one event loop.
    """

    def __init__(self, append: Callable[[bytes], Awaitable[object]], clock_ms: Callable[[], int]) -> None:
        super().__init__()
        self._append = append
        self._clock_ms = clock_ms

    def replay(self, batches: Iterable[bytes]) -> int:
        """Rebuild the state from the topic's raw batches, oldest first. Returns the records applied.

        Raises:
            CorruptRecordError: a batch or a record is corrupt.
        """
        applied = 0
        for chunk in batches:
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
        await self._append(build_batch(records, now_ms=now))
        self.apply(group_id, changes)
