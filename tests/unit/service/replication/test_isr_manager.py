"""The ISR manager against an in-memory controller (``alter``) and a manual clock: shrinks and expansions
sent one at a time, the controller's answer confirmed, fenced answers stalling it until newer metadata, other
errors retried with backoff, and close cancelling an in-flight request. Tests wait on the fake's events or
on ``on_change``, never on sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from tierlog.service.cluster.model import AlterPartitionRequest, PartitionState
from tierlog.service.replication import isr as isr_module
from tierlog.service.replication.isr import IsrManager
from tierlog.service.replication.leader import LeaderState
from tierlog.tiering.log.clock import ManualClock
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    InvalidUpdateVersionError,
    NotControllerError,
    TierlogError,
    UnavailableError,
)

LAG_MS = 1000
WAIT_S = 10.0
NEVER_S = 3600.0  # the periodic check never fires on its own: tests poke


class Controller:
    """An in-memory controller: answers each request with the next scripted outcome (an error to raise, or
    None to commit the request as asked), then commits every later request."""

    def __init__(self, *outcomes: TierlogError | None) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[AlterPartitionRequest] = []
        self.called = asyncio.Event()
        self.hold: asyncio.Event | None = None  # when set, requests wait for it
        self.cancelled = asyncio.Event()
        self.leader_epoch_answer: int | None = None
        # Set as an answer leaves: the manager handles it without yielding, so a test woken by this event
        # sees the handling done.
        self.answered = asyncio.Event()

    async def alter(self, request: AlterPartitionRequest) -> PartitionState:
        try:
            return await self._answer(request)
        finally:
            self.answered.set()

    async def _answer(self, request: AlterPartitionRequest) -> PartitionState:
        self.requests.append(request)
        self.called.set()
        if self.hold is not None:
            try:
                await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        return PartitionState(
            leader=request.broker_id,
            leader_epoch=request.leader_epoch
            if self.leader_epoch_answer is None
            else self.leader_epoch_answer,
            isr=request.new_isr,
            partition_epoch=request.partition_epoch + 1,
        )

    async def wait_requests(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.requests) < count:
                self.called.clear()
                await self.called.wait()


class Changes:
    """``on_change``: records the HWs it gets and wakes waiters; with ``fail_once`` the first call raises
    after recording."""

    def __init__(self) -> None:
        self.seen: list[int | None] = []
        self.fail_once = False
        self._event = asyncio.Event()

    def __call__(self, hw: int | None) -> None:
        self.seen.append(hw)
        self._event.set()
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("on_change failed")

    async def wait(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.seen) < count:
                self._event.clear()
                await self._event.wait()


class Log:
    def __init__(self, leo: int) -> None:
        self.leo = leo

    def __call__(self) -> int:
        return self.leo


def leader_state(clock: ManualClock, log: Log, *, isr: Sequence[int] = (1, 2, 3), hw: int = 0) -> LeaderState:
    return LeaderState(
        topic="t",
        partition=0,
        broker_id=1,
        replicas=(1, 2, 3),
        isr=isr,
        leader_epoch=4,
        partition_epoch=10,
        leader_epoch_start_offset=0,
        log_end_offset=log,
        high_watermark=hw,
        clock=clock,
        replica_lag_time_max_ms=LAG_MS,
    )


Make = Callable[..., tuple[IsrManager, LeaderState, Controller, Changes, ManualClock, Log]]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    managers: list[IsrManager] = []

    def build(
        *outcomes: TierlogError | None, isr: Sequence[int] = (1, 2, 3), leo: int = 10, hw: int = 0
    ) -> tuple[IsrManager, LeaderState, Controller, Changes, ManualClock, Log]:
        clock = ManualClock(0)
        log = Log(leo)
        state = leader_state(clock, log, isr=isr, hw=hw)
        controller = Controller(*outcomes)
        changes = Changes()
        manager = IsrManager(
            state,
            topic="t",
            partition=0,
            broker_id=1,
            alter=controller.alter,
            clock=clock,
            check_interval_s=NEVER_S,
            on_change=changes,
        )
        managers.append(manager)
        return manager, state, controller, changes, clock, log

    yield build
    for manager in managers:
        await manager.close()


async def test_shrinks_a_lagging_follower(make: Make, caplog: pytest.LogCaptureFixture) -> None:
    manager, state, controller, changes, clock, _ = make()
    state.on_follower_fetch(2, 10)
    state.on_follower_fetch(3, 4)
    clock.set(LAG_MS + 1)
    caplog.set_level("INFO", logger="tierlog.replication.isr")
    manager.start()
    await changes.wait(1)
    assert controller.requests == [
        AlterPartitionRequest(
            topic="t", partition=0, broker_id=1, leader_epoch=4, partition_epoch=10, new_isr=(1, 2)
        )
    ]
    assert (state.isr, state.partition_epoch, state.pending) == ((1, 2), 11, False)
    assert changes.seen == [10]  # 3 held the HW at 4
    assert state.high_watermark == 10
    assert "ISR of t-0 shrinks from [1,2,3] to [1,2]" in caplog.text


async def test_expands_with_a_caught_up_follower_on_poke(make: Make) -> None:
    manager, state, controller, changes, _, _ = make(isr=(1, 2), leo=10, hw=10)
    manager.start()
    state.on_follower_fetch(3, 9)  # below the HW: not yet
    manager.poke()
    state.on_follower_fetch(3, 10)
    manager.poke()
    await changes.wait(1)
    assert [r.new_isr for r in controller.requests] == [(1, 2, 3)]
    assert state.isr == (1, 2, 3)
    assert changes.seen == [None]  # the HW did not move


async def test_shrink_and_expand_in_one_request(make: Make) -> None:
    manager, state, controller, changes, clock, _ = make(isr=(1, 2), leo=10, hw=5)
    state.on_follower_fetch(2, 5)
    state.on_follower_fetch(3, 10)
    clock.set(LAG_MS + 1)  # 2 lags; 3 fetched at the leader's LEO (at time 0, but LEO equal: in sync)
    manager.start()
    await changes.wait(1)
    assert [r.new_isr for r in controller.requests] == [(1, 3)]
    assert state.isr == (1, 3)
    assert state.high_watermark == 10


@pytest.mark.parametrize(
    "refusal", [FencedLeaderEpochError("stale leader epoch"), InvalidUpdateVersionError("stale version")]
)
async def test_refused_change_stalls_until_refresh(make: Make, refusal: TierlogError) -> None:
    manager, state, controller, changes, clock, _ = make(refusal)
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS + 1)
    manager.start()
    await asyncio.wait_for(controller.answered.wait(), WAIT_S)
    assert manager.stalled
    assert (state.isr, state.maximal_isr, state.pending) == ((1, 2, 3), (1, 2, 3), False)
    manager.poke()
    for _ in range(20):  # the task runs its loop several times over: still nothing proposed
        await asyncio.sleep(0)
    assert len(controller.requests) == 1
    # The metadata brings a newer state (say, another ISR write): applied, and proposing resumes from it.
    manager.refresh((1, 2, 3), 12)
    assert changes.seen == [None]
    await changes.wait(2)
    assert [(r.partition_epoch, r.new_isr) for r in controller.requests] == [(10, (1, 2)), (12, (1, 2))]
    assert (state.isr, state.partition_epoch) == ((1, 2), 13)


async def test_refresh_ignores_an_older_state(make: Make) -> None:
    manager, state, _, changes, _, _ = make()
    manager.refresh((1, 2), 9)
    manager.refresh((1, 2, 3), 10)
    assert (state.isr, state.partition_epoch) == ((1, 2, 3), 10)
    assert changes.seen == []


async def test_other_errors_are_retried_with_backoff(make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isr_module, "BACKOFF_INITIAL_S", 0.001)
    manager, state, controller, changes, clock, _ = make(
        UnavailableError("etcd unavailable"), NotControllerError("not the controller")
    )
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS + 1)
    manager.start()
    await changes.wait(1)
    assert [r.new_isr for r in controller.requests] == [(1, 2)] * 3
    assert [r.partition_epoch for r in controller.requests] == [10] * 3
    assert (state.isr, state.partition_epoch, manager.stalled) == ((1, 2), 11, False)


async def test_an_answer_for_another_leader_epoch_stalls(make: Make) -> None:
    manager, state, controller, _, clock, _ = make()
    controller.leader_epoch_answer = 5
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS + 1)
    manager.start()
    await asyncio.wait_for(controller.answered.wait(), WAIT_S)
    assert manager.stalled
    assert (state.isr, state.partition_epoch, state.pending) == ((1, 2, 3), 10, False)


async def test_close_cancels_an_in_flight_request(make: Make) -> None:
    manager, state, controller, changes, clock, _ = make()
    controller.hold = asyncio.Event()
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS + 1)
    manager.start()
    await controller.wait_requests(1)
    assert state.pending
    await asyncio.wait_for(manager.close(), WAIT_S)
    assert controller.cancelled.is_set()
    assert (state.pending, state.isr, changes.seen) == (False, (1, 2, 3), [])
    await manager.close()  # idempotent
    with pytest.raises(RuntimeError):
        manager.start()


async def test_nothing_due_sends_nothing(make: Make) -> None:
    manager, state, controller, _, clock, _ = make()
    state.on_follower_fetch(2, 10)
    state.on_follower_fetch(3, 10)
    clock.set(10 * LAG_MS)  # long ago, but both sit at the leader's LEO
    manager.start()
    manager.poke()
    for _ in range(20):
        await asyncio.sleep(0)
    assert controller.requests == []
    assert state.isr == (1, 2, 3)


async def test_a_failing_on_change_does_not_end_the_upkeep(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    manager, state, controller, changes, clock, _ = make()
    changes.fail_once = True
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS + 1)
    manager.start()
    await changes.wait(1)
    assert state.isr == (1, 2)
    state.on_follower_fetch(3, 10)
    manager.poke()
    await changes.wait(2)
    assert [r.new_isr for r in controller.requests] == [(1, 2), (1, 2, 3)]
    assert changes.seen == [10, None]
    assert "ISR upkeep of t-0 failed" in caplog.text
