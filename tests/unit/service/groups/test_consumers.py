"""REST consumer instances over an in-memory partition reader (pure logic; the real server is tested in
tests/integration/groups)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from tierlog.service.groups.consumer_config import ConsumerSettings
from tierlog.service.groups.consumers import ConsumerManager
from tierlog.service.groups.coordinator import GroupCoordinator
from tierlog.service.groups.offsets import MemoryOffsetStore
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import ConflictError, InvalidRequestError, NotFoundError, OffsetOutOfRangeError


class Clock:
    def __init__(self) -> None:
        self.now = 5_000_000

    def now_ms(self) -> int:
        return self.now


@dataclass
class Read:
    data: bytes
    high_watermark: int
    log_start_offset: int


class MemoryPartitions:
    """Batches per partition in memory, with long-poll wake-up on append."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.batches: dict[tuple[str, int], list[tuple[int, int, bytes]]] = {}
        self.appended = asyncio.Condition()

    def partition_counts(self) -> Mapping[str, int]:
        return dict(self.counts)

    def end(self, topic: str, partition: int) -> int:
        batches = self.batches.get((topic, partition), [])
        return batches[-1][1] if batches else 0

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, self.end(topic, partition)

    async def append(self, topic: str, partition: int, values: list[bytes]) -> None:
        base = self.end(topic, partition)
        batch = build_batch([Record(key=None, value=v) for v in values], base_offset=base)
        self.batches.setdefault((topic, partition), []).append((base, base + len(values), batch))
        async with self.appended:
            self.appended.notify_all()

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp`` (Kafka's ListOffsets), or None."""
        for _, _, batch in self.batches.get((topic, partition), []):
            for _, record in iter_records(batch):
                if record.timestamp >= timestamp:
                    return record.offset
        return None

    async def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> Read:
        end = self.end(topic, partition)
        if offset > end:
            raise OffsetOutOfRangeError("out of range", log_start_offset=0, log_end_offset=end)
        if offset == end and max_wait_ms > 0:
            async with self.appended:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self.appended.wait_for(lambda: self.end(topic, partition) > offset),
                        max_wait_ms / 1000,
                    )
        chunks = [b for base, nxt, b in self.batches.get((topic, partition), []) if nxt > offset]
        data = b""
        for chunk in chunks:
            if data and len(data) + len(chunk) > max_bytes:
                break
            data += chunk
        return Read(data, self.end(topic, partition), 0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def partitions() -> MemoryPartitions:
    return MemoryPartitions({"t": 2})


@pytest.fixture
def manager(clock: Clock, partitions: MemoryPartitions) -> ConsumerManager:
    coordinator = GroupCoordinator(
        clock=clock, metadata=partitions.partition_counts, offsets=MemoryOffsetStore()
    )
    return ConsumerManager(
        partitions, coordinator, clock, instance_timeout_ms=60_000, auto_commit_interval_ms=0
    )


def values(records: list[dict[str, object]]) -> list[bytes]:
    return [base64.b64decode(str(r["value"])) for r in records]


async def test_subscribe_poll_and_commit(manager: ConsumerManager, partitions: MemoryPartitions) -> None:
    await partitions.append("t", 0, [b"a", b"b"])
    await partitions.append("t", 1, [b"c"])
    settings = ConsumerSettings(auto_offset_reset="earliest", auto_commit_enable=False)
    instance = manager.create("g", "c1", settings, "http://127.0.0.1:1")
    assert instance.base_uri == "http://127.0.0.1:1/consumers/g/instances/c1"
    await manager.subscribe(instance, ["t"], None)
    assert manager.assignment(instance) == [("t", 0), ("t", 1)]
    records = await manager.poll(instance, 0, 1 << 20)
    assert sorted(values(records)) == [b"a", b"b", b"c"]
    await manager.commit(instance, None)
    committed = manager.committed(instance, [("t", 0), ("t", 1)])
    assert [c["offset"] for c in committed] == [2, 1]
    # an explicit commit names the last consumed record: offset + 1 is stored
    await manager.commit(instance, {("t", 0): (0, "meta")})
    assert manager.committed(instance, [("t", 0)])[0] == {
        "topic": "t",
        "partition": 0,
        "offset": 1,
        "metadata": "meta",
    }


async def test_poll_waits_for_new_records(manager: ConsumerManager, partitions: MemoryPartitions) -> None:
    instance = manager.create("g", "c1", ConsumerSettings(auto_offset_reset="latest"), "http://x")
    manager.assign(instance, [("t", 1)])
    poll = asyncio.ensure_future(manager.poll(instance, 60_000, 1 << 20))
    await asyncio.sleep(0)
    assert not poll.done()
    await partitions.append("t", 1, [b"late"])
    assert values(await poll) == [b"late"]


async def test_auto_commit_covers_only_acknowledged_records(
    manager: ConsumerManager, partitions: MemoryPartitions
) -> None:
    await partitions.append("t", 0, [b"1", b"2", b"3"])
    instance = manager.create("g", "c1", ConsumerSettings(auto_offset_reset="earliest"), "http://x")
    manager.assign(instance, [("t", 0)])
    assert values(await manager.poll(instance, 0, 1 << 20)) == [b"1", b"2", b"3"]
    # nothing acknowledged yet: a crash now must redeliver all three
    assert manager.committed(instance, [("t", 0)])[0]["offset"] == -1
    await manager.poll(instance, 0, 1 << 20)  # asking again acknowledges the previous answer
    assert manager.committed(instance, [("t", 0)])[0]["offset"] == 3


async def test_idle_instances_expire(manager: ConsumerManager, clock: Clock) -> None:
    manager.create("g", "c1", ConsumerSettings(), "http://x")
    clock.now += 60_001
    await manager.tick()
    with pytest.raises(NotFoundError) as err:
        manager.get("g", "c1")
    assert err.value.code == 40403


async def test_conflicts_and_errors(manager: ConsumerManager, partitions: MemoryPartitions) -> None:
    instance = manager.create("g", "c1", ConsumerSettings(), "http://x")
    with pytest.raises(ConflictError) as dup:
        manager.create("g", "c1", ConsumerSettings(), "http://x")
    assert dup.value.code == 40902
    manager.assign(instance, [("t", 0)])
    with pytest.raises(ConflictError) as both:
        await manager.subscribe(instance, ["t"], None)
    assert both.value.code == 40903
    with pytest.raises(ConflictError):
        manager.seek(instance, {("t", 1): 0})
    with pytest.raises(NotFoundError) as missing:
        manager.assign(instance, [("nope", 0)])
    assert missing.value.code == 40401
    with pytest.raises(InvalidRequestError) as bad:
        ConsumerSettings.from_request({"format": "avro"})
    assert bad.value.code == 42204
    parsed = ConsumerSettings.from_request({"format": "json", "auto.commit.enable": "false"})
    assert parsed.format is EmbeddedFormat.JSON and not parsed.auto_commit_enable


async def test_out_of_range_position_resets(manager: ConsumerManager, partitions: MemoryPartitions) -> None:
    await partitions.append("t", 0, [b"x"])
    instance = manager.create("g", "c1", ConsumerSettings(auto_offset_reset="earliest"), "http://x")
    manager.assign(instance, [("t", 0)])
    manager.seek(instance, {("t", 0): 99})
    assert await manager.poll(instance, 0, 1 << 20) == []
    assert values(await manager.poll(instance, 0, 1 << 20)) == [b"x"]


async def test_revoked_partitions_are_never_committed(
    manager: ConsumerManager, partitions: MemoryPartitions
) -> None:
    await partitions.append("t", 0, [b"a"])
    await partitions.append("t", 1, [b"b"])
    settings = ConsumerSettings(auto_offset_reset="earliest", auto_commit_enable=True)
    first = manager.create("g", "first", settings, "http://x")
    await manager.subscribe(first, ["t"], None)
    assert len(await manager.poll(first, 0, 1 << 20)) == 2
    second = manager.create("g", "second", settings, "http://x")
    await manager.subscribe(second, ["t"], None)  # takes one partition away from the first
    kept = manager.assignment(first)
    assert len(kept) == 1
    await manager.poll(first, 0, 1 << 20)  # acknowledges, auto-commits owned partitions only
    committed = {
        (c["topic"], c["partition"]): c["offset"] for c in manager.committed(first, [("t", 0), ("t", 1)])
    }
    (lost,) = {("t", 0), ("t", 1)} - set(kept)
    assert committed[kept[0]] == 1
    assert committed[lost] == -1  # the new owner starts from the last commit: nothing is overwritten
    assert lost not in first.positions
