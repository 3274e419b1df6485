"""How a KIP-848 member moves from its current assignment to its target, one heartbeat at a time (Kafka's
``CurrentAssignmentBuilder``): partitions are revoked before any is assigned, and a partition is given to
its new owner only once the old owner has released it.

A member is in one of three states::

    STABLE --new target epoch, something to revoke--> UNREVOKED_PARTITIONS (epoch unchanged)
    STABLE --new target epoch, nothing to revoke--> STABLE or UNRELEASED_PARTITIONS (epoch = target's)
    UNREVOKED_PARTITIONS --the member's owned partitions no longer hold the revoked ones--> as above
    UNRELEASED_PARTITIONS --the other owners released them--> STABLE

Pure functions over immutable values: no I/O, no clock, deterministic.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MemberAssignment", "MemberState", "Partitions", "advance", "as_partitions", "flatten"]

Partitions = frozenset[tuple[str, int]]
EMPTY: Partitions = frozenset()


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Where a member stands: its epoch and the one before, its state, the partitions it may consume
    (``assigned``) and those it must give up first (``revoking``)."""

    epoch: int
    previous_epoch: int
    state: MemberState = MemberState.STABLE
    assigned: Partitions = EMPTY
    revoking: Partitions = EMPTY

    @property
    def owned(self) -> Partitions:
        """Every partition the member may still hold: assigned or not yet revoked."""
        return self.assigned | self.revoking


def as_partitions(by_topic: Mapping[str, Iterable[int]]) -> Partitions:
    return frozenset((topic, p) for topic, parts in by_topic.items() for p in parts)


def flatten(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """``{topic: sorted partitions}`` of ``partitions``, topics sorted."""
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return out


def advance(
    current: MemberAssignment,
    target_epoch: int,
    target: Partitions,
    owned: Partitions | None,
    owned_by_others: Callable[[tuple[str, int]], bool],
) -> MemberAssignment:
    """The member's next state given the group's target (``target_epoch``, ``target``), the partitions the
    member says it owns (None: not said in this heartbeat) and whether another member still owns a
    partition."""
    state = current
    if state.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & state.revoking:
            return state  # still waiting for the member to revoke
        state = MemberAssignment(state.epoch, state.previous_epoch, MemberState.STABLE, state.assigned)
    if state.epoch == target_epoch and state.state is MemberState.STABLE:
        return state
    kept = state.assigned & target
    revoke = state.assigned - target
    if revoke:
        return MemberAssignment(
            state.epoch, state.previous_epoch, MemberState.UNREVOKED_PARTITIONS, kept, revoke
        )
    new = target - kept
    unreleased = frozenset(tp for tp in new if owned_by_others(tp))
    next_state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = state.epoch if state.epoch != target_epoch else state.previous_epoch
    return MemberAssignment(target_epoch, previous, next_state, kept | (new - unreleased))
