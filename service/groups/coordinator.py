"""The group coordinator: members, generations and assignments of consumer groups.

Assignment is computed by the broker (see :mod:`tierlog.service.groups.assignors`), so one join call both
enters the group and returns the member's partitions. The protocol, per group::

    Empty --join--> PreparingRebalance --all members rejoined, or rebalance timeout--> Stable
    Stable --new member, leave, session expiry, subscription or metadata change--> PreparingRebalance
    any --last member gone--> Empty

* ``join`` waits (it is a coroutine) until the rebalance completes, then answers with the new generation and
  the member's assignment. Members that do not rejoin before the rebalance timeout are removed.
* ``heartbeat`` keeps a member alive; during a rebalance it raises :class:`RebalanceInProgressError` to tell
  the member to join again. A member silent for longer than its session timeout is removed by :meth:`tick`.
* Members created for in-broker consumers (REST proxy instances) are *auto-rejoining*: a rebalance never
  waits for them.
* ``commit`` checks the member and generation (generation fencing), so a member that was kicked out cannot
  overwrite its successor's progress.

Time comes from an injected clock and advances only through :meth:`tick`, which the broker calls
periodically and tests call after moving a manual clock. All methods run on the event loop and are not
thread-safe; the coordinator does no blocking I/O itself (committed offsets go through an async store).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.service.groups.assignors import STRATEGIES, Member, TopicPartition, assign
from tierlog.service.groups.offsets import CommittedOffset, OffsetStore
from tierlog.service.groups.patterns import compile_pattern, matching_topics
from tierlog.wire.errors import (
    IllegalGenerationError,
    InvalidRequestError,
    RebalanceInProgressError,
    UnknownGroupError,
    UnknownMemberError,
)

__all__ = ["GroupCoordinator", "GroupState", "JoinResult", "GroupDescription", "MemberDescription", "Clock"]

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 45_000
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000
MIN_SESSION_TIMEOUT_MS = 1_000
MAX_SESSION_TIMEOUT_MS = 30 * 60_000


def check_group_id(group_id: str) -> None:
    """Refuse a group id that is empty, over 255 characters or holds a control character. Pure.

    Raises:
        InvalidRequestError: (42201) naming the id.
    """
    if not group_id or len(group_id) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in group_id):
        raise InvalidRequestError(f"invalid consumer group id {group_id!r}")


class Clock(Protocol):
    def now_ms(self) -> int: ...


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    STABLE = "Stable"


@dataclass(frozen=True)
class JoinResult:
    group_id: str
    member_id: str
    generation: int
    leader_id: str
    protocol: str
    assignment: list[TopicPartition]
    members: list[str]


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    topics: list[str]
    pattern: str | None
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    generation: int
    protocol: str
    leader_id: str
    members: list[MemberDescription]


@dataclass
class _Member:
    member_id: str
    client_id: str
    topics: frozenset[str]
    pattern: re.Pattern[str] | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    auto_rejoin: bool
    last_seen_ms: int
    assignment: list[TopicPartition] = field(default_factory=list)
    rejoined: bool = False
    waiter: asyncio.Future[JoinResult] | None = None

    def subscribed(self, all_topics: Sequence[str]) -> frozenset[str]:
        if self.pattern is None:
            return self.topics
        return frozenset(matching_topics(self.pattern, all_topics))


@dataclass
class _Group:
    group_id: str
    protocol: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    leader_id: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    snapshot: dict[str, int] = field(default_factory=dict)
    empty_since_ms: int = 0


class GroupCoordinator:
    """Coordinates every consumer group of one broker.

    ``metadata()`` returns the current ``{topic: partition_count}``; the broker calls
    :meth:`metadata_changed` whenever a topic is created, deleted or grows.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        metadata: Callable[[], Mapping[str, int]],
        offsets: OffsetStore,
        default_strategy: str = "range",
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        in_use_elsewhere: Callable[[str], bool] = lambda group_id: False,
    ) -> None:
        """``in_use_elsewhere(group_id)``: the group has members through another protocol (the Kafka
        listener's), so its committed offsets do not expire."""
        self._clock = clock
        self._in_use_elsewhere = in_use_elsewhere
        self._metadata = metadata
        self._offsets = offsets
        self._default_strategy = default_strategy
        self._offsets_retention_ms = offsets_retention_ms
        self._groups: dict[str, _Group] = {}

    # -- membership ---------------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str = "",
        *,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        client_id: str = "consumer",
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS,
        strategy: str | None = None,
        auto_rejoin: bool = False,
    ) -> JoinResult:
        """Join (or rejoin) ``group_id`` and wait until the group's next generation is formed.

        An empty ``member_id`` asks for a new member id. Rejoining with an unchanged subscription while the
        group is stable answers at once with the current generation.

        Raises:
            InvalidRequestError: bad group id, subscription, timeouts or strategy.
            UnknownMemberError: ``member_id`` is not a member (it was evicted): join again with "".
        """
        self._check_group_id(group_id)
        if not topics and pattern is None:
            raise InvalidRequestError("a subscription needs topics or a topic pattern")
        compiled = self._compile(pattern)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidRequestError(
                f"session timeout {session_timeout_ms} ms outside "
                f"[{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]"
            )
        if strategy is not None and strategy not in STRATEGIES:
            raise InvalidRequestError(
                f"unknown partition assignment strategy {strategy!r} (known: {', '.join(sorted(STRATEGIES))})"
            )
        group = self._groups.get(group_id)
        if group is None:
            group = _Group(group_id, strategy or self._default_strategy, empty_since_ms=self._clock.now_ms())
            self._groups[group_id] = group
        if strategy is not None and strategy != group.protocol:
            if group.members:
                raise InvalidRequestError(
                    f"group {group_id} uses assignment strategy {group.protocol!r}, not {strategy!r}"
                )
            group.protocol = strategy
        now = self._clock.now_ms()
        new_topics = frozenset(topics)
        member = group.members.get(member_id) if member_id else None
        if member_id and member is None:
            raise UnknownMemberError(
                f"member {member_id} is not in group {group_id}; join again without an id"
            )
        changed = True
        if member is None:
            member = _Member(
                member_id=f"{client_id}-{uuid.uuid4()}",
                client_id=client_id,
                topics=new_topics,
                pattern=compiled,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                auto_rejoin=auto_rejoin,
                last_seen_ms=now,
            )
            group.members[member.member_id] = member
        else:
            changed = member.topics != new_topics or member.pattern != compiled
            member.topics, member.pattern = new_topics, compiled
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_seen_ms = now
        if group.state is GroupState.STABLE and not changed:
            return self._result(group, member)
        loop = asyncio.get_running_loop()
        if member.waiter is not None and not member.waiter.done():
            member.waiter.set_exception(
                RebalanceInProgressError("superseded by a newer join of the same member")
            )
        member.waiter = loop.create_future()
        waiter = member.waiter
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        member.rejoined = True
        self._maybe_complete(group)
        return await asyncio.shield(waiter)

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        """Record that a member is alive.

        Raises:
            UnknownMemberError: not a member (evicted): join again.
            RebalanceInProgressError: a rebalance is under way: join again to get the new assignment.
            IllegalGenerationError: ``generation`` is not the current one.
        """
        group, member = self._member(group_id, member_id)
        member.last_seen_ms = self._clock.now_ms()
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id} is rebalancing; join again")
        if generation != group.generation:
            raise IllegalGenerationError(
                f"generation {generation} is not group {group_id}'s current generation {group.generation}"
            )

    def assignment(self, group_id: str, member_id: str, generation: int) -> list[TopicPartition]:
        """The member's partitions for ``generation`` (the *sync* step; assignment is computed on join).

        Raises the same errors as :meth:`heartbeat`.
        """
        self.heartbeat(group_id, member_id, generation)
        return list(self._groups[group_id].members[member_id].assignment)

    def leave(self, group_id: str, member_id: str) -> None:
        """Remove a member at once and rebalance the rest. Idempotent: an unknown member is ignored."""
        group = self._groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        self._remove(group, member_id, "left the group")

    def metadata_changed(self) -> None:
        """Re-check stable groups' subscriptions against current metadata; rebalance where it changed."""
        for group in list(self._groups.values()):
            if group.state is GroupState.STABLE and self._subscription_snapshot(group) != group.snapshot:
                self._prepare_rebalance(group, "subscribed topics changed")
                self._maybe_complete(group)

    async def tick(self) -> None:
        """Apply everything time-driven: session expiry, rebalance timeouts and offset expiry.

        Called periodically by the broker (and by tests after advancing the clock). Idempotent.
        """
        now = self._clock.now_ms()
        for group in list(self._groups.values()):
            for member in list(group.members.values()):
                waiting = member.waiter is not None and not member.waiter.done()
                if (
                    not waiting
                    and not member.auto_rejoin
                    and now - member.last_seen_ms > member.session_timeout_ms
                ):
                    self._remove(group, member.member_id, "session timed out")
            if group.state is GroupState.PREPARING_REBALANCE and now >= group.rebalance_deadline_ms:
                for member in list(group.members.values()):
                    if not member.rejoined:
                        self._remove(group, member.member_id, "did not rejoin before the rebalance timeout")
                self._maybe_complete(group, force=True)
        await self._expire_offsets(now)

    # -- offsets --------------------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        member_id: str = "",
        generation: int = -1,
    ) -> None:
        """Store committed offsets (``{(topic, partition): (offset, metadata)}``) for the group.

        A commit without a member (``member_id == ""`` and ``generation == -1``) is allowed only while the
        group has no members: that is how consumers without group management commit.

        Raises:
            UnknownMemberError / IllegalGenerationError: the committer is not the current generation's member.
            InvalidRequestError: a negative offset or an unknown topic or partition.
        """
        self._check_group_id(group_id)
        group = self._groups.get(group_id)
        if member_id or generation != -1:
            group, _ = self._member(group_id, member_id)
            if generation != group.generation:
                raise IllegalGenerationError(
                    f"commit from generation {generation} refused: group {group_id} is at {group.generation}"
                )
        elif group is not None and group.members:
            raise UnknownMemberError(
                f"group {group_id} has active members: commit with a member id and generation"
            )
        partitions = self._metadata()
        for (topic, partition), (offset, _) in offsets.items():
            if offset < 0:
                raise InvalidRequestError(f"negative offset {offset} for {topic}-{partition}")
            if partition < 0 or partition >= partitions.get(topic, 0):
                raise InvalidRequestError(f"unknown topic partition {topic}-{partition}")
        await self._offsets.commit(group_id, offsets, self._clock.now_ms())
        if group is None:
            self._groups[group_id] = _Group(
                group_id, self._default_strategy, empty_since_ms=self._clock.now_ms()
            )

    def committed(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets for ``partitions`` (default all); absent ones are left out."""
        stored = self._offsets.group_offsets(group_id)
        if partitions is None:
            return dict(stored)
        return {tp: stored[tp] for tp in partitions if tp in stored}

    # -- inspection -----------------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        """Every known group: with members, or with committed offsets."""
        return sorted(set(self._groups) | set(self._offsets.group_ids()))

    def describe(self, group_id: str) -> GroupDescription:
        """State, generation and members of one group.

        Raises:
            UnknownGroupError: the group has neither members nor committed offsets.
        """
        group = self._groups.get(group_id)
        if group is None:
            if group_id in self._offsets.group_ids():
                return GroupDescription(group_id, GroupState.EMPTY.value, 0, self._default_strategy, "", [])
            raise UnknownGroupError(f"consumer group {group_id} does not exist")
        members = [
            MemberDescription(
                m.member_id,
                m.client_id,
                sorted(m.topics),
                m.pattern.pattern if m.pattern else None,
                list(m.assignment),
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ]
        return GroupDescription(
            group_id, group.state.value, group.generation, group.protocol, group.leader_id, members
        )

    def forget(self, group_id: str) -> bool:
        """Drop a group without members (its committed offsets are the caller's to delete): DeleteGroups.
        Returns False, changing nothing, when the group has members. Idempotent."""
        group = self._groups.get(group_id)
        if group is not None and group.members:
            return False
        self._groups.pop(group_id, None)
        return True

    def close(self, error: Exception | None = None) -> None:
        """End every pending join: cancelled (on broker shutdown), or failed with ``error`` (this broker
        stopped coordinating the groups: the members get a retriable answer and join the new coordinator).
        Idempotent."""
        for group in self._groups.values():
            for member in group.members.values():
                if member.waiter is not None and not member.waiter.done():
                    if error is None:
                        member.waiter.cancel()
                    else:
                        member.waiter.set_exception(error)

    # -- internals ------------------------------------------------------------------------------------

    @staticmethod
    def _check_group_id(group_id: str) -> None:
        check_group_id(group_id)

    @staticmethod
    def _compile(pattern: str | None) -> re.Pattern[str] | None:
        return None if pattern is None else compile_pattern(pattern)

    def _member(self, group_id: str, member_id: str) -> tuple[_Group, _Member]:
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise UnknownMemberError(f"member {member_id!r} is not in group {group_id}")
        return group, member

    def _subscription_snapshot(self, group: _Group) -> dict[str, int]:
        partitions = self._metadata()
        topics = sorted(partitions)
        wanted: set[str] = set()
        for member in group.members.values():
            wanted |= member.subscribed(topics)
        return {t: partitions[t] for t in sorted(wanted) if t in partitions}

    def _prepare_rebalance(self, group: _Group, reason: str) -> None:
        log.info("group %s: rebalancing (%s)", group.group_id, reason)
        group.state = GroupState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline_ms = self._clock.now_ms() + timeout
        for member in group.members.values():
            member.rejoined = member.auto_rejoin

    def _remove(self, group: _Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id)
        log.info("group %s: member %s removed (%s)", group.group_id, member_id, reason)
        if member.waiter is not None and not member.waiter.done():
            member.waiter.set_exception(UnknownMemberError(f"member {member_id} was removed: {reason}"))
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, reason)
        self._maybe_complete(group)

    def _maybe_complete(self, group: _Group, *, force: bool = False) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if not force and not all(m.rejoined for m in group.members.values()):
            return
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.leader_id = ""
            group.snapshot = {}
            group.empty_since_ms = self._clock.now_ms()
            return
        group.snapshot = self._subscription_snapshot(group)
        topics = sorted(self._metadata())
        members = [
            Member(m.member_id, m.subscribed(topics), tuple(m.assignment)) for m in group.members.values()
        ]
        result = assign(group.protocol, members, group.snapshot)
        if group.leader_id not in group.members:
            group.leader_id = min(group.members)
        group.state = GroupState.STABLE
        now = self._clock.now_ms()
        for member in group.members.values():
            member.assignment = result[member.member_id]
            member.last_seen_ms = now
            if member.waiter is not None and not member.waiter.done():
                member.waiter.set_result(self._result(group, member))

    def _result(self, group: _Group, member: _Member) -> JoinResult:
        return JoinResult(
            group_id=group.group_id,
            member_id=member.member_id,
            generation=group.generation,
            leader_id=group.leader_id,
            protocol=group.protocol,
            assignment=list(member.assignment),
            members=sorted(group.members),
        )

    async def _expire_offsets(self, now: int) -> None:
        for group_id in self._offsets.group_ids():
            group = self._groups.get(group_id)
            if (group is not None and group.members) or self._in_use_elsewhere(group_id):
                continue
            empty_since = group.empty_since_ms if group is not None else 0
            stale = [
                tp
                for tp, committed in self._offsets.group_offsets(group_id).items()
                if now - max(committed.commit_ms, empty_since) > self._offsets_retention_ms
            ]
            if stale:
                log.info("group %s: %d committed offsets expired", group_id, len(stale))
                await self._offsets.delete(group_id, stale)
            if group is not None and not group.members and not self._offsets.group_offsets(group_id):
                del self._groups[group_id]
