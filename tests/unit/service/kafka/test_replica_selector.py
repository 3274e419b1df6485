"""KIP-392's rack-aware choice of the replica a consumer reads (Kafka's RackAwareReplicaSelector)."""

from __future__ import annotations

from tierlog.service.kafka.handlers.fetching.replicas import select

LEADER = 1


def test_the_leader_serves_its_own_rack_and_consumers_of_no_known_rack() -> None:
    replicas = [(1, "a", 10), (2, "b", 10), (3, "c", 10)]
    assert select("a", LEADER, replicas) == LEADER
    assert select("", LEADER, replicas) == LEADER
    assert select("z", LEADER, replicas) == LEADER


def test_a_follower_in_the_consumers_rack_is_chosen_the_most_caught_up_first() -> None:
    replicas = [(1, "a", 10), (2, "b", 8), (3, "b", 9), (4, "b", 9), (5, None, 10)]
    assert select("b", LEADER, replicas) == 3  # highest log end offset, then the lowest id
    assert select("b", LEADER, [(1, "a", 10), (2, "b", 8)]) == 2
