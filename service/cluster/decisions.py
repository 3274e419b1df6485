"""The controller's pure decisions: the next state of a partition (leader, ISR, epochs) from what is live,
and the checks of a leader's ISR change. No I/O; the controller (:mod:`.controller`) reads the store, decides
with these, and commits fenced writes. Design notes 0008 and 0010.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tierlog.service.cluster.model import NO_LEADER, AlterPartitionRequest, PartitionState
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
)

__all__ = ["check_alter", "decide_partition"]


def _in_replica_order(members: Iterable[int], replicas: Sequence[int]) -> list[int]:
    members = list(members)
    return [r for r in replicas if r in members] + [m for m in members if m not in replicas]


def decide_partition(
    current: PartitionState | None,
    replicas: Sequence[int],
    live: set[int] | frozenset[int],
    *,
    controller_epoch: int,
    preferred: bool = False,
    unclean: bool = False,
    restarted: set[int] | frozenset[int] = frozenset(),
) -> tuple[PartitionState, str | None] | None:
    """The next state of one partition, and why its leader changed (``"new"``, ``"failover"``, ``"offline"``,
    ``"recovered"``, ``"preferred"``, ``"unclean"``; ``None`` when it did not); ``None`` when nothing
    changes. Pure.

    * No state yet: the live replicas, in replica order, are the ISR (an empty log is in sync everywhere)
      and the first of them leads with ``leader_epoch`` 0; no live replica: leader -1 and every replica in
      the ISR, so whichever returns first leads.
    * A broker that is gone leaves every ISR it is in, leader or not (KRaft fences it), but the last member
      is kept (Kafka keeps it, so that broker leads again when it returns).
    * The leader's broker gone, or no leader: the first live ISR member in replica order leads. With none,
      and ``unclean`` (the topic's ``unclean.leader.election.enable``), the first live replica leads with
      ``isr=(it,)``: records only the lost ISR held are gone. Otherwise -1, keeping the last ISR member.
    * ``preferred``: ``replicas[0]`` leads when it is live and in the ISR.
    * A leader change bumps ``leader_epoch``; every change bumps ``partition_epoch`` and sets
      ``controller_epoch``.
    * ``restarted``: live brokers registered after ``current`` was written (a new incarnation: a broker
      that restarted, maybe with a shorter log, before any controller saw it go). They are first decided
      as gone, as Kafka fences a bounced broker: out of the ISR, and a leader among them loses the lead
      with a bump. When that changes nothing (a leaderless partition waiting for them), they count as
      returned. The next pass, on the state so written, sees them live again.
    """
    if current is not None and restarted & live:
        fenced = decide_partition(
            current, replicas, live - restarted, controller_epoch=controller_epoch, unclean=unclean
        )
        if fenced is not None:
            return fenced
    if current is None:
        in_sync = tuple(r for r in replicas if r in live)
        if not in_sync:
            return PartitionState(NO_LEADER, 0, tuple(replicas), 0, controller_epoch), None
        return PartitionState(in_sync[0], 0, in_sync, 0, controller_epoch), "new"
    isr = tuple(m for m in current.isr if m in live)
    if not isr:
        isr = (current.leader,) if current.leader in current.isr else current.isr
    candidates = [m for m in _in_replica_order(current.isr, replicas) if m in live]
    leader, reason = current.leader, None
    if current.leader == NO_LEADER or current.leader not in live:
        if candidates:
            leader = candidates[0]
            reason = "recovered" if current.leader == NO_LEADER else "failover"
        elif unclean and any(r in live for r in replicas):
            leader = next(r for r in replicas if r in live)
            isr, reason = (leader,), "unclean"
        elif current.leader != NO_LEADER:
            leader, reason = NO_LEADER, "offline"
    elif preferred and replicas and replicas[0] != leader and replicas[0] in live and replicas[0] in isr:
        leader, reason = replicas[0], "preferred"
    if leader == current.leader and isr == current.isr:
        return None
    leader_epoch = current.leader_epoch + (1 if leader != current.leader else 0)
    state = PartitionState(leader, leader_epoch, isr, current.partition_epoch + 1, controller_epoch)
    return state, reason


def check_alter(
    request: AlterPartitionRequest, current: PartitionState, replicas: Sequence[int], where: str
) -> None:
    """The checks of an ISR change (AlterPartition) that need only the partition's current state and
    replicas: the sender leads at the current leader and partition epochs, and the new ISR is non-empty,
    without duplicates, holds the leader and only replicas. Liveness of added members is the controller's
    check. Pure.

    Raises:
        FencedLeaderEpochError, InvalidUpdateVersionError, InvalidRequestError, IneligibleReplicaError.
    """
    if request.broker_id != current.leader:
        raise FencedLeaderEpochError(
            f"Broker {request.broker_id} is not the leader of {where} (the leader is {current.leader})"
        )
    if request.leader_epoch != current.leader_epoch:
        raise FencedLeaderEpochError(
            f"Leader epoch {request.leader_epoch} of {where} is not the current one ({current.leader_epoch})"
        )
    if request.partition_epoch != current.partition_epoch:
        raise InvalidUpdateVersionError(
            f"Partition epoch {request.partition_epoch} of {where} is not the current one "
            f"({current.partition_epoch})"
        )
    new_isr = request.new_isr
    if not new_isr:
        raise InvalidRequestError(f"The new ISR of {where} is empty")
    if len(set(new_isr)) != len(new_isr):
        raise InvalidRequestError(f"The new ISR of {where} lists a broker twice: {list(new_isr)}")
    if current.leader not in new_isr:
        raise InvalidRequestError(
            f"The new ISR of {where} {list(new_isr)} does not hold its leader {current.leader}"
        )
    strangers = [m for m in new_isr if m not in replicas]
    if strangers:
        raise IneligibleReplicaError(
            f"Brokers {strangers} cannot be in the ISR of {where}: its replicas are {list(replicas)}"
        )
