"""Partition assignors for consumer groups: ``range``, ``roundrobin`` and ``sticky``.

The broker computes assignments (the coordinator runs the group's chosen strategy when a generation
completes), so every client gets the same behaviour whichever language it is written in.

All three guarantee, for any input:

* every partition of a topic that at least one member subscribes to is assigned to exactly one member
  that subscribes to that topic;
* a member never gets a partition of a topic it does not subscribe to;
* when all members subscribe to the same topics, member loads differ by at most one; more members than
  partitions leaves the extra members with nothing, as Kafka users expect.

``sticky`` also keeps every member's previously owned partitions where that does not break the balance
(the ``cooperative-sticky`` idea: a rebalance moves as few partitions as it can).

Pure functions: no I/O, safe to call from any thread, deterministic for a given input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierlog.wire.errors import InvalidRequestError

__all__ = ["TopicPartition", "Member", "Assignment", "STRATEGIES", "assign"]

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True)
class Member:
    """One group member as an assignor sees it."""

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...] = field(default=())


def _empty(members: Sequence[Member]) -> Assignment:
    return {m.member_id: [] for m in members}


def _range(members: Sequence[Member], partitions: Mapping[str, int]) -> Assignment:
    result = _empty(members)
    for topic in sorted(partitions):
        subscribers = sorted(m.member_id for m in members if topic in m.topics)
        if not subscribers:
            continue
        count = partitions[topic]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            take = share + (1 if i < extra else 0)
            result[member_id].extend((topic, p) for p in range(start, start + take))
            start += take
    return result


def _roundrobin(members: Sequence[Member], partitions: Mapping[str, int]) -> Assignment:
    result = _empty(members)
    ordered = sorted(members, key=lambda m: m.member_id)
    if not ordered:
        return result
    cursor = 0
    for topic in sorted(partitions):
        if not any(topic in m.topics for m in ordered):
            continue
        for p in range(partitions[topic]):
            while topic not in ordered[cursor % len(ordered)].topics:
                cursor += 1
            result[ordered[cursor % len(ordered)].member_id].append((topic, p))
            cursor += 1
    return result


def _sticky(members: Sequence[Member], partitions: Mapping[str, int]) -> Assignment:
    by_id = {m.member_id: m for m in members}
    result = _empty(members)
    all_partitions = [(t, p) for t in sorted(partitions) for p in range(partitions[t])]
    wanted = [tp for tp in all_partitions if any(tp[0] in m.topics for m in members)]
    if not members:
        return result
    # A member may keep at most the balanced quota of what it owned; ties broken by member id.
    quota_floor, quota_extra = divmod(len(wanted), len(members))
    owner: dict[TopicPartition, str] = {}
    for member_id in sorted(by_id, key=lambda mid: (-len(by_id[mid].owned), mid)):
        member = by_id[member_id]
        cap = quota_floor + (1 if quota_extra > 0 else 0)
        kept = 0
        for tp in sorted(set(member.owned)):
            topic, p = tp
            valid = topic in member.topics and topic in partitions and 0 <= p < partitions[topic]
            if valid and tp not in owner and kept < cap:
                owner[tp] = member_id
                kept += 1
        if kept > quota_floor:
            quota_extra -= 1
    for tp, member_id in owner.items():
        result[member_id].append(tp)

    def least_loaded(topic: str) -> str:
        candidates = [mid for mid, m in by_id.items() if topic in m.topics]
        return min(candidates, key=lambda mid: (len(result[mid]), mid))

    for tp in wanted:
        if tp not in owner:
            member_id = least_loaded(tp[0])
            owner[tp] = member_id
            result[member_id].append(tp)
    _rebalance(result, by_id)
    for assigned in result.values():
        assigned.sort()
    return result


def _rebalance(result: Assignment, by_id: Mapping[str, Member]) -> None:
    """Move partitions from the most to the least loaded eligible member until no move helps.

    Each move strictly lowers the sum of squared loads, so the loop ends.
    """
    moved = True
    while moved:
        moved = False
        for giver in sorted(result, key=lambda mid: (-len(result[mid]), mid)):
            for tp in sorted(result[giver], reverse=True):
                takers = [
                    mid
                    for mid, m in by_id.items()
                    if tp[0] in m.topics and len(result[mid]) + 1 < len(result[giver])
                ]
                if takers:
                    taker = min(takers, key=lambda mid: (len(result[mid]), mid))
                    result[giver].remove(tp)
                    result[taker].append(tp)
                    moved = True
                    break
            if moved:
                break


STRATEGIES: dict[str, Callable[[Sequence[Member], Mapping[str, int]], Assignment]] = {
    "range": _range,
    "roundrobin": _roundrobin,
    "sticky": _sticky,
    "cooperative-sticky": _sticky,
}


def assign(strategy: str, members: Sequence[Member], partitions: Mapping[str, int]) -> Assignment:
    """Assign the partitions of ``partitions`` (topic -> partition count) to ``members``.

    Returns ``{member_id: sorted [(topic, partition), ...]}`` with an entry for every member.

    Raises:
        InvalidRequestError: the strategy is unknown or two members share an id.
    """
    try:
        assignor = STRATEGIES[strategy]
    except KeyError:
        known = ", ".join(sorted(STRATEGIES))
        raise InvalidRequestError(
            f"unknown partition assignment strategy {strategy!r} (known: {known})"
        ) from None
    if len({m.member_id for m in members}) != len(members):
        raise InvalidRequestError("duplicate member ids in one group")
    result = assignor(members, partitions)
    for assigned in result.values():
        assigned.sort()
    return result
