"""The group coordinators of one broker: one per ``__consumer_offsets`` partition it leads.

A group belongs to partition ``coordinator_partition(group_id, n)`` of the offsets topic (Kafka's rule, see
:mod:`tierlog.service.groups.hashing`). Each partition this broker leads is a *shard*: the partition's
committed offsets (a :class:`~tierlog.service.groups.offsets.LogOffsetStore` replayed from it) and a
:class:`~tierlog.service.groups.coordinator.GroupCoordinator` for its groups. :class:`CoordinatorShards`
has the coordinator's interface and sends every call to the shard of its group, so the REST consumer
instances, the native API and the v3 routes work unchanged on top of it.

A single broker leads every partition, so it holds every shard (one, by default). In a cluster a shard
is loaded when its partition's leadership comes here and unloaded (its members' pending joins
cancelled, its state forgotten) when leadership goes: the log is the truth, the memory a cache of it.

All methods run on the event loop; none is thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tierlog.service.groups.assignors import TopicPartition
from tierlog.service.groups.classic import ClassicGroups
from tierlog.service.groups.coordinator import (
    DEFAULT_REBALANCE_TIMEOUT_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    Clock,
    GroupCoordinator,
    GroupDescription,
    JoinResult,
    MemberDescription,
)
from tierlog.service.groups.hashing import coordinator_partition
from tierlog.service.groups.modern import ConsumerGroups
from tierlog.service.groups.offsets import OFFSETS_TOPIC, CommittedOffset, LogOffsetStore
from tierlog.service.groups.offsets_log import PartitionOffsetLog, restore_offsets
from tierlog.service.topics.partition import Partition
from tierlog.wire.errors import InconsistentGroupProtocolError, UnavailableError

__all__ = ["CoordinatorShards", "Shard"]

log = logging.getLogger("tierlog.groups")


@dataclass
class Shard:
    """The groups of one ``__consumer_offsets`` partition this broker leads."""

    index: int
    log: PartitionOffsetLog
    store: LogOffsetStore
    coordinator: GroupCoordinator
    classic: ClassicGroups  # the groups Kafka's clients join over the Kafka listener
    consumer: ConsumerGroups  # KIP-848's groups (ConsumerGroupHeartbeat)

    def kafka_active(self, group_id: str) -> bool:
        """Whether ``group_id`` has members that joined through the Kafka protocol (either kind)."""
        return self.classic.active(group_id) or self.consumer.active(group_id)

    @property
    def stale(self) -> bool:
        """The partition was closed under the shard (shutdown, or no longer a replica here) or this broker
        stopped leading it (it stays open as a follower)."""
        partition = self.log.partition
        return partition is None or partition.closed or partition.role != "leader"


class CoordinatorShards:
    """Every shard of this broker, behind the interface of one :class:`GroupCoordinator`.

    ``partitions`` is the offsets topic's partition count (0 until known): the hash modulus. A call for a
    group whose shard is not loaded here raises UnavailableError (503, retriable); :meth:`leave` and the
    read-only listing are the exceptions (idempotent or partial by design).
    """

    def __init__(
        self,
        *,
        clock: Clock,
        metadata: Callable[[], Mapping[str, int]],
        default_strategy: str = "range",
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        compact_after_bytes: int = 16 * 2**20,
        consumer_session_timeout_ms: int = 45_000,
        consumer_heartbeat_interval_ms: int = 5_000,
    ) -> None:
        self._clock = clock
        self._metadata = metadata
        self._default_strategy = default_strategy
        self._offsets_retention_ms = offsets_retention_ms
        self._compact_after = compact_after_bytes
        self._consumer_timeouts = (consumer_session_timeout_ms, consumer_heartbeat_interval_ms)
        self._shards: dict[int, Shard] = {}
        self.partitions = 0

    # -- shards ---------------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        """The offsets partition of ``group_id``. Raises UnavailableError while the count is unknown."""
        if self.partitions < 1:
            raise UnavailableError(f"consumer groups are not ready: {OFFSETS_TOPIC} is not open yet")
        return coordinator_partition(group_id, self.partitions)

    def loaded(self) -> dict[int, Shard]:
        """The loaded shards by partition (a copy)."""
        return dict(self._shards)

    def owns(self, group_id: str) -> bool:
        """Whether this broker holds ``group_id``'s shard now."""
        return self.partitions > 0 and self.partition_for(group_id) in self._shards

    async def load(self, partition: Partition) -> int:
        """Replay ``partition`` into a new shard and serve its groups; returns the records replayed.

        A shard already loaded for the same index is unloaded first. Raises what
        :func:`~tierlog.service.groups.offsets_log.restore_offsets` raises (the shard is then not loaded).
        """
        self.unload(partition.index)
        offsets_log = PartitionOffsetLog(partition)
        store = LogOffsetStore(offsets_log, self._clock.now_ms, compact_after_bytes=self._compact_after)
        applied = await restore_offsets(partition, store)
        classic = ClassicGroups(self._clock)
        session_ms, heartbeat_ms = self._consumer_timeouts
        consumer = ConsumerGroups(
            self._clock, self._metadata, session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms
        )
        coordinator = GroupCoordinator(
            clock=self._clock,
            metadata=self._metadata,
            offsets=store,
            default_strategy=self._default_strategy,
            offsets_retention_ms=self._offsets_retention_ms,
            in_use_elsewhere=lambda group_id: classic.active(group_id) or consumer.active(group_id),
        )
        self._shards[partition.index] = Shard(
            partition.index, offsets_log, store, coordinator, classic, consumer
        )
        log.info(
            "coordinator of %s-%d: %d commit records replayed, %d groups",
            OFFSETS_TOPIC,
            partition.index,
            applied,
            len(store.group_ids()),
        )
        return applied

    def unload(self, index: int) -> bool:
        """Stop coordinating partition ``index``'s groups; pending joins answer 503, retriable. Idempotent."""
        shard = self._shards.pop(index, None)
        if shard is None:
            return False
        shard.coordinator.close(
            UnavailableError(f"this broker stopped coordinating the groups of {OFFSETS_TOPIC}-{index}; retry")
        )
        shard.classic.close()
        shard.consumer.close()
        log.info("no longer the coordinator of %s-%d", OFFSETS_TOPIC, index)
        return True

    def shard(self, group_id: str) -> Shard:
        """The shard of ``group_id``. Raises UnavailableError when it is not loaded here (now)."""
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None or shard.stale:
            raise UnavailableError(
                f"this broker is not the coordinator of group {group_id} now "
                f"({OFFSETS_TOPIC}-{self.partition_for(group_id)} is loading or led elsewhere); retry"
            )
        return shard

    def _coordinator(self, group_id: str, *, http: bool = False) -> GroupCoordinator:
        """``http``: the call makes or acts as a member through the HTTP APIs, which a group with
        Kafka-protocol members refuses (InconsistentGroupProtocolError)."""
        shard = self.shard(group_id)
        if http and shard.kafka_active(group_id):
            raise InconsistentGroupProtocolError(
                f"group {group_id} has members that joined through the Kafka protocol; "
                "a group is used through one protocol at a time"
            )
        return shard.coordinator

    # -- the coordinator's interface ------------------------------------------------------------------

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
        """See :meth:`GroupCoordinator.join`."""
        return await self._coordinator(group_id, http=True).join(
            group_id,
            member_id,
            topics=topics,
            pattern=pattern,
            client_id=client_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            strategy=strategy,
            auto_rejoin=auto_rejoin,
        )

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        self._coordinator(group_id).heartbeat(group_id, member_id, generation)

    def assignment(self, group_id: str, member_id: str, generation: int) -> list[TopicPartition]:
        return self._coordinator(group_id).assignment(group_id, member_id, generation)

    def leave(self, group_id: str, member_id: str) -> None:
        """Idempotent: a group whose shard is not here has no member to remove."""
        shard = self._shards.get(self.partition_for(group_id)) if self.partitions else None
        if shard is not None:
            shard.coordinator.leave(group_id, member_id)

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        member_id: str = "",
        generation: int = -1,
    ) -> None:
        await self._coordinator(group_id, http=True).commit(
            group_id, offsets, member_id=member_id, generation=generation
        )

    def committed(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, CommittedOffset]:
        return self._coordinator(group_id).committed(group_id, partitions)

    def describe(self, group_id: str) -> GroupDescription:
        """See :meth:`GroupCoordinator.describe`; a KIP-848 group (members joined over the Kafka listener)
        is described from its members' subscriptions and current assignments."""
        shard = self.shard(group_id)
        modern = shard.consumer.describe(group_id)
        if modern is None:
            return shard.coordinator.describe(group_id)
        members = [
            MemberDescription(m.member_id, m.client_id, list(m.topics), m.regex, sorted(m.assigned))
            for m in modern.members
        ]
        return GroupDescription(group_id, modern.state, modern.group_epoch, modern.assignor, "", members)

    def group_ids(self) -> list[str]:
        """The groups of every shard loaded here (a cluster-wide list asks every broker)."""
        return sorted(
            {
                g
                for shard in self._shards.values()
                for g in (
                    *shard.coordinator.group_ids(),
                    *shard.classic.group_ids(),
                    *shard.consumer.group_ids(),
                )
            }
        )

    def metadata_changed(self) -> None:
        for shard in list(self._shards.values()):
            shard.coordinator.metadata_changed()
            shard.consumer.metadata_changed()

    async def tick(self) -> None:
        """Time-driven work of every loaded shard. Idempotent."""
        for shard in list(self._shards.values()):
            if not shard.stale:
                await shard.coordinator.tick()
                shard.classic.tick()
                shard.consumer.tick()

    async def maybe_compact(self) -> list[int]:
        """Compact the shards that are due; returns their partitions."""
        done = []
        for shard in list(self._shards.values()):
            if not shard.stale and await shard.store.maybe_compact():
                done.append(shard.index)
        return done

    def close(self) -> None:
        """Cancel every pending join (on shutdown)."""
        shards, self._shards = self._shards, {}
        for shard in shards.values():
            shard.coordinator.close()
            shard.classic.close()
            shard.consumer.close()
