"""Kafka's classic group protocol (client-side assignment) as a pure state machine on a manual clock:
joins, leader election, protocol choice, the leader's assignment handed out, rebalances, timeouts,
static membership and fencing. No sockets, no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from tierlog.service.groups.classic import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    ClassicGroups,
    ClassicState,
    GroupError,
    JoinAnswer,
)
from tierlog.service.groups.consumer_protocol import (
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)

SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def now_ms(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def groups(clock: Clock) -> ClassicGroups:
    return ClassicGroups(clock)


def _protocols(*names: str) -> list[tuple[str, bytes]]:
    return [(name, f"{name}-meta".encode()) for name in names]


def join(
    groups: ClassicGroups,
    member_id: str = "",
    *,
    instance_id: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
) -> asyncio.Task[JoinAnswer]:
    return asyncio.ensure_future(
        groups.join(
            "g",
            member_id,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols if protocols is not None else _protocols("range"),
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            client_id="c",
        )
    )


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_first_join_gets_an_id_then_a_generation_and_its_own_assignment(
    groups: ClassicGroups,
) -> None:
    with pytest.raises(GroupError) as required:
        await groups.join(
            "g",
            "",
            instance_id=None,
            protocol_type="consumer",
            protocols=_protocols("range"),
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            client_id="c",
            require_known_member_id=True,
        )
    assert required.value.code == MEMBER_ID_REQUIRED
    member_id = required.value.member_id
    answer = await join(groups, member_id)
    assert (answer.generation, answer.leader_id, answer.member_id) == (1, member_id, member_id)
    assert answer.members == [(member_id, None, b"range-meta")]
    assert groups.state("g") is ClassicState.COMPLETING_REBALANCE
    _, protocol, assignment = await groups.sync("g", member_id, 1, assignments=[(member_id, b"all")])
    assert (protocol, assignment) == ("range", b"all")
    assert groups.state("g") is ClassicState.STABLE


async def test_the_leader_gets_every_members_metadata_and_followers_wait_for_its_assignment(
    groups: ClassicGroups,
) -> None:
    leader = (await join(groups)).member_id
    await groups.sync("g", leader, 1, assignments=[(leader, b"a")])
    second = join(groups, protocols=_protocols("sticky", "range"))  # a newcomer starts a rebalance
    await settle()
    first_answer, second_answer = await join(groups, leader), await second
    assert first_answer.generation == second_answer.generation == 2
    assert first_answer.protocol == "range"  # the only protocol both support
    assert {m for m, _, _ in first_answer.members} == {leader, second_answer.member_id}
    assert second_answer.members == []
    follower = asyncio.ensure_future(groups.sync("g", second_answer.member_id, 2))
    await settle()
    assert not follower.done()
    await groups.sync("g", leader, 2, assignments=[(leader, b"a"), (second_answer.member_id, b"b")])
    assert (await follower)[2] == b"b"


async def test_heartbeats_say_rebalance_illegal_generation_or_unknown_member(groups: ClassicGroups) -> None:
    leader = (await join(groups)).member_id
    await groups.sync("g", leader, 1, assignments=[(leader, b"a")])
    groups.heartbeat("g", leader, 1)
    with pytest.raises(GroupError) as stale:
        groups.heartbeat("g", leader, 0)
    assert stale.value.code == ILLEGAL_GENERATION
    with pytest.raises(GroupError) as unknown:
        groups.heartbeat("g", "nobody", 1)
    assert unknown.value.code == UNKNOWN_MEMBER_ID
    newcomer = join(groups)
    await settle()
    with pytest.raises(GroupError) as rebalancing:
        groups.heartbeat("g", leader, 1)
    assert rebalancing.value.code == REBALANCE_IN_PROGRESS
    await join(groups, leader)
    assert (await newcomer).generation == 2


async def test_a_silent_member_expires_and_one_that_does_not_rejoin_is_dropped(
    groups: ClassicGroups, clock: Clock
) -> None:
    leader = (await join(groups)).member_id
    await groups.sync("g", leader, 1, assignments=[(leader, b"a")])
    newcomer = join(groups)
    await settle()
    clock.now += REBALANCE_MS  # the leader never rejoins
    groups.tick()
    answer = await newcomer
    assert (answer.generation, answer.leader_id) == (2, answer.member_id)
    await groups.sync("g", answer.member_id, 2, assignments=[])
    clock.now += SESSION_MS + 1  # and the newcomer goes silent
    groups.tick()
    assert not groups.active("g")


async def test_a_leave_rebalances_the_others(groups: ClassicGroups) -> None:
    first = join(groups)
    await settle()
    a = (await first).member_id
    await groups.sync("g", a, 1, assignments=[(a, b"a")])
    newcomer = join(groups)
    await settle()
    await join(groups, a)
    b = (await newcomer).member_id
    await groups.sync("g", a, 2, assignments=[(a, b"a"), (b, b"b")])
    groups.leave("g", b)
    assert groups.state("g") is ClassicState.PREPARING_REBALANCE
    alone = await join(groups, a)
    assert (alone.generation, [m for m, _, _ in alone.members]) == (3, [a])


async def test_a_static_member_restarts_without_a_rebalance_and_fences_its_old_id(
    groups: ClassicGroups,
) -> None:
    old = (await join(groups, instance_id="i-1")).member_id
    await groups.sync("g", old, 1, assignments=[(old, b"mine")])
    restarted = await join(groups, instance_id="i-1")
    assert restarted.member_id != old
    assert restarted.generation == 1
    assert groups.state("g") is ClassicState.STABLE
    assert (await groups.sync("g", restarted.member_id, 1, instance_id="i-1"))[2] == b"mine"
    with pytest.raises(GroupError) as fenced:
        groups.heartbeat("g", old, 1, "i-1")
    assert fenced.value.code == FENCED_INSTANCE_ID


async def test_a_member_with_another_protocol_type_or_no_common_protocol_is_refused(
    groups: ClassicGroups,
) -> None:
    await join(groups)
    for task in (join(groups, protocol_type="connect"), join(groups, protocols=_protocols("sticky"))):
        with pytest.raises(GroupError) as refused:
            await task
        assert refused.value.code == INCONSISTENT_GROUP_PROTOCOL


async def test_commits_need_the_current_generation_except_simple_commits_to_an_empty_group(
    groups: ClassicGroups,
) -> None:
    assert groups.check_commit("g", "", -1) is False
    member = (await join(groups)).member_id
    with pytest.raises(GroupError) as completing:
        groups.check_commit("g", member, 1)
    assert completing.value.code == REBALANCE_IN_PROGRESS
    await groups.sync("g", member, 1, assignments=[])
    assert groups.check_commit("g", member, 1) is True
    for member_id, generation, code in ((member, 7, ILLEGAL_GENERATION), ("", -1, UNKNOWN_MEMBER_ID)):
        with pytest.raises(GroupError) as refused:
            groups.check_commit("g", member_id, generation)
        assert refused.value.code == code


def test_consumer_protocol_bytes_round_trip() -> None:
    assert decode_subscription_topics(encode_subscription(["a", "bb"])) == ["a", "bb"]
    assert decode_subscription_topics(b"\x00") is None
    assert encode_assignment([("t", 1), ("t", 0)]) == (
        b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00"
        b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff"
    )


async def test_a_static_member_restarting_during_a_rebalance_joins_it_under_its_new_id(
    groups: ClassicGroups,
) -> None:
    old = (await join(groups, instance_id="i-1")).member_id
    await groups.sync("g", old, 1, assignments=[(old, b"mine")])
    newcomer = join(groups)
    await settle()
    restarted = join(groups, instance_id="i-1")
    answers = await newcomer, await restarted
    assert answers[0].generation == answers[1].generation == 2
    assert answers[1].member_id != old
    assert answers[1].leader_id == answers[1].member_id  # it keeps the old incarnation's leadership
