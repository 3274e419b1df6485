"""The Fetch family's logic without a broker: KIP-74's byte limits across partitions, the long poll over
every requested partition, the leader-epoch fencing and the shape of refusals. Partitions are stand-ins
holding a list of batch sizes; their regions are anonymous memory files."""

from __future__ import annotations

import asyncio
import datetime
import os
from typing import TYPE_CHECKING, Any, cast

import pytest

from tierlog.service.kafka.handlers.fetching.fetch import Wanted, fetch, wait_any
from tierlog.service.kafka.handlers.fetching.partitions import (
    check_leader_epoch,
    error_answer,
    milliseconds,
)
from tierlog.tiering.log.types import FileSlice

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker

from tierlog.wire.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicError,
)


class FakePartition:
    """Committed batches of the given sizes (byte ``i`` of batch ``n`` is ``n``); reads as the log does:
    whole batches from ``offset``, at least one, otherwise at most ``max_bytes``."""

    def __init__(self, label: str, sizes: list[int], leader_epoch: int = 0) -> None:
        self.label = label
        self.sizes = list(sizes)
        self.leader_epoch = leader_epoch
        self.replicated = False
        self.reads = 0
        self.read_seen = asyncio.Event()
        self._signal = asyncio.Event()

    @property
    def high_watermark(self) -> int:
        return len(self.sizes)

    log_start_offset = 0

    def committed_signal(self) -> asyncio.Event:
        return self._signal

    def interrupt(self) -> None:
        """As the broker's shutdown does: pending and later long polls end at once."""
        self._signal.set()

    def append(self, size: int) -> None:
        self.sizes.append(size)
        signal, self._signal = self._signal, asyncio.Event()
        signal.set()

    async def read_slice(self, offset: int, max_bytes: int) -> FileSlice:
        self.reads += 1
        self.read_seen.set()
        data = b""
        for n, size in enumerate(self.sizes[offset:], start=offset):
            if data and len(data) + size > max_bytes:
                break
            data += bytes([n]) * size
        fd = os.memfd_create("fake-region")
        os.write(fd, data)
        return FileSlice(fd, 0, len(data), self.high_watermark, 0, self.high_watermark)


class FakeTopic:
    def __init__(self, partitions: dict[int, FakePartition]) -> None:
        self._partitions = partitions

    def partition(self, index: int) -> FakePartition:
        return self._partitions[index]


class FakeBroker:
    def __init__(self, **topics: dict[int, FakePartition]) -> None:
        self._topics = {name: FakeTopic(p) for name, p in topics.items()}

    def topic(self, name: str) -> FakeTopic:
        if name not in self._topics:
            raise UnknownTopicError(f"Topic not found. ({name})")
        return self._topics[name]


def as_broker(fake: FakeBroker) -> Broker:
    return cast("Broker", fake)


def wanted(topic: str, index: int, limit: int = 1 << 20, offset: int = 0) -> Wanted:
    return Wanted(topic, index, offset, limit, -1, -1)


async def run(broker: FakeBroker, asked: list[Wanted], **limits: int) -> list[Wanted]:
    settings = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, **limits}
    async with asyncio.timeout(5):
        await fetch(
            as_broker(broker),
            asked,
            max_wait_ms=settings["max_wait_ms"],
            min_bytes=settings["min_bytes"],
            max_bytes=settings["max_bytes"],
        )
    return asked


async def test_every_partition_is_read_within_its_limit() -> None:
    broker = FakeBroker(t={0: FakePartition("t-0", [100, 100, 100]), 1: FakePartition("t-1", [50])})
    a, b = await run(broker, [wanted("t", 0, limit=250), wanted("t", 1)])
    assert (len(a.records), len(b.records)) == (200, 50)
    assert a.error is None and b.error is None


async def test_max_bytes_keeps_whole_batches_and_reads_the_boundary_partition_again() -> None:
    broker = FakeBroker(t={0: FakePartition("t-0", [100, 100, 100]), 1: FakePartition("t-1", [30, 30, 30])})
    a, b = await run(broker, [wanted("t", 0), wanted("t", 1)], max_bytes=270)
    assert (len(a.records), len(b.records)) == (200, 60)


async def test_the_first_batch_of_the_first_partition_with_data_is_returned_whole() -> None:
    broker = FakeBroker(
        t={0: FakePartition("t-0", []), 1: FakePartition("t-1", [500, 10]), 2: FakePartition("t-2", [10])}
    )
    empty, big, after = await run(
        broker, [wanted("t", 0), wanted("t", 1, limit=100), wanted("t", 2)], max_bytes=100
    )
    assert (len(empty.records), len(big.records), len(after.records)) == (0, 500, 0)
    assert after.error is None


async def test_a_long_poll_wakes_on_any_partition() -> None:
    quiet, busy = FakePartition("t-0", []), FakePartition("t-1", [])
    broker = FakeBroker(t={0: quiet, 1: busy})
    asked = [wanted("t", 0), wanted("t", 1)]
    task = asyncio.ensure_future(
        fetch(as_broker(broker), asked, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20)
    )
    try:
        async with asyncio.timeout(5):
            await busy.read_seen.wait()  # the first pass read nothing: the poll waits now
            busy.append(40)
            await task
    finally:
        task.cancel()
    assert [len(w.records) for w in asked] == [0, 40]
    assert busy.reads == 2  # read once, woken once: no polling in between


async def test_min_bytes_counts_across_partitions() -> None:
    a, b = FakePartition("t-0", [10]), FakePartition("t-1", [])
    broker = FakeBroker(t={0: a, 1: b})
    asked = [wanted("t", 0), wanted("t", 1)]
    task = asyncio.ensure_future(
        fetch(as_broker(broker), asked, max_wait_ms=30_000, min_bytes=25, max_bytes=1 << 20)
    )
    try:
        async with asyncio.timeout(5):
            await b.read_seen.wait()
            b.append(20)
            await task
    finally:
        task.cancel()
    assert [len(w.records) for w in asked] == [10, 20]


async def test_an_error_answers_without_waiting() -> None:
    broker = FakeBroker(t={0: FakePartition("t-0", [])})
    missing, empty = await run(broker, [wanted("gone", 0), wanted("t", 0)], max_wait_ms=60_000)
    assert isinstance(missing.error, UnknownTopicError)
    assert empty.records == b"" and empty.error is None


async def test_an_interrupted_partition_ends_the_long_poll() -> None:
    stopping = FakePartition("t-0", [])
    broker = FakeBroker(t={0: stopping, 1: FakePartition("t-1", [])})
    asked = [wanted("t", 0), wanted("t", 1)]
    task = asyncio.ensure_future(
        fetch(as_broker(broker), asked, max_wait_ms=60_000, min_bytes=1, max_bytes=100)
    )
    try:
        async with asyncio.timeout(5):
            await stopping.read_seen.wait()
            stopping.interrupt()
            await task
    finally:
        task.cancel()
    assert stopping.reads == 2  # woken, read once more, answered: no spinning on a set signal


async def test_a_wait_with_no_data_ends_at_max_wait() -> None:
    broker = FakeBroker(t={0: FakePartition("t-0", [])})
    (only,) = await run(broker, [wanted("t", 0)], max_wait_ms=20)
    assert only.records == b"" and only.error is None


async def test_wait_any() -> None:
    first, second = asyncio.Event(), asyncio.Event()
    assert not await wait_any([first, second], 0.01)
    second.set()
    assert await wait_any([first, second], 5)


def test_leader_epoch_fencing() -> None:
    partition: Any = FakePartition("t-0", [], leader_epoch=3)
    check_leader_epoch(partition, -1)
    check_leader_epoch(partition, 3)
    with pytest.raises(FencedLeaderEpochError):
        check_leader_epoch(partition, 2)
    with pytest.raises(UnknownLeaderEpochError):
        check_leader_epoch(partition, 4)


def test_error_answer_names_the_leader() -> None:
    moved = NotLeaderOrFollowerError("elsewhere", leader_id=2, leader_epoch=7)
    assert error_answer(moved) == {"error_code": 6, "current_leader": {"leader_id": 2, "leader_epoch": 7}}
    assert error_answer(NotLeaderOrFollowerError("nobody")) == {"error_code": 6}
    assert error_answer(UnknownTopicError("x")) == {"error_code": 3}


def test_milliseconds() -> None:
    assert milliseconds(datetime.timedelta(seconds=1, microseconds=999)) == 1000
    assert milliseconds(250) == 250


async def test_a_cancelled_fetch_closes_the_region_it_was_reading() -> None:
    release, closed = asyncio.Event(), asyncio.Event()

    class WatchedSlice(FileSlice):
        def close(self) -> None:
            super().close()
            closed.set()

    class SlowPartition(FakePartition):
        async def read_slice(self, offset: int, max_bytes: int) -> FileSlice:
            region = await super().read_slice(offset, max_bytes)
            await release.wait()  # as a log I/O thread still reading when the request is cancelled
            return WatchedSlice(region.fd, 0, region.size, 1, 0, 1)

    slow = SlowPartition("t-0", [10])
    asked = [wanted("t", 0)]
    task = asyncio.ensure_future(
        fetch(as_broker(FakeBroker(t={0: slow})), asked, max_wait_ms=0, min_bytes=1, max_bytes=100)
    )
    async with asyncio.timeout(5):
        await slow.read_seen.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await closed.wait()
