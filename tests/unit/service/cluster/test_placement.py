"""Replica placement: Kafka's worked examples, and its properties over any broker set (Hypothesis)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.cluster.placement import assign_replicas, rack_alternated
from tierlog.wire.errors import InvalidConfigError

Brokers = list[tuple[int, str | None]]


def test_rack_unaware_example_five_brokers() -> None:
    """5 brokers, 10 partitions, 3 replicas, start 0: the second round shifts the followers by one."""
    brokers: Brokers = [(i, None) for i in range(5)]
    assert assign_replicas(brokers, 10, 3, start_index=0) == [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]  # fmt: skip


def test_rack_alternated_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_example_six_brokers_three_racks() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    brokers: Brokers = list(racks.items())
    assert assign_replicas(brokers, 12, 3, start_index=0) == [
        (0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3),
        (0, 4, 2), (3, 2, 0), (1, 0, 3), (5, 3, 1), (4, 1, 5), (2, 5, 4),
    ]  # fmt: skip


def test_added_partitions_continue_the_pattern() -> None:
    brokers: Brokers = [(i, None) for i in range(5)]
    whole = assign_replicas(brokers, 10, 3, start_index=0)
    assert assign_replicas(brokers, 4, 3, first_partition=6, start_index=0) == whole[6:]


def test_broker_order_does_not_matter() -> None:
    brokers: Brokers = [(3, None), (1, None), (2, None)]
    assert assign_replicas(brokers, 3, 2, start_index=0) == [(1, 2), (2, 3), (3, 1)]


def test_mixed_racks_fall_back_to_rack_unaware() -> None:
    brokers: Brokers = [(0, "a"), (1, None), (2, "b")]
    assert assign_replicas(brokers, 3, 2, start_index=0) == [(0, 1), (1, 2), (2, 0)]


@pytest.mark.parametrize(
    ("partitions", "factor", "message"),
    [
        (3, 4, "Replication factor: 4 larger than available brokers: 3."),
        (0, 1, "Number of partitions must be larger than 0."),
        (1, 0, "Replication factor must be larger than 0."),
    ],
)
def test_invalid_requests(partitions: int, factor: int, message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        assign_replicas([(1, None), (2, None), (3, None)], partitions, factor)
    assert str(caught.value) == message


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Brokers, int, int, int | None]:
    ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    if draw(st.booleans()):
        rack_names = draw(st.lists(st.sampled_from("abcdef"), min_size=len(ids), max_size=len(ids)))
        brokers: Brokers = list(zip(ids, rack_names, strict=True))
    else:
        brokers = [(i, None) for i in ids]
    factor = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(1, 60))
    start = draw(st.none() | st.integers(0, len(ids) - 1))
    return brokers, partitions, factor, start


@given(clusters())
def test_replicas_are_distinct_known_brokers(case: tuple[Brokers, int, int, int | None]) -> None:
    brokers, partitions, factor, start = case
    result = assign_replicas(brokers, partitions, factor, start_index=start)
    known = {broker_id for broker_id, _ in brokers}
    assert len(result) == partitions
    for replicas in result:
        assert len(replicas) == factor
        assert len(set(replicas)) == factor
        assert set(replicas) <= known


@given(clusters())
def test_leaders_are_balanced(case: tuple[Brokers, int, int, int | None]) -> None:
    brokers, partitions, factor, start = case
    leaders = Counter(
        replicas[0] for replicas in assign_replicas(brokers, partitions, factor, start_index=start)
    )
    counts = [leaders.get(broker_id, 0) for broker_id, _ in brokers]
    assert max(counts) - min(counts) <= 1


@given(clusters())
def test_replicas_span_racks_while_racks_last(case: tuple[Brokers, int, int, int | None]) -> None:
    brokers, partitions, factor, start = case
    rack_of = dict(brokers)
    racks = set(rack_of.values())
    if None in racks:
        return
    for replicas in assign_replicas(brokers, partitions, factor, start_index=start):
        assert len({rack_of[b] for b in replicas}) == min(factor, len(racks))


@given(st.integers(2, 10), st.integers(2, 4))
def test_followers_of_a_broker_spread_over_the_others(count: int, rounds: int) -> None:
    """Over ``count - 1`` full rounds, the partitions one broker leads get every other broker as their
    first follower (the shifting offset), not always its neighbour."""
    brokers: Brokers = [(i, None) for i in range(count)]
    result = assign_replicas(brokers, count * (count - 1), 2, start_index=0)
    followers = {replicas[1] for replicas in result if replicas[0] == 0}
    assert followers == set(range(1, count))


@given(clusters(), st.data())
def test_growing_a_topic_matches_creating_it_bigger(
    case: tuple[Brokers, int, int, int | None], data: st.DataObject
) -> None:
    brokers, partitions, factor, start = case
    fixed = 0 if start is None else start
    whole = assign_replicas(brokers, partitions, factor, start_index=fixed)
    cut = data.draw(st.integers(1, partitions))
    head = assign_replicas(brokers, cut, factor, start_index=fixed)
    tail = (
        assign_replicas(brokers, partitions - cut, factor, first_partition=cut, start_index=fixed)
        if cut < partitions
        else []
    )
    assert head + tail == whole
