"""The leader's view of its followers against a manual clock: Kafka's catch-up rule, the high watermark over
the maximal ISR (KIP-497), which followers fall out or may join, and the ``acks=all`` waiters."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tierlog.service.replication.leader import LeaderState
from tierlog.tiering.log.clock import ManualClock
from tierlog.wire.errors import (
    IllegalStateError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    ProduceTimedOutError,
    UnknownPartitionError,
)

LAG_MS = 1000
WAIT_S = 10.0


class Log:
    """The leader's log end offset, as the callable the state reads."""

    def __init__(self, leo: int) -> None:
        self.leo = leo

    def __call__(self) -> int:
        return self.leo


def make(
    *,
    leo: int = 10,
    hw: int = 0,
    replicas: Sequence[int] = (1, 2, 3),
    isr: Sequence[int] | None = None,
    epoch_start: int = 0,
    clock: ManualClock | None = None,
) -> tuple[LeaderState, Log, ManualClock]:
    log = Log(leo)
    clock = clock or ManualClock(0)
    state = LeaderState(
        topic="t",
        partition=0,
        broker_id=1,
        replicas=replicas,
        isr=replicas if isr is None else isr,
        leader_epoch=3,
        partition_epoch=7,
        leader_epoch_start_offset=epoch_start,
        log_end_offset=log,
        high_watermark=hw,
        clock=clock,
        replica_lag_time_max_ms=LAG_MS,
    )
    return state, log, clock


def view(state: LeaderState) -> tuple[tuple[int, ...], tuple[int, ...], bool, int]:
    """ISR, maximal ISR, pending, partition epoch (read afresh: mypy narrows attributes after asserts)."""
    return state.isr, state.maximal_isr, state.pending, state.partition_epoch


# --- high watermark -------------------------------------------------------------------------------------


def test_hw_is_the_smallest_leo_of_the_isr() -> None:
    state, log, _ = make(leo=10, hw=0)
    assert state.on_local_append() is None  # followers' LEOs unknown: HW held
    assert state.on_follower_fetch(2, 5) is None  # 3 still unknown
    assert state.on_follower_fetch(3, 7) == 5
    assert state.on_follower_fetch(2, 10) == 7
    assert state.on_follower_fetch(3, 10) == 10
    assert state.high_watermark == 10
    log.leo = 12
    assert state.on_local_append() is None
    assert state.on_follower_fetch(2, 12) is None
    assert state.on_follower_fetch(3, 12) == 12


def test_hw_never_goes_back() -> None:
    state, _, _ = make(leo=10, hw=8, isr=(1, 2))
    assert state.on_follower_fetch(2, 5) is None
    assert state.high_watermark == 8
    assert state.on_follower_fetch(2, 9) == 9


def test_unknown_follower_leo_holds_the_hw() -> None:
    state, _, _ = make(leo=10, hw=3, isr=(1, 2, 3))
    state.on_follower_fetch(2, 10)
    assert state.on_local_append() is None
    assert state.high_watermark == 3
    assert state.progress(3).log_end_offset == -1


def test_leader_alone_hw_is_its_leo() -> None:
    state, log, _ = make(leo=10, hw=4, isr=(1,))
    assert state.on_local_append() == 10
    assert state.on_local_append() is None
    log.leo = 11
    assert state.on_local_append() == 11


def test_followers_outside_the_isr_do_not_hold_the_hw() -> None:
    state, _, _ = make(leo=10, hw=0, isr=(1, 2))
    assert state.on_follower_fetch(3, 1) is None
    assert state.on_follower_fetch(2, 10) == 10


def test_fetch_of_a_stranger_or_the_leader_is_refused() -> None:
    state, _, _ = make()
    with pytest.raises(UnknownPartitionError):
        state.on_follower_fetch(9, 0)
    with pytest.raises(UnknownPartitionError):
        state.on_follower_fetch(1, 0)


# --- catch-up rule --------------------------------------------------------------------------------------


def test_last_caught_up_follows_kafkas_rule() -> None:
    state, log, clock = make(leo=10, clock=ManualClock(50))
    assert state.progress(2).last_caught_up_ms == 50  # the state's creation

    clock.set(100)
    state.on_follower_fetch(2, 5)  # behind, and no previous fetch: unchanged
    assert state.progress(2).last_caught_up_ms == 50
    assert state.progress(2).last_fetch_leader_leo == 10

    clock.set(200)
    log.leo = 15
    state.on_follower_fetch(2, 10)  # reached the LEO of the previous fetch: previous fetch time
    assert state.progress(2).last_caught_up_ms == 100

    clock.set(300)
    log.leo = 20
    state.on_follower_fetch(2, 12)  # below the previous fetch's leader LEO (15): unchanged
    assert state.progress(2).last_caught_up_ms == 100

    clock.set(400)
    state.on_follower_fetch(2, 20)  # at the leader's LEO: now
    progress = state.progress(2)
    assert progress.last_caught_up_ms == 400
    assert (progress.log_end_offset, progress.last_fetch_ms) == (20, 400)

    clock.set(500)
    log.leo = 30
    state.on_follower_fetch(2, 20)  # reaches the previous leader LEO: previous fetch time, never back
    assert state.progress(2).last_caught_up_ms == 400


# --- out of sync / caught up ----------------------------------------------------------------------------


def test_isr_follower_falls_out_after_the_lag() -> None:
    state, log, clock = make(leo=10)
    clock.set(500)
    state.on_follower_fetch(2, 10)
    clock.set(LAG_MS)
    assert state.out_of_sync() == ()  # exactly the lag is still in sync
    clock.set(LAG_MS + 1)
    assert state.out_of_sync() == (3,)  # never fetched since the state was created
    clock.set(LAG_MS + 600)
    assert state.out_of_sync() == (3,)  # 2 sits at the leader's LEO: in sync however long ago it fetched
    log.leo = 11
    assert state.out_of_sync() == (2, 3)


def test_out_of_sync_only_considers_the_committed_isr() -> None:
    state, _, clock = make(leo=10, isr=(1, 2))
    clock.set(10 * LAG_MS)
    assert state.out_of_sync() == (2,)


def test_catching_up_needs_the_hw_and_the_epoch_start() -> None:
    state, _, _ = make(leo=30, hw=15, replicas=(1, 2, 3, 4), isr=(1, 2), epoch_start=20)
    assert state.catching_up_done() == ()  # unknown LEOs never join
    state.on_follower_fetch(3, 18)  # past the HW, before this epoch began
    state.on_follower_fetch(4, 14)
    assert state.catching_up_done() == ()
    state.on_follower_fetch(3, 20)
    assert state.catching_up_done() == (3,)
    state.on_follower_fetch(4, 25)
    assert state.catching_up_done() == (3, 4)


def test_catching_up_below_the_hw_is_not_done() -> None:
    state, _, _ = make(leo=30, hw=25, isr=(1, 2), epoch_start=0)
    state.on_follower_fetch(3, 24)
    assert state.catching_up_done() == ()
    state.on_follower_fetch(3, 25)
    assert state.catching_up_done() == (3,)


# --- proposals ------------------------------------------------------------------------------------------


def test_pending_expansion_counts_in_the_hw() -> None:
    state, _, _ = make(leo=30, hw=10, isr=(1, 2))
    state.on_follower_fetch(3, 20)
    assert state.on_follower_fetch(2, 15) == 15
    assert state.catching_up_done() == (3,)
    state.propose((1, 2, 3))
    assert state.pending
    assert state.maximal_isr == (1, 2, 3)
    assert state.isr == (1, 2)
    assert state.on_follower_fetch(2, 30) == 20  # 3 holds it: without the pending expansion it would be 30
    assert state.confirm((1, 2, 3), 8) is None
    assert view(state) == ((1, 2, 3), (1, 2, 3), False, 8)
    assert state.on_follower_fetch(3, 30) == 30


def test_shrink_takes_effect_on_confirm() -> None:
    state, _, _ = make(leo=30, hw=0)
    state.on_follower_fetch(2, 30)
    assert state.on_follower_fetch(3, 10) == 10
    state.propose((1, 2))
    assert state.maximal_isr == (1, 2, 3)
    assert state.on_local_append() is None
    assert state.high_watermark == 10
    assert state.confirm((1, 2), 8) == 30
    assert state.isr == (1, 2)


def test_abort_returns_to_the_committed_isr() -> None:
    state, _, _ = make(isr=(1, 2))
    state.propose((1, 2, 3))
    state.abort()
    assert (state.pending, state.maximal_isr, state.isr) == (False, (1, 2), (1, 2))
    state.abort()
    assert not state.pending


def test_an_aborted_expansion_lets_the_hw_move_at_once() -> None:
    # the leader alone in the ISR proposed a follower that had reached the HW, then appended more
    state, log, _ = make(leo=5, hw=0, replicas=(1, 2), isr=(1,))
    state.on_follower_fetch(2, 5)
    assert state.high_watermark == 5  # the follower reached it, then stopped fetching (it died)
    state.propose((1, 2))
    log.leo = 8
    assert state.on_local_append() is None  # the proposed member holds the HW at its LEO
    assert state.abort() == 8  # refused: no fetch or append is needed for the HW to reach the LEO
    assert state.high_watermark == 8
    assert state.abort() is None


def test_one_proposal_at_a_time_and_the_leader_stays() -> None:
    state, _, _ = make()
    with pytest.raises(IllegalStateError):
        state.propose((2, 3))
    with pytest.raises(IllegalStateError):
        state.propose((1, 9))
    assert not state.pending
    state.propose((1, 2))
    with pytest.raises(IllegalStateError):
        state.propose((1, 3))


def test_confirm_ignores_a_state_not_newer() -> None:
    state, _, _ = make()
    assert state.confirm((1, 2), 7) is None
    assert state.isr == (1, 2, 3)
    state.confirm((1, 2), 8)
    state.confirm((1, 3), 8)
    assert view(state) == ((1, 2), (1, 2), False, 8)


def test_check_min_isr_uses_the_committed_isr() -> None:
    state, _, _ = make(isr=(1, 2))
    state.check_min_isr(2)
    state.propose((1, 2, 3))
    with pytest.raises(NotEnoughReplicasError):
        state.check_min_isr(3)


# --- acks=all -------------------------------------------------------------------------------------------


async def test_waiters_resolve_in_offset_order_when_the_hw_passes() -> None:
    state, _, _ = make(leo=10, hw=0, isr=(1, 2))
    resolved: list[int] = []

    async def wait(offset: int) -> None:
        await state.wait_committed(offset, WAIT_S, lambda: 1)
        resolved.append(offset)

    tasks = {offset: asyncio.create_task(wait(offset)) for offset in (5, 8, 2)}
    await asyncio.sleep(0)  # let them register
    assert state.on_follower_fetch(2, 6) == 6
    await asyncio.wait_for(asyncio.gather(tasks[5], tasks[2]), WAIT_S)
    assert resolved == [2, 5]
    assert not tasks[8].done()
    assert state.on_follower_fetch(2, 8) == 8  # HW 8 is not past offset 8
    assert state.on_follower_fetch(2, 9) == 9
    await asyncio.wait_for(tasks[8], WAIT_S)
    assert resolved == [2, 5, 8]


async def test_already_committed_answers_at_once() -> None:
    state, _, _ = make(leo=10, hw=6, isr=(1, 2))
    await state.wait_committed(5, WAIT_S, lambda: 2)
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        await state.wait_committed(5, WAIT_S, lambda: 3)


async def test_wait_times_out() -> None:
    state, _, _ = make(leo=10, hw=0, isr=(1, 2))
    with pytest.raises(ProduceTimedOutError):
        await state.wait_committed(5, 0.01, lambda: 1)
    assert state.on_follower_fetch(2, 10) == 10  # the timed-out waiter is skipped, not failed twice
    await state.wait_committed(5, WAIT_S, lambda: 1)


async def test_isr_shrinking_below_min_insync_fails_after_append() -> None:
    state, _, _ = make(leo=10, hw=0)
    state.on_follower_fetch(2, 10)
    waiter = asyncio.create_task(state.wait_committed(5, WAIT_S, lambda: 3))
    other = asyncio.create_task(state.wait_committed(6, WAIT_S, lambda: 2))
    await asyncio.sleep(0)
    state.propose((1, 2))
    assert state.confirm((1, 2), 8) == 10  # 3 never fetched; without it the HW moves
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        await asyncio.wait_for(waiter, WAIT_S)
    await asyncio.wait_for(other, WAIT_S)


async def test_close_fails_every_waiter_with_the_reason() -> None:
    state, _, _ = make(leo=10, hw=0, isr=(1, 2))
    reason = NotLeaderOrFollowerError("no longer the leader", leader_id=2)
    waiters = [asyncio.create_task(state.wait_committed(o, WAIT_S, lambda: 1)) for o in (3, 4)]
    await asyncio.sleep(0)
    state.close(reason)
    for waiter in waiters:
        with pytest.raises(NotLeaderOrFollowerError) as info:
            await asyncio.wait_for(waiter, WAIT_S)
        assert info.value is reason
    with pytest.raises(NotLeaderOrFollowerError):
        await state.wait_committed(9, WAIT_S, lambda: 1)


async def test_many_timed_out_waiters_are_dropped_and_live_ones_kept() -> None:
    state, _, _ = make(leo=10, hw=0, isr=(1, 2))
    live = asyncio.create_task(state.wait_committed(3, WAIT_S, lambda: 1))
    await asyncio.sleep(0)
    results = await asyncio.gather(
        *(state.wait_committed(5, 0.001, lambda: 1) for _ in range(100)), return_exceptions=True
    )
    assert all(isinstance(r, ProduceTimedOutError) for r in results)
    assert len(state._waiters) < 50  # the abandoned entries were dropped while the HW stood still
    assert not live.done()
    assert state.on_follower_fetch(2, 4) == 4
    await asyncio.wait_for(live, WAIT_S)
