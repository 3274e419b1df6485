"""Group commit in LogOffsetStore: commits waiting behind an append are written together (issue 34).

The offset log here is a gate: each append waits until the test opens it, so which commits share a batch
is decided by events, not by timing.
"""

from __future__ import annotations

import asyncio

import pytest

from tierlog.service.groups.offsets import LogOffsetStore
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.log import ManualClock
from tierlog.wire.errors import UnavailableError


class GatedLog:
    """An OffsetLog whose appends each wait for one ``release()``; records what every append carried."""

    def __init__(self) -> None:
        self.batches: list[int] = []  # records per appended batch
        self.started = asyncio.Event()
        self.fail_next: Exception | None = None
        self._gate: asyncio.Queue[None] = asyncio.Queue()

    def release(self) -> None:
        self._gate.put_nowait(None)

    async def append(self, batch: bytes) -> int:
        self.started.set()
        try:
            await self._gate.get()
        finally:
            self.started.clear()
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        self.batches.append(sum(1 for _ in iter_records(batch)))
        return len(self.batches)

    async def roll(self) -> None: ...

    async def drop_before(self, offset: int) -> None: ...

    async def end_offset(self) -> int:
        return 0


async def queued(store: LogOffsetStore, count: int) -> None:
    """Let ``count`` commit tasks reach the store's queue (each needs one loop turn to start)."""
    for _ in range(100):
        if len(store._queued) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(store._queued)} commits queued, not {count}")


def commit(store: LogOffsetStore, group: str, offset: int) -> asyncio.Task[None]:
    return asyncio.ensure_future(store.commit(group, {("t", 0): (offset, "")}, 1))


async def appending(log: GatedLog, store: LogOffsetStore, group: str) -> asyncio.Task[None]:
    """A commit of ``group`` that is appending (held at the gate)."""
    task = commit(store, group, 1)
    await log.started.wait()
    return task


async def cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_commits_queued_behind_an_append_share_the_next_batch() -> None:
    log = GatedLog()
    store = LogOffsetStore(log, ManualClock(1).now_ms)
    first = commit(store, "g0", 1)
    await log.started.wait()  # the first commit is appending
    rest = [commit(store, f"g{i}", i + 1) for i in range(1, 6)]
    await queued(store, 5)
    log.release()
    await first
    await log.started.wait()  # one append for all five
    log.release()
    await asyncio.gather(*rest)
    assert log.batches == [1, 5]
    assert {g: store.group_offsets(g)[("t", 0)].offset for g in store.group_ids()} == {
        f"g{i}": i + 1 for i in range(6)
    }


async def test_a_failed_batch_fails_the_commits_it_carried_and_later_ones_still_write() -> None:
    log = GatedLog()
    store = LogOffsetStore(log, ManualClock(1).now_ms)
    first = await appending(log, store, "a")
    carried = [commit(store, "b", 2), commit(store, "c", 3)]
    await queued(store, 2)
    log.release()
    await first
    await log.started.wait()
    log.fail_next = UnavailableError("disk gone")
    log.release()
    for task in carried:
        with pytest.raises(UnavailableError, match="disk gone"):
            await task
    assert store.group_ids() == ["a"]  # nothing of the failed batch is applied
    later = commit(store, "d", 4)
    await log.started.wait()
    log.release()
    await later
    assert store.group_ids() == ["a", "d"]


async def test_a_cancelled_waiter_is_not_written_and_the_others_are() -> None:
    log = GatedLog()
    store = LogOffsetStore(log, ManualClock(1).now_ms)
    first = await appending(log, store, "a")
    gone, kept = commit(store, "gone", 2), commit(store, "kept", 3)
    await queued(store, 2)
    await cancelled(gone)
    log.release()
    await first
    await log.started.wait()
    log.release()
    await kept
    assert store.group_ids() == ["a", "kept"]
    assert log.batches == [1, 1]


async def test_a_driver_cancelled_mid_append_fails_its_batch_retriably_and_passes_the_drive() -> None:
    log = GatedLog()
    store = LogOffsetStore(log, ManualClock(1).now_ms)
    driver = await appending(log, store, "a")
    waiter = commit(store, "b", 2)
    await queued(store, 1)
    log.release()
    await driver  # the driver's own batch is written; it hands the drive to "b"
    await log.started.wait()  # "b" appends, as the new driver
    late = commit(store, "c", 3)
    await queued(store, 1)
    await cancelled(waiter)
    await log.started.wait()  # "c" was handed the drive and appends
    log.release()
    await late
    assert store.group_ids() == ["a", "c"]


async def test_waiters_carried_by_a_cancelled_driver_get_a_retriable_error() -> None:
    log = GatedLog()
    store = LogOffsetStore(log, ManualClock(1).now_ms)
    first = await appending(log, store, "a")
    second, third = commit(store, "b", 2), commit(store, "c", 3)
    await queued(store, 2)
    log.release()
    await first
    await log.started.wait()  # "b" drives and carries "c" in its batch
    await cancelled(second)
    with pytest.raises(UnavailableError, match="interrupted"):
        await third
    assert store.group_ids() == ["a"]
    assert store._driver is None and not store._queued
