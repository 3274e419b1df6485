"""The group coordinator's protocol: joins, generations, eviction, fencing and offsets, on a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from tierlog.service.groups.coordinator import GroupCoordinator, JoinResult
from tierlog.service.groups.offsets import MemoryOffsetStore
from tierlog.wire.errors import (
    IllegalGenerationError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownMemberError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def now_ms(self) -> int:
        return self.now


class Cluster:
    def __init__(self) -> None:
        self.topics: dict[str, int] = {"t": 4}

    def metadata(self) -> Mapping[str, int]:
        return dict(self.topics)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def coordinator(clock: Clock, cluster: Cluster) -> GroupCoordinator:
    return GroupCoordinator(clock=clock, metadata=cluster.metadata, offsets=MemoryOffsetStore())


def owners(results: list[JoinResult]) -> dict[tuple[str, int], str]:
    seen: dict[tuple[str, int], str] = {}
    for r in results:
        for tp in r.assignment:
            assert tp not in seen, f"{tp} owned twice in generation {r.generation}"
            seen[tp] = r.member_id
    return seen


async def test_single_member_gets_everything(coordinator: GroupCoordinator) -> None:
    result = await coordinator.join("g", topics=["t"])
    assert result.generation == 1
    assert result.assignment == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    assert result.leader_id == result.member_id


async def test_second_member_triggers_rebalance_and_split(coordinator: GroupCoordinator) -> None:
    first = await coordinator.join("g", topics=["t"])
    second_join = asyncio.ensure_future(coordinator.join("g", topics=["t"]))
    await asyncio.sleep(0)  # one loop turn runs the join up to its wait: deterministic, not a timing guess
    with pytest.raises(RebalanceInProgressError):
        coordinator.heartbeat("g", first.member_id, first.generation)
    first_again = await coordinator.join("g", first.member_id, topics=["t"])
    second = await second_join
    assert first_again.generation == second.generation == 2
    assert set(owners([first_again, second])) == {("t", p) for p in range(4)}
    assert len(first_again.assignment) == len(second.assignment) == 2


async def test_five_members_on_four_partitions(coordinator: GroupCoordinator) -> None:
    joins = [asyncio.ensure_future(coordinator.join("g", topics=["t"], auto_rejoin=True)) for _ in range(5)]
    results = await asyncio.gather(*joins)
    final = coordinator.describe("g")
    assert final.state == "Stable"
    loads = sorted(len(m.assignment) for m in final.members)
    assert loads == [0, 1, 1, 1, 1]
    assert len({r.member_id for r in results}) == 5


async def test_silent_member_is_evicted_and_partitions_move(
    coordinator: GroupCoordinator, clock: Clock
) -> None:
    a = await coordinator.join("g", topics=["t"], session_timeout_ms=10_000)
    b_join = asyncio.ensure_future(coordinator.join("g", topics=["t"], session_timeout_ms=10_000))
    await asyncio.sleep(0)
    a = await coordinator.join("g", a.member_id, topics=["t"], session_timeout_ms=10_000)
    b = await b_join
    assert len(a.assignment) == 2
    clock.now += 6_000
    coordinator.heartbeat("g", b.member_id, b.generation)
    clock.now += 6_000  # a silent for 12 s > 10 s, b for 6 s
    await coordinator.tick()
    with pytest.raises(UnknownMemberError):
        coordinator.heartbeat("g", a.member_id, a.generation)
    # b is told to rejoin, then owns everything in the next generation
    with pytest.raises(RebalanceInProgressError):
        coordinator.heartbeat("g", b.member_id, b.generation)
    b2 = await coordinator.join("g", b.member_id, topics=["t"])
    assert b2.generation == b.generation + 1
    assert b2.assignment == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]


async def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout(
    coordinator: GroupCoordinator, clock: Clock
) -> None:
    a = await coordinator.join("g", topics=["t"], rebalance_timeout_ms=5_000)
    b_join = asyncio.ensure_future(coordinator.join("g", topics=["t"], rebalance_timeout_ms=5_000))
    await asyncio.sleep(0)
    assert not b_join.done()
    clock.now += 5_000
    await coordinator.tick()
    b = await b_join
    assert b.assignment == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    assert b.members == [b.member_id]
    with pytest.raises(UnknownMemberError):
        coordinator.heartbeat("g", a.member_id, a.generation)


async def test_stale_generation_commit_is_refused(coordinator: GroupCoordinator) -> None:
    a = await coordinator.join("g", topics=["t"], auto_rejoin=True)
    b = await coordinator.join("g", topics=["t"], auto_rejoin=True)
    assert b.generation == a.generation + 1
    with pytest.raises(IllegalGenerationError):
        await coordinator.commit("g", {("t", 0): (10, "")}, member_id=a.member_id, generation=a.generation)
    assert coordinator.committed("g") == {}
    await coordinator.commit("g", {("t", 0): (10, "m")}, member_id=a.member_id, generation=b.generation)
    assert coordinator.committed("g")[("t", 0)].offset == 10
    assert coordinator.committed("g")[("t", 0)].metadata == "m"


async def test_commit_without_membership_only_for_empty_groups(coordinator: GroupCoordinator) -> None:
    await coordinator.commit("solo", {("t", 1): (5, "")})
    assert coordinator.committed("solo")[("t", 1)].offset == 5
    await coordinator.join("busy", topics=["t"])
    with pytest.raises(UnknownMemberError):
        await coordinator.commit("busy", {("t", 1): (5, "")})
    with pytest.raises(InvalidRequestError):
        await coordinator.commit("solo", {("t", 9): (5, "")})
    with pytest.raises(InvalidRequestError):
        await coordinator.commit("solo", {("t", 0): (-3, "")})


async def test_new_partitions_and_pattern_matches_rebalance(
    coordinator: GroupCoordinator, cluster: Cluster
) -> None:
    r = await coordinator.join("g", pattern=r"ev.*", auto_rejoin=True)
    assert r.assignment == []
    cluster.topics["events"] = 2
    coordinator.metadata_changed()
    assert coordinator.describe("g").members[0].assignment == [("events", 0), ("events", 1)]
    cluster.topics["events"] = 3
    coordinator.metadata_changed()
    description = coordinator.describe("g")
    assert description.generation == r.generation + 2
    assert description.members[0].assignment == [("events", 0), ("events", 1), ("events", 2)]


async def test_leave_rebalances_and_empties(coordinator: GroupCoordinator) -> None:
    a = await coordinator.join("g", topics=["t"], auto_rejoin=True)
    b = await coordinator.join("g", topics=["t"], auto_rejoin=True)
    coordinator.leave("g", a.member_id)
    assert [m.member_id for m in coordinator.describe("g").members] == [b.member_id]
    assert len(coordinator.describe("g").members[0].assignment) == 4
    coordinator.leave("g", b.member_id)
    coordinator.leave("g", b.member_id)  # idempotent
    assert coordinator.describe("g").state == "Empty"


async def test_offsets_of_empty_groups_expire(clock: Clock, cluster: Cluster) -> None:
    coordinator = GroupCoordinator(
        clock=clock, metadata=cluster.metadata, offsets=MemoryOffsetStore(), offsets_retention_ms=60_000
    )
    member = await coordinator.join("g", topics=["t"])
    await coordinator.commit(
        "g", {("t", 0): (3, "")}, member_id=member.member_id, generation=member.generation
    )
    clock.now += 120_000
    await coordinator.tick()  # the member timed out only now: the group just became empty
    assert coordinator.committed("g")[("t", 0)].offset == 3
    clock.now += 61_000
    await coordinator.tick()
    assert coordinator.committed("g") == {}
    assert "g" not in coordinator.group_ids()


async def test_bad_requests(coordinator: GroupCoordinator) -> None:
    with pytest.raises(InvalidRequestError):
        await coordinator.join("g")
    with pytest.raises(InvalidRequestError):
        await coordinator.join("", topics=["t"])
    with pytest.raises(InvalidRequestError):
        await coordinator.join("g", pattern="(")
    with pytest.raises(InvalidRequestError):
        await coordinator.join("g", topics=["t"], strategy="nope")
    with pytest.raises(UnknownMemberError):
        await coordinator.join("g", "ghost", topics=["t"])
