"""KIP-848 consumer groups on a manual clock: epochs, revoke-before-assign reconciliation, fencing, static
membership, timeouts, commits; and a Hypothesis run of random heartbeats that never lets two members own
one partition."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.groups.classic import GroupError
from tierlog.service.groups.modern import (
    FENCED_MEMBER_EPOCH,
    INVALID_REQUEST,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroups,
    HeartbeatAnswer,
    Join,
)
from tierlog.service.groups.reconciliation import Partitions

T = "t"
ALL = frozenset((T, p) for p in range(4))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def now_ms(self) -> int:
        return self.now


def _groups(clock: Clock | None = None, partitions: int = 4) -> ConsumerGroups:
    return ConsumerGroups(clock or Clock(), lambda: {T: partitions, "other": 2}, session_timeout_ms=10_000)


def _join(groups: ConsumerGroups, member: str, **extra: object) -> HeartbeatAnswer:
    fields: dict[str, object] = {"rebalance_timeout_ms": 5_000, "topics": (T,), "owned": frozenset()}
    fields.update(extra)
    return groups.heartbeat("g", Join(member, 0, **fields))  # type: ignore[arg-type]


def _beat(
    groups: ConsumerGroups, member: str, epoch: int, owned: Partitions | None = None
) -> HeartbeatAnswer:
    return groups.heartbeat("g", Join(member, epoch, owned=owned))


def _code(call: object) -> int:
    with pytest.raises(GroupError) as caught:
        assert callable(call)
        call()
    return caught.value.code


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them() -> None:
    groups = _groups()
    first = _join(groups, "a")
    assert (first.member_epoch, first.assignment) == (1, ALL)
    second = _join(groups, "b")
    assert second.member_epoch == 2 and second.assignment == frozenset()  # all still owned by a
    revoke = _beat(groups, "a", 1)
    assert revoke.member_epoch == 1 and revoke.assignment is not None and len(revoke.assignment) == 2
    kept = revoke.assignment
    assert _beat(groups, "b", 2).assignment is None  # nothing released yet
    done = _beat(groups, "a", 1, owned=kept)
    assert done.member_epoch == 2 and done.assignment is None  # epoch moves, assignment unchanged
    released = _beat(groups, "b", 2)
    assert released.assignment == ALL - kept
    view = groups.describe("g")
    assert view is not None and view.state == "Stable" and view.group_epoch == 2


def test_leaving_gives_the_partitions_back_to_the_others() -> None:
    groups = _groups()
    _join(groups, "a")
    _join(groups, "b")
    kept = _beat(groups, "a", 1).assignment
    _beat(groups, "a", 1, owned=kept)
    assert _beat(groups, "b", 2).assignment
    assert groups.heartbeat("g", Join("b", -1)).member_epoch == -1
    back = _beat(groups, "a", 2)
    assert (back.member_epoch, back.assignment) == (3, ALL)
    assert _code(lambda: _beat(groups, "b", 2)) == UNKNOWN_MEMBER_ID


def test_epochs_are_fenced_except_a_lost_answer() -> None:
    groups = _groups()
    _join(groups, "a")
    assert _code(lambda: _beat(groups, "a", 5)) == FENCED_MEMBER_EPOCH
    assert _code(lambda: _beat(groups, "nobody", 1)) == UNKNOWN_MEMBER_ID
    groups.heartbeat("g", Join("a", 1, topics=(T, "other")))  # subscription grows: epoch 2
    assert _beat(groups, "a", 2).member_epoch == 2
    # the answer of epoch 2 was lost: epoch 1 with owned partitions still assigned is accepted
    assert _beat(groups, "a", 1, owned=frozenset({(T, 0)})).member_epoch == 2
    assert _code(lambda: _beat(groups, "a", 1)) == FENCED_MEMBER_EPOCH  # no owned partitions said


def test_a_static_member_comes_back_to_its_assignment_without_a_new_epoch() -> None:
    groups = _groups()
    _join(groups, "a", instance_id="i-a")
    _join(groups, "b", instance_id="i-b")
    kept = _beat(groups, "a", 1).assignment
    _beat(groups, "a", 1, owned=kept)
    given_b = _beat(groups, "b", 2).assignment
    assert _code(lambda: _join(groups, "b2", instance_id="i-b")) == UNRELEASED_INSTANCE_ID
    assert groups.heartbeat("g", Join("b", -2, instance_id="i-b")).member_epoch == -2
    back = _join(groups, "b2", instance_id="i-b")
    assert (back.member_epoch, back.assignment) == (2, given_b)
    view = groups.describe("g")
    assert view is not None and view.group_epoch == 2 and {m.member_id for m in view.members} == {"a", "b2"}


def test_a_static_member_that_left_while_revoking_releases_what_it_was_revoking() -> None:
    groups = _groups()
    _join(groups, "a", instance_id="i-a")
    _join(groups, "b")
    kept = _beat(groups, "a", 1).assignment  # told to give up two partitions
    assert kept is not None and len(kept) == 2
    groups.heartbeat("g", Join("a", -2, instance_id="i-a"))  # gone before revoking them
    back = _join(groups, "a2", instance_id="i-a")
    assert (back.member_epoch, back.assignment) == (2, kept)
    assert _beat(groups, "b", 2).assignment == ALL - kept  # the new incarnation does not hold them


def test_silent_and_slow_to_revoke_members_are_removed() -> None:
    clock = Clock()
    groups = _groups(clock)
    _join(groups, "a")
    _join(groups, "b")
    assert _beat(groups, "a", 1).assignment is not None  # told to revoke, never does
    clock.now += 6_000  # past a's rebalance timeout (5 s), within the session timeout
    _beat(groups, "b", 2)
    groups.tick()
    assert _code(lambda: _beat(groups, "a", 1)) == UNKNOWN_MEMBER_ID
    assert _beat(groups, "b", 2).assignment == ALL
    clock.now += 11_000
    groups.tick()
    assert not groups.active("g")


def test_commits_need_the_current_member_epoch() -> None:
    groups = _groups()
    assert groups.check_commit("g", "", -1) is False  # no members: a simple commit
    _join(groups, "a")
    assert groups.check_commit("g", "a", 1) is True
    assert _code(lambda: groups.check_commit("g", "a", 0)) == STALE_MEMBER_EPOCH
    assert _code(lambda: groups.check_commit("g", "", -1)) == UNKNOWN_MEMBER_ID
    _join(groups, "b")  # epoch 2: a must give up two partitions, and commits meanwhile
    revoking = _beat(groups, "a", 1).assignment
    assert revoking is not None
    assert groups.check_commit("g", "a", 1, ALL) is True  # still at epoch 1, owning all until revoked
    _beat(groups, "a", 1, owned=revoking)  # revoked: epoch 2
    assert groups.check_commit("g", "a", 1, revoking) is True  # sent before the answer moved it
    assert _code(lambda: groups.check_commit("g", "a", 1, ALL)) == STALE_MEMBER_EPOCH  # not its own now


def test_malformed_heartbeats_are_refused() -> None:
    groups = _groups()
    assert _code(lambda: _join(groups, "a", owned=frozenset({(T, 0)}))) == INVALID_REQUEST
    assert _code(lambda: _join(groups, "a", rebalance_timeout_ms=-1)) == INVALID_REQUEST
    assert _code(lambda: _join(groups, "a", topics=None)) == INVALID_REQUEST
    assert _code(lambda: _join(groups, "a", assignor="sticky")) == UNSUPPORTED_ASSIGNOR
    assert not groups.active("g")


def test_range_assigns_ranges_and_a_regex_subscribes_to_matching_topics() -> None:
    groups = _groups()
    _join(groups, "a", assignor="range", topics=None, regex="oth.*")
    again = _join(groups, "a", assignor="range", topics=None, regex="oth.*")
    assert again.assignment == frozenset({("other", 0), ("other", 1)})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["beat", "join", "leave", "lag"])), max_size=40
    )
)
def test_no_partition_is_ever_owned_by_two_members(steps: list[tuple[str, str]]) -> None:
    groups = _groups(partitions=5)
    epochs: dict[str, int] = {}
    owned: dict[str, Partitions] = {}
    for member, action in steps:
        if action == "join" or member not in epochs:
            answer = _join(groups, member)
        elif action == "leave":
            groups.heartbeat("g", Join(member, -1))
            del epochs[member], owned[member]
            continue
        elif action == "lag":  # a heartbeat that does not say what it owns
            answer = _beat(groups, member, epochs[member])
        else:
            answer = _beat(groups, member, epochs[member], owned=owned[member])
        epochs[member] = answer.member_epoch
        if answer.assignment is not None:
            owned[member] = answer.assignment  # the client revokes and takes what it is given at once
        claimed = [tp for parts in owned.values() for tp in parts]
        assert len(claimed) == len(set(claimed)), owned
