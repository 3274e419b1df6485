"""Properties of the group assignors: exactly-once coverage, subscription respect, balance, stickiness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.groups.assignors import STRATEGIES, Member, assign
from tierlog.wire.errors import InvalidRequestError

TOPICS = ["a", "b", "c"]

partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
member_ids = st.lists(st.text("mnopqrs", min_size=1, max_size=4), min_size=1, max_size=7, unique=True)


def check_coverage(
    result: dict[str, list[tuple[str, int]]], members: list[Member], parts: dict[str, int]
) -> None:
    owners: dict[tuple[str, int], str] = {}
    for member_id, assigned in result.items():
        for tp in assigned:
            assert tp not in owners, f"{tp} assigned twice"
            owners[tp] = member_id
    subscribed = {t for m in members for t in m.topics}
    expected = {(t, p) for t, n in parts.items() if t in subscribed for p in range(n)}
    assert set(owners) == expected
    by_id = {m.member_id: m for m in members}
    for tp, member_id in owners.items():
        assert tp[0] in by_id[member_id].topics
    assert set(result) == set(by_id)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@given(parts=partition_counts, ids=member_ids, data=st.data())
@settings(max_examples=150, deadline=None)
def test_every_partition_exactly_once(
    strategy: str, parts: dict[str, int], ids: list[str], data: st.DataObject
) -> None:
    members = [Member(mid, frozenset(data.draw(st.sets(st.sampled_from(TOPICS), min_size=1)))) for mid in ids]
    check_coverage(assign(strategy, members, parts), members, parts)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@given(parts=partition_counts, ids=member_ids)
@settings(max_examples=150, deadline=None)
def test_balanced_within_one_for_equal_subscriptions(
    strategy: str, parts: dict[str, int], ids: list[str]
) -> None:
    members = [Member(mid, frozenset(parts)) for mid in ids]
    result = assign(strategy, members, parts)
    loads = [len(v) for v in result.values()]
    if strategy == "range":
        # range balances per topic, as Kafka's does: within one for each topic
        for topic, count in parts.items():
            per_topic = [sum(1 for t, _ in v if t == topic) for v in result.values()]
            assert max(per_topic) - min(per_topic) <= 1
            assert sum(per_topic) == count
    else:
        assert max(loads) - min(loads) <= 1


def test_five_members_four_partitions_leaves_one_idle() -> None:
    members = [Member(f"m{i}", frozenset({"t"})) for i in range(5)]
    for strategy in STRATEGIES:
        result = assign(strategy, members, {"t": 4})
        assert sorted(len(v) for v in result.values()) == [0, 1, 1, 1, 1]


def test_range_matches_kafka_layout() -> None:
    members = [Member("c1", frozenset({"t0", "t1"})), Member("c0", frozenset({"t0", "t1"}))]
    result = assign("range", members, {"t0": 3, "t1": 3})
    assert result == {"c0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "c1": [("t0", 2), ("t1", 2)]}


def test_roundrobin_interleaves() -> None:
    members = [Member("c0", frozenset({"t0", "t1"})), Member("c1", frozenset({"t0", "t1"}))]
    result = assign("roundrobin", members, {"t0": 3, "t1": 3})
    assert result == {"c0": [("t0", 0), ("t0", 2), ("t1", 1)], "c1": [("t0", 1), ("t1", 0), ("t1", 2)]}


@given(parts=st.integers(1, 24), before=st.integers(1, 6), after=st.integers(1, 6))
@settings(max_examples=150, deadline=None)
def test_sticky_moves_no_more_than_needed(parts: int, before: int, after: int) -> None:
    topics = {"t": parts}
    first = assign("sticky", [Member(f"m{i}", frozenset({"t"})) for i in range(before)], topics)
    survivors = [Member(f"m{i}", frozenset({"t"}), tuple(first.get(f"m{i}", []))) for i in range(after)]
    second = assign("sticky", survivors, topics)
    check_coverage(second, survivors, topics)
    # every member keeps min(what it had, its new fair share floor)
    floor = parts // after
    for member in survivors:
        kept = set(member.owned) & set(second[member.member_id])
        assert len(kept) >= min(len(member.owned), floor)


def test_sticky_keeps_assignment_when_a_member_leaves() -> None:
    topics = {"t": 6}
    first = assign("sticky", [Member(m, frozenset({"t"})) for m in ("a", "b", "c")], topics)
    second = assign("sticky", [Member(m, frozenset({"t"}), tuple(first[m])) for m in ("a", "b")], topics)
    for m in ("a", "b"):
        assert set(first[m]) <= set(second[m])
    assert sorted(len(v) for v in second.values()) == [3, 3]


def test_unknown_strategy_and_duplicate_members_are_rejected() -> None:
    with pytest.raises(InvalidRequestError, match="unknown partition assignment strategy"):
        assign("nope", [Member("a", frozenset({"t"}))], {"t": 1})
    with pytest.raises(InvalidRequestError, match="duplicate"):
        assign("range", [Member("a", frozenset({"t"})), Member("a", frozenset({"t"}))], {"t": 1})
