"""Kafka's classic group protocol with client-side assignment: the groups Kafka's own clients join over the
Kafka listener (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

The broker does not look into the members' protocol metadata: it picks a protocol every member supports
(each member votes for its first choice among those), elects a leader, gives the leader every member's
metadata, and hands each member the assignment the leader sends in SyncGroup. Per group::

    Empty --join--> PreparingRebalance --all members rejoined, or rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable or CompletingRebalance --new member, changed metadata, leave, expiry--> PreparingRebalance
    any --last member gone--> Empty

* A first join without a member id (v4+, ``require_known_member_id``) gets a new id and
  MEMBER_ID_REQUIRED; the id is pending until the member joins with it (or its session times out).
* Static members (``group.instance.id``) keep their place across restarts: a join under a known instance
  id replaces the old member id (which is then fenced, FENCED_INSTANCE_ID) and, in a stable group with
  unchanged metadata, answers the current generation without a rebalance.
* Members waiting in JoinGroup or SyncGroup do not expire; the others are removed when silent for their
  session timeout. A rebalance removes the members that did not rejoin before the largest rebalance timeout.

Generations and members live in memory only (as Kafka's do until its next load of the group); committed
offsets go through the same :class:`~tierlog.service.groups.offsets.OffsetStore` as the HTTP APIs'.

Errors are Kafka's codes (:class:`GroupError`), the protocol being Kafka's. Time comes from an injected
clock and advances only through :meth:`ClassicGroups.tick`. Event-loop only, not thread-safe; no I/O.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from tierlog.service.groups.consumer_protocol import decode_subscription_topics
from tierlog.service.groups.coordinator import MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, Clock

__all__ = [
    "ClassicGroups",
    "ClassicState",
    "GroupError",
    "JoinAnswer",
    "MemberView",
]

log = logging.getLogger("tierlog.groups.classic")

# Kafka's error codes the protocol answers with.
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_GROUP_ID = 24
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82


class GroupError(Exception):
    """A group request refused with Kafka's error ``code`` (and, for MEMBER_ID_REQUIRED, the new id)."""

    def __init__(self, code: int, message: str, member_id: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.member_id = member_id


class ClassicState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True)
class JoinAnswer:
    """A JoinGroup answer: ``members`` (id, instance id, metadata) is filled for the leader only."""

    generation: int
    protocol_type: str
    protocol: str
    leader_id: str
    member_id: str
    members: list[tuple[str, str | None, bytes]]


@dataclass(frozen=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen_ms: int
    assignment: bytes = b""
    join: asyncio.Future[JoinAnswer] | None = None
    sync: asyncio.Future[bytes] | None = None

    @property
    def joining(self) -> bool:
        return self.join is not None and not self.join.done()

    @property
    def waiting(self) -> bool:
        """In JoinGroup or SyncGroup: a member blocked in a request does not expire."""
        return self.joining or (self.sync is not None and not self.sync.done())

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class _Group:
    group_id: str
    protocol_type: str = ""
    protocol: str = ""
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    leader_id: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # member id -> expiry
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    rebalance_deadline_ms: int = 0


class ClassicGroups:
    """The Kafka-protocol groups of one coordinator shard."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._groups: dict[str, _Group] = {}

    # -- inspection -----------------------------------------------------------------------------------

    def active(self, group_id: str) -> bool:
        """Whether ``group_id`` has members (or pending members) joined through the Kafka protocol."""
        group = self._groups.get(group_id)
        return group is not None and bool(group.members or group.pending)

    def group_ids(self) -> list[str]:
        return sorted(g for g in self._groups if self.active(g))

    def state(self, group_id: str) -> ClassicState:
        group = self._groups.get(group_id)
        return ClassicState.EMPTY if group is None else group.state

    def describe(self, group_id: str) -> tuple[ClassicState, str, str, list[MemberView]] | None:
        """``(state, protocol type, protocol, members)`` of an active group; None otherwise."""
        group = self._groups.get(group_id)
        if group is None or not self.active(group_id):
            return None
        members = [
            MemberView(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(group.protocol),
                m.assignment if group.state is ClassicState.STABLE else b"",
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return group.state, group.protocol_type, group.protocol, members

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the members of a ``consumer`` group subscribe to; None when unknown (another
        protocol type, or metadata that does not decode)."""
        group = self._groups.get(group_id)
        if group is None or group.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for member in group.members.values():
            found = decode_subscription_topics(member.metadata_for(group.protocol))
            if found is None:
                return None
            topics.update(found)
        return topics

    def forget(self, group_id: str) -> None:
        """Drop an empty group's state (DeleteGroups). Idempotent."""
        if not self.active(group_id):
            self._groups.pop(group_id, None)

    # -- JoinGroup ------------------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
    ) -> JoinAnswer:
        """Join (or rejoin) and wait until the next generation forms.

        Raises:
            GroupError: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL,
                UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED (with the new id), or
                REBALANCE_IN_PROGRESS / NOT_COORDINATOR when the wait ends without a generation.
        """
        if not group_id:
            raise GroupError(INVALID_GROUP_ID, "an empty group id")
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise GroupError(
                INVALID_SESSION_TIMEOUT,
                f"session timeout {session_timeout_ms} ms outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]",
            )
        if rebalance_timeout_ms <= 0:  # v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        group = self._groups.setdefault(group_id, _Group(group_id))
        self._check_protocols(group, protocol_type, protocols)
        now = self._clock.now_ms()
        member = self._find_member(group, member_id, instance_id)
        if member is None:
            if not member_id and instance_id is None and require_known_member_id:
                new_id = self._new_member_id(client_id)
                group.pending[new_id] = now + session_timeout_ms
                raise GroupError(MEMBER_ID_REQUIRED, "join again with the member id given", new_id)
            if member_id and member_id not in group.pending:
                raise GroupError(UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id}")
            group.pending.pop(member_id, None)
            old_id = group.instances.get(instance_id) if instance_id is not None else None
            new_member = _Member(
                member_id or self._new_member_id(client_id),
                instance_id,
                client_id,
                client_host,
                list(protocols),
                session_timeout_ms,
                rebalance_timeout_ms,
                now,
            )
            if old_id is not None:  # a static member's restart: take its place, fence the old id
                answer = self._replace_static(group, old_id, new_member)
                if answer is not None:
                    return answer
                return await self._wait_join(group, new_member, f"static member {instance_id} restarted")
            group.members[new_member.member_id] = new_member
            if instance_id is not None:
                group.instances[instance_id] = new_member.member_id
            return await self._wait_join(group, new_member, f"member {new_member.member_id} joined")
        changed = member.protocols != list(protocols)
        member.protocols = list(protocols)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        member.client_id, member.client_host, member.last_seen_ms = client_id, client_host, now
        settled = group.state is not ClassicState.PREPARING_REBALANCE and not changed
        if settled and (
            group.state is ClassicState.COMPLETING_REBALANCE or member.member_id != group.leader_id
        ):
            return self._answer(group, member)
        return await self._wait_join(group, member, f"member {member.member_id} rejoined")

    def _check_protocols(
        self, group: _Group, protocol_type: str, protocols: Sequence[tuple[str, bytes]]
    ) -> None:
        if not protocol_type or not protocols:
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "a join names no protocol type or no protocol")
        if not group.members:
            group.protocol_type = protocol_type
            return
        if protocol_type != group.protocol_type:
            raise GroupError(
                INCONSISTENT_GROUP_PROTOCOL,
                f"group {group.group_id} uses protocol type {group.protocol_type!r}, not {protocol_type!r}",
            )
        names = {name for name, _ in protocols}
        if not names & self._candidates(group):
            raise GroupError(
                INCONSISTENT_GROUP_PROTOCOL,
                f"no protocol in common with the members of group {group.group_id}",
            )

    @staticmethod
    def _candidates(group: _Group) -> set[str]:
        found: set[str] | None = None
        for member in group.members.values():
            names = {name for name, _ in member.protocols}
            found = names if found is None else found & names
        return found or set()

    @staticmethod
    def _new_member_id(client_id: str) -> str:
        return f"{client_id or 'member'}-{uuid.uuid4()}"

    @staticmethod
    def _find_member(group: _Group, member_id: str, instance_id: str | None) -> _Member | None:
        """The member a request names. Raises GroupError FENCED_INSTANCE_ID when ``instance_id`` belongs
        to another member id (an old incarnation) and UNKNOWN_MEMBER_ID for a static join with an unknown
        id."""
        if instance_id is not None:
            current = group.instances.get(instance_id)
            if current is None:
                if member_id and member_id in group.members:
                    raise GroupError(
                        UNKNOWN_MEMBER_ID, f"member {member_id} has no instance id {instance_id}"
                    )
                return None
            if not member_id:
                return None
            if member_id != current:
                raise GroupError(FENCED_INSTANCE_ID, f"instance {instance_id} is now member {current}")
            return group.members[current]
        return group.members.get(member_id) if member_id else None

    def _replace_static(self, group: _Group, old_id: str, member: _Member) -> JoinAnswer | None:
        """Put ``member`` in the place of ``old_id``; the current generation's answer when the group is
        stable and the metadata unchanged (no rebalance), else None (the caller joins the rebalance)."""
        old = group.members.pop(old_id)
        if old.join is not None and not old.join.done():
            old.join.set_exception(GroupError(FENCED_INSTANCE_ID, "replaced by a newer incarnation"))
        if old.sync is not None and not old.sync.done():
            old.sync.set_exception(GroupError(FENCED_INSTANCE_ID, "replaced by a newer incarnation"))
        member.assignment = old.assignment
        group.members[member.member_id] = member
        assert member.instance_id is not None
        group.instances[member.instance_id] = member.member_id
        if group.leader_id == old_id:
            group.leader_id = member.member_id
        log.info("group %s: static member %s is now %s", group.group_id, member.instance_id, member.member_id)
        if group.state is ClassicState.STABLE and old.protocols == member.protocols:
            return self._answer(group, member)
        return None

    async def _wait_join(self, group: _Group, member: _Member, reason: str) -> JoinAnswer:
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(REBALANCE_IN_PROGRESS, "superseded by a newer join"))
        member.join = asyncio.get_running_loop().create_future()
        waiter = member.join
        if group.state is not ClassicState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, reason)
        self._maybe_complete(group)
        return await asyncio.shield(waiter)

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol: str | None = None,
        assignments: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[str, str, bytes]:
        """``(protocol type, protocol, assignment)`` of the member for ``generation``: at once in a stable
        group, after the leader's SyncGroup while the rebalance completes.

        Raises:
            GroupError: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
                INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS.
        """
        group, member = self._member(group_id, member_id, instance_id)
        self._check_generation(group, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol is not None and protocol != group.protocol
        ):
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "protocol type or name differs from the group's")
        member.last_seen_ms = self._clock.now_ms()
        if group.state is ClassicState.PREPARING_REBALANCE:
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing; join again")
        if group.state is ClassicState.STABLE:
            return group.protocol_type, group.protocol, member.assignment
        if member.sync is None or member.sync.done():
            member.sync = asyncio.get_running_loop().create_future()
        waiter = member.sync
        if member_id == group.leader_id:
            given = dict(assignments)
            group.state = ClassicState.STABLE
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result(m.assignment)
            log.info("group %s: generation %d is stable", group_id, group.generation)
        assignment = await asyncio.shield(waiter)
        return group.protocol_type, group.protocol, assignment

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> None:
        """Keep a member alive.

        Raises:
            GroupError: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
        """
        group, member = self._member(group_id, member_id, instance_id)
        member.last_seen_ms = self._clock.now_ms()
        if group.state is ClassicState.PREPARING_REBALANCE:
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing; join again")
        self._check_generation(group, generation)

    def leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> None:
        """Remove one member (by member id, or by instance id alone) and rebalance the others.

        Raises:
            GroupError: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
        """
        group = self._groups.get(group_id)
        if group is not None and member_id in group.pending and instance_id is None:
            del group.pending[member_id]
            return
        if instance_id is not None and not member_id and group is not None:
            member_id = group.instances.get(instance_id, "")
        group, _member = self._member(group_id, member_id, instance_id)
        self._remove(group, member_id, "left the group")

    def check_commit(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> bool:
        """Whether an OffsetCommit may store its offsets: True for a member of the current generation,
        False for a simple commit (generation < 0) to a group without members here.

        Raises:
            GroupError: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS
                (the group waits for the leader's assignment).
        """
        if generation < 0 and not member_id and not self.active(group_id):
            return False
        group, member = self._member(group_id, member_id, instance_id)
        if group.state is ClassicState.COMPLETING_REBALANCE:
            raise GroupError(REBALANCE_IN_PROGRESS, f"group {group_id} is completing a rebalance")
        self._check_generation(group, generation)
        member.last_seen_ms = self._clock.now_ms()
        return True

    # -- time and shutdown ----------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire silent members and pending ids, end overdue rebalances. Idempotent."""
        now = self._clock.now_ms()
        for group in list(self._groups.values()):
            group.pending = {m: t for m, t in group.pending.items() if t > now}
            for member in list(group.members.values()):
                if not member.waiting and now - member.last_seen_ms > member.session_timeout_ms:
                    self._remove(group, member.member_id, "session timed out")
            if group.state is ClassicState.PREPARING_REBALANCE and now >= group.rebalance_deadline_ms:
                for member in list(group.members.values()):
                    if not member.joining:
                        self._remove(group, member.member_id, "did not rejoin before the rebalance timeout")
                self._maybe_complete(group, force=True)
            if not group.members and not group.pending:
                del self._groups[group.group_id]

    def close(self, code: int = NOT_COORDINATOR) -> None:
        """End every pending JoinGroup and SyncGroup with ``code`` and forget the groups. Idempotent."""
        groups, self._groups = self._groups, {}
        for group in groups.values():
            for member in group.members.values():
                for waiter in (member.join, member.sync):
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(GroupError(code, "this broker stopped coordinating the group"))

    # -- internals ------------------------------------------------------------------------------------

    def _member(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[_Group, _Member]:
        group = self._groups.get(group_id)
        if group is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id!r}")
        member = self._find_member(group, member_id, instance_id)
        if member is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"group {group_id} has no member {member_id!r}")
        return group, member

    @staticmethod
    def _check_generation(group: _Group, generation: int) -> None:
        if generation != group.generation:
            raise GroupError(
                ILLEGAL_GENERATION,
                f"generation {generation} is not group {group.group_id}'s {group.generation}",
            )

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        log.info("group %s: rebalancing (%s)", group.group_id, reason)
        for member in group.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_exception(GroupError(REBALANCE_IN_PROGRESS, "the group rebalances again"))
        group.state = ClassicState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline_ms = self._clock.now_ms() + timeout

    def _remove(self, group: _Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.instances.get(member.instance_id) == member_id:
            del group.instances[member.instance_id]
        log.info("group %s: member %s removed (%s)", group.group_id, member_id, reason)
        for waiter in (member.join, member.sync):
            if waiter is not None and not waiter.done():
                waiter.set_exception(
                    GroupError(UNKNOWN_MEMBER_ID, f"member {member_id} was removed: {reason}")
                )
        if group.state is not ClassicState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, reason)
        self._maybe_complete(group)

    def _maybe_complete(self, group: _Group, *, force: bool = False) -> None:
        if group.state is not ClassicState.PREPARING_REBALANCE:
            return
        if not force and not all(m.joining for m in group.members.values()):
            return
        group.generation += 1
        if not group.members:
            group.state, group.leader_id, group.protocol = ClassicState.EMPTY, "", ""
            return
        first = next(iter(group.members.values()))
        group.protocol = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = first.member_id
        group.state = ClassicState.COMPLETING_REBALANCE
        now = self._clock.now_ms()
        log.info(
            "group %s: generation %d, protocol %s, leader %s, %d members",
            group.group_id,
            group.generation,
            group.protocol,
            group.leader_id,
            len(group.members),
        )
        for member in group.members.values():
            member.last_seen_ms = now
            if member.join is not None and not member.join.done():
                member.join.set_result(self._answer(group, member))

    def _select_protocol(self, group: _Group) -> str:
        candidates = self._candidates(group)
        votes: dict[str, int] = {}
        for member in group.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def _answer(self, group: _Group, member: _Member) -> JoinAnswer:
        members: list[tuple[str, str | None, bytes]] = []
        if member.member_id == group.leader_id:
            members = [
                (m.member_id, m.instance_id, m.metadata_for(group.protocol)) for m in group.members.values()
            ]
        return JoinAnswer(
            group.generation, group.protocol_type, group.protocol, group.leader_id, member.member_id, members
        )
