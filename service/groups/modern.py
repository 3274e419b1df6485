"""KIP-848's consumer groups: the broker assigns partitions and each member reconciles towards its target
through heartbeats (ConsumerGroupHeartbeat), without a group-wide barrier.

Per group, the *group epoch* grows whenever a member joins or leaves or the subscriptions (or the partition
counts of the subscribed topics) change; each bump computes a new *target assignment* at once with the
group's server assignor (``uniform``: balanced and sticky; ``range``: per topic, in ranges). Each member
then moves to its share with :func:`~tierlog.service.groups.reconciliation.advance`: revoke first, keep
the epoch until revoked; receive a partition only once its previous owner released it.

* Join with epoch 0 (a known member id joining again drops what it held), leave with -1, a static member
  (``group.instance.id``) leaves for a while with -2: its place and assignment wait a session timeout for
  a new incarnation, which takes them over without a rebalance (UNRELEASED_INSTANCE_ID while the old one
  is still active).
* A heartbeat with a newer epoch than the member's, or an older one that is not the previous epoch with
  owned partitions all still assigned (a lost answer), is FENCED_MEMBER_EPOCH; an unknown member is
  UNKNOWN_MEMBER_ID. A member silent for the session timeout, or that does not revoke within its
  rebalance timeout, is removed.

Members live in memory only: after the coordinator moves, members learn UNKNOWN_MEMBER_ID and rejoin
(Kafka replays them from ``__consumer_offsets``). Errors are Kafka's codes (:class:`GroupError`). Time
comes from an injected clock and advances through :meth:`ConsumerGroups.tick`. Event-loop only, not
thread-safe; no I/O.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tierlog.service.groups.assignors import Member, assign
from tierlog.service.groups.classic import GroupError
from tierlog.service.groups.coordinator import Clock
from tierlog.service.groups.patterns import compile_pattern, matching_topics
from tierlog.service.groups.reconciliation import (
    EMPTY,
    MemberAssignment,
    MemberState,
    Partitions,
    advance,
)
from tierlog.wire.errors import InvalidRequestError

__all__ = ["ASSIGNORS", "ConsumerGroups", "GroupView", "HeartbeatAnswer", "Join", "MemberView"]

log = logging.getLogger("tierlog.groups.consumer")

ASSIGNORS = {"uniform": "sticky", "range": "range"}  # server assignor -> the assignor module's strategy
DEFAULT_ASSIGNOR = "uniform"
LEAVE = -1
STATIC_LEAVE = -2

UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128


@dataclass(frozen=True, slots=True)
class Join:
    """One heartbeat's fields; None means "unchanged since the last heartbeat", as KIP-848 says."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    assignment: Partitions | None  # None: unchanged since the last answer


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    regex: str | None
    assigned: Partitions
    target: Partitions


@dataclass(frozen=True, slots=True)
class GroupView:
    state: str  # Kafka's: Empty, Reconciling, Stable
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[MemberView]


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: frozenset[str] = frozenset()
    regex: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    last_seen_ms: int = 0
    current: MemberAssignment = field(default_factory=lambda: MemberAssignment(0, -1))
    revoke_deadline_ms: int | None = None
    sent: Partitions | None = None  # the assignment last answered

    def subscribed(self, topics: Mapping[str, int]) -> set[str]:
        found = {t for t in self.topics if t in topics}
        if self.regex is not None:
            found.update(matching_topics(compile_pattern(self.regex), topics))
        return found


@dataclass
class _Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = DEFAULT_ASSIGNOR
    members: dict[str, _Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    snapshot: dict[str, int] = field(default_factory=dict)  # subscribed topics' partition counts


class ConsumerGroups:
    """The KIP-848 groups of one coordinator shard. ``metadata`` gives every topic's partition count."""

    def __init__(
        self,
        clock: Clock,
        metadata: Callable[[], Mapping[str, int]],
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
    ) -> None:
        self._clock = clock
        self._metadata = metadata
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._groups: dict[str, _Group] = {}

    # -- inspection -----------------------------------------------------------------------------------

    def active(self, group_id: str) -> bool:
        """Whether ``group_id`` is a consumer group with members here."""
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def group_ids(self) -> list[str]:
        return sorted(g for g in self._groups if self.active(g))

    def describe(self, group_id: str) -> GroupView | None:
        """The group's state and members; None when it is not an active consumer group here."""
        group = self._groups.get(group_id)
        if group is None or not group.members:
            return None
        members = [
            MemberView(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.current.epoch,
                m.client_id,
                m.client_host,
                tuple(sorted(m.topics)),
                m.regex,
                m.current.assigned,
                group.target.get(m.member_id, EMPTY),
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return GroupView(self._state(group), group.epoch, group.assignment_epoch, group.assignor, members)

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        if group is None:
            return set()
        topics = self._metadata()
        return {t for m in group.members.values() for t in m.subscribed(topics)}

    @staticmethod
    def _state(group: _Group) -> str:
        if not group.members:
            return "Empty"
        settled = all(
            m.current.epoch in (group.assignment_epoch, STATIC_LEAVE)
            and m.current.state is MemberState.STABLE
            for m in group.members.values()
        )
        return "Stable" if settled else "Reconciling"

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------------

    def heartbeat(self, group_id: str, join: Join) -> HeartbeatAnswer:
        """One ConsumerGroupHeartbeat: join, stay, reconcile or leave.

        Raises:
            GroupError: INVALID_REQUEST (a malformed heartbeat), UNSUPPORTED_ASSIGNOR, UNKNOWN_MEMBER_ID,
                FENCED_MEMBER_EPOCH, FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID.
        """
        self._validate(join)
        if join.member_epoch in (LEAVE, STATIC_LEAVE):
            return self._leave(group_id, join)
        now = self._clock.now_ms()
        if join.member_epoch == 0:
            group = self._groups.setdefault(group_id, _Group(group_id))
            member, changed = self._join(group, join)
        else:
            group, member = self._known(group_id, join)
            self._check_epoch(member, join)
            changed = False
        changed |= self._update(member, join)
        member.last_seen_ms = now
        snapshot = self._snapshot(group)
        if changed or snapshot != group.snapshot:
            self._bump(group, snapshot, f"member {member.member_id} joined or changed its subscription")
        self._reconcile(group, member, join.owned)
        full = join.member_epoch == 0 or (
            join.rebalance_timeout_ms != -1 and join.topics is not None and join.owned is not None
        )
        assigned = member.current.assigned
        answer = assigned if full or assigned != member.sent else None
        member.sent = assigned
        return HeartbeatAnswer(member.member_id, member.current.epoch, answer)

    @staticmethod
    def _validate(join: Join) -> None:
        def bad(message: str) -> GroupError:
            return GroupError(INVALID_REQUEST, message)

        if join.member_epoch < STATIC_LEAVE:
            raise bad(f"member epoch {join.member_epoch} is not valid")
        if join.member_epoch == STATIC_LEAVE and join.instance_id is None:
            raise bad("InstanceId can't be null when leaving with epoch -2.")
        if join.member_epoch == 0:
            if join.rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if join.topics is None and join.regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
            if join.owned:
                raise bad("TopicPartitions must be empty when (re-)joining.")
        if join.member_epoch > 0 and not join.member_id:
            raise bad("MemberId can't be empty.")
        if join.assignor is not None and join.assignor not in ASSIGNORS:
            raise GroupError(
                UNSUPPORTED_ASSIGNOR, f"server assignor {join.assignor!r} is not one of uniform, range"
            )
        if join.regex is not None:
            try:
                compile_pattern(join.regex)
            except InvalidRequestError as err:
                raise GroupError(INVALID_REGULAR_EXPRESSION, err.message) from None

    def _join(self, group: _Group, join: Join) -> tuple[_Member, bool]:
        """The member an epoch-0 heartbeat makes or resets; True when the group changed."""
        member_id = join.member_id or f"{uuid.uuid4()}"
        instance = join.instance_id
        previous_id = group.instances.get(instance) if instance is not None else None
        if previous_id is not None and previous_id != member_id:
            previous = group.members[previous_id]
            if previous.current.epoch != STATIC_LEAVE:
                raise GroupError(
                    UNRELEASED_INSTANCE_ID,
                    f"static member {instance} is still member {previous_id} of group {group.group_id}",
                )
            del group.members[previous_id]
            previous.member_id = member_id
            # the new incarnation holds what the old one was given (what it was revoking is released);
            # anything else of its target it gets through reconciliation
            assigned = previous.current.assigned
            settled = assigned == group.target.get(previous_id, EMPTY)
            state = MemberState.STABLE if settled else MemberState.UNRELEASED_PARTITIONS
            previous.current = MemberAssignment(
                group.assignment_epoch, previous.current.previous_epoch, state, assigned
            )
            previous.sent = None
            group.members[member_id] = previous
            group.instances[instance] = member_id  # type: ignore[index]
            group.target[member_id] = group.target.pop(previous_id, EMPTY)
            log.info("group %s: static member %s is now %s", group.group_id, instance, member_id)
            return previous, False
        member = group.members.get(member_id)
        if member is not None:  # joining again with epoch 0: it dropped its partitions
            member.current = MemberAssignment(0, -1)
            member.revoke_deadline_ms = None
            return member, True
        member = _Member(member_id, instance)
        group.members[member_id] = member
        if instance is not None:
            group.instances[instance] = member_id
        return member, True

    def _known(self, group_id: str, join: Join) -> tuple[_Group, _Member]:
        group = self._groups.get(group_id)
        member = group.members.get(join.member_id) if group is not None else None
        if group is None or member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"member {join.member_id!r} is not in group {group_id}")
        if join.instance_id is not None and group.instances.get(join.instance_id) != join.member_id:
            raise GroupError(FENCED_INSTANCE_ID, f"instance {join.instance_id} belongs to another member")
        return group, member

    @staticmethod
    def _check_epoch(member: _Member, join: Join) -> None:
        current = member.current
        if join.member_epoch == current.epoch:
            return
        lost_answer = (
            join.member_epoch == current.previous_epoch
            and join.owned is not None
            and join.owned <= current.assigned
        )
        if join.member_epoch > current.epoch or not lost_answer:
            raise GroupError(
                FENCED_MEMBER_EPOCH,
                f"member {member.member_id} is at epoch {current.epoch}, not {join.member_epoch}",
            )

    @staticmethod
    def _update(member: _Member, join: Join) -> bool:
        """Take the heartbeat's non-null fields; True when the subscription or assignor changed."""
        changed = False
        if join.topics is not None and frozenset(join.topics) != member.topics:
            member.topics, changed = frozenset(join.topics), True
        if join.regex is not None and join.regex != member.regex:
            member.regex, changed = join.regex or None, True
        if join.assignor is not None and join.assignor != member.assignor:
            member.assignor, changed = join.assignor, True
        if join.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = join.rebalance_timeout_ms
        if join.rack_id is not None:
            member.rack_id = join.rack_id
        if join.client_id:
            member.client_id, member.client_host = join.client_id, join.client_host
        return changed

    def _leave(self, group_id: str, join: Join) -> HeartbeatAnswer:
        group = self._groups.get(group_id)
        member_id = join.member_id
        if group is not None and not member_id and join.instance_id is not None:
            member_id = group.instances.get(join.instance_id, "")
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"member {join.member_id!r} is not in group {group_id}")
        if join.instance_id is not None and group.instances.get(join.instance_id) != member_id:
            raise GroupError(FENCED_INSTANCE_ID, f"instance {join.instance_id} belongs to another member")
        if join.member_epoch == STATIC_LEAVE:
            current = member.current
            member.current = MemberAssignment(
                STATIC_LEAVE, current.previous_epoch, current.state, current.assigned, current.revoking
            )
            member.last_seen_ms = self._clock.now_ms()
            log.info("group %s: static member %s left for now", group_id, join.instance_id)
        else:
            self._remove(group, member_id, "left the group")
        return HeartbeatAnswer(member_id, join.member_epoch, None)

    # -- offsets --------------------------------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_id: str, member_epoch: int, partitions: Partitions | None = None
    ) -> bool:
        """Whether an OffsetCommit of ``partitions`` (None: a v9 OffsetFetch) is a member's: True for a
        member at its current epoch, False for a simple one (epoch < 0) to a group without members.

        A member's commit may also carry its previous epoch when every committed partition is still its
        own (assigned or being revoked): a commit sent while the answer that moved its epoch was on its
        way (Kafka refuses it, and librdkafka fails such a synchronous commit); likewise an OffsetFetch.

        Raises:
            GroupError: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH.
        """
        group = self._groups.get(group_id)
        if member_epoch < 0 and (group is None or not group.members):
            return False
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id}")
        current = member.current
        in_flight = member_epoch == current.previous_epoch > 0 and (
            partitions is None or partitions <= current.owned
        )
        if member_epoch != current.epoch and not in_flight:
            raise GroupError(
                STALE_MEMBER_EPOCH,
                f"member {member_id} is at epoch {member.current.epoch}, not {member_epoch}",
            )
        return True

    # -- time and shutdown ----------------------------------------------------------------------------

    def tick(self) -> None:
        """Remove members silent for the session timeout and those overdue with a revocation. Idempotent."""
        now = self._clock.now_ms()
        for group in list(self._groups.values()):
            for member in list(group.members.values()):
                if now - member.last_seen_ms > self.session_timeout_ms:
                    self._remove(group, member.member_id, "session timed out")
                elif member.revoke_deadline_ms is not None and now > member.revoke_deadline_ms:
                    self._remove(group, member.member_id, "did not revoke within its rebalance timeout")
            if not group.members:
                del self._groups[group.group_id]

    def metadata_changed(self) -> None:
        """Bump the epoch of groups whose subscribed topics changed (new topics, more partitions)."""
        for group in list(self._groups.values()):
            snapshot = self._snapshot(group)
            if group.members and snapshot != group.snapshot:
                self._bump(group, snapshot, "subscribed topics changed")

    def forget(self, group_id: str) -> None:
        """Drop an empty group's state (DeleteGroups). Idempotent."""
        if not self.active(group_id):
            self._groups.pop(group_id, None)

    def close(self) -> None:
        """Forget every group (the shard unloads). Idempotent."""
        self._groups = {}

    # -- internals ------------------------------------------------------------------------------------

    def _remove(self, group: _Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.instances.get(member.instance_id) == member_id:
            del group.instances[member.instance_id]
        group.target.pop(member_id, None)
        log.info("group %s: member %s removed (%s)", group.group_id, member_id, reason)
        self._bump(group, self._snapshot(group), reason)

    def _snapshot(self, group: _Group) -> dict[str, int]:
        topics = self._metadata()
        wanted = {t for m in group.members.values() for t in m.subscribed(topics)}
        return {t: topics[t] for t in sorted(wanted)}

    def _bump(self, group: _Group, snapshot: dict[str, int], reason: str) -> None:
        """A new group epoch and its target assignment."""
        group.epoch += 1
        group.snapshot = snapshot
        votes = Counter(m.assignor for m in group.members.values() if m.assignor is not None)
        group.assignor = votes.most_common(1)[0][0] if votes else DEFAULT_ASSIGNOR
        topics = self._metadata()
        members = [
            Member(
                m.member_id,
                frozenset(m.subscribed(topics)),
                tuple(sorted(group.target.get(m.member_id, EMPTY))),
            )
            for m in group.members.values()
        ]
        result = assign(ASSIGNORS[group.assignor], members, snapshot)
        group.target = {member_id: frozenset(parts) for member_id, parts in result.items()}
        group.assignment_epoch = group.epoch
        log.info(
            "group %s: epoch %d, %d members (%s)", group.group_id, group.epoch, len(group.members), reason
        )

    def _reconcile(self, group: _Group, member: _Member, owned: Partitions | None) -> None:
        others = [m for m in group.members.values() if m is not member]

        def owned_by_others(tp: tuple[str, int]) -> bool:
            return any(tp in m.current.owned for m in others)

        before = member.current
        member.current = advance(
            before, group.assignment_epoch, group.target.get(member.member_id, EMPTY), owned, owned_by_others
        )
        if member.current.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS:
                member.revoke_deadline_ms = self._clock.now_ms() + member.rebalance_timeout_ms
        else:
            member.revoke_deadline_ms = None
