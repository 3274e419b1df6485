"""The replica manager: gives each partition open on a cluster member the role its state in the metadata
says, and owns what that role runs (design 0010).

One :class:`ReplicaManager` per cluster member (``broker.replication``), owned by the
:class:`~tierlog.service.cluster.node.ClusterNode`, which hands it every partition's state on each reconcile
pass (:meth:`ReplicaManager.apply`) and closes it on shutdown. It owns one
:class:`~tierlog.service.replication.client.ReplicationClient` (the peer calls, over the broker's one
:class:`~tierlog.service.cluster.peers.PeerClient`), and per partition either:

- **leading**: a :class:`~tierlog.service.replication.leader.LeaderState` (set on the partition, so produces
  and follower fetches drive it) and an :class:`~tierlog.service.replication.isr.IsrManager` that proposes
  ISR changes to the controller; or
- **following**: a :class:`~tierlog.service.replication.fetcher.ReplicaFetcher` fetching from the leader
  (restarted when the leader or its epoch changes); or
- **no leader** (-1): nothing runs, and the partition refuses clients with 50311.

Becoming leader stops the fetcher first (awaited, so no follower append races the first leader append),
records the new epoch's start at the log end offset (``leader-epoch-checkpoint``), and starts leading with
the ISR of the state and the high watermark the partition already has. Becoming follower fails the
``acks=all`` waiters with NotLeaderOrFollowerError naming the new leader. An unchanged leader epoch with a
new ISR or partition epoch is confirmed to the leader state (it may move the high watermark).

Event-loop only. Calls for one partition are serialised by the node's reconcile lock; :meth:`close` must run
after the node's reconciler stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.service.cluster.model import NO_LEADER, AlterPartitionRequest, BrokerRegistration, PartitionState
from tierlog.service.replication.client import ReplicationClient
from tierlog.service.replication.fetcher import ReplicaFetcher
from tierlog.service.replication.isr import IsrManager
from tierlog.service.replication.leader import LeaderState
from tierlog.wire.errors import (
    LeaderNotAvailableError,
    NotControllerError,
    NotLeaderOrFollowerError,
    TierlogError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.cache import MetadataCache
    from tierlog.service.cluster.peers import PeerClient
    from tierlog.service.remote.tier import RemoteTier
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.partition import Partition
    from tierlog.service.topics.topic import Topic
    from tierlog.tiering.log import Clock
    from tierlog.tiering.log.leader_epoch import EpochEntry

__all__ = ["ReplicaManager"]

log = logging.getLogger("tierlog.replication.manager")

CLIENT_TIMEOUT_S = 30.0  # a peer call's own deadline (Kafka's replica.socket.timeout.ms), plus its long poll

RemoteHistory = Callable[[str, int, int], Awaitable[Sequence["EpochEntry"]]]


@dataclass
class _Replica:
    """What runs for one partition, and the state it was last given."""

    partition: Partition
    state: PartitionState | None = None
    leader_url: str = ""
    fetcher: ReplicaFetcher | None = None
    isr: IsrManager | None = None


class ReplicaManager:
    """The roles of this broker's partitions in a cluster (see the module doc). Event-loop only."""

    def __init__(
        self,
        *,
        broker_id: int,
        settings: Settings,
        cache: MetadataCache,
        clock: Clock,
        peers: PeerClient,
        remote: RemoteTier | None = None,
        remote_history: RemoteHistory | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.cache = cache
        self.clock = clock
        self.remote = remote
        self.remote_history = remote_history
        self.client = ReplicationClient(peers, broker_id=broker_id, timeout_s=CLIENT_TIMEOUT_S)
        self._replicas: dict[tuple[str, int], _Replica] = {}
        self._closed = False

    # ---- queries (tests, metrics) --------------------------------------------------------------------------

    def fetcher(self, topic: str, index: int) -> ReplicaFetcher | None:
        """The fetcher following ``topic``-``index``, if this broker follows it now."""
        replica = self._replicas.get((topic, index))
        return None if replica is None else replica.fetcher

    def isr_manager(self, topic: str, index: int) -> IsrManager | None:
        """The ISR manager of ``topic``-``index``, if this broker leads it now."""
        replica = self._replicas.get((topic, index))
        return None if replica is None else replica.isr

    # ---- applying states -----------------------------------------------------------------------------------

    async def apply(
        self,
        topic: Topic,
        index: int,
        state: PartitionState,
        replicas: Sequence[int],
        *,
        partition: Partition | None = None,
    ) -> None:
        """Give the open partition ``topic``-``index`` the role ``state`` says (see the module doc).

        Idempotent: a state already applied (same leader, epochs, ISR and leader URL) changes nothing, so
        the node may call this on every pass. A follower whose leader's registration is not in the cache
        yet starts no fetcher (refusing clients) until a later call finds it. Never raises for a role
        change; raises UnknownTopicError when the partition was closed meanwhile. ``partition``: the
        partition just opened, before the node registers it with ``topic`` (default: ``topic.local(index)``).
        """
        if self._closed:
            return
        if partition is None:
            partition = topic.local(index)
        if partition is None:
            return
        key = (topic.name, index)
        replica = self._replicas.get(key)
        if replica is None or replica.partition is not partition:
            if replica is not None:
                await self._stop(replica, None)
            replica = self._replicas[key] = _Replica(partition)
        leader_reg = None if state.leader == NO_LEADER else self.cache.broker(state.leader)
        leader_url = "" if leader_reg is None else leader_reg.url
        previous = replica.state
        if previous == state and replica.leader_url == leader_url:
            return
        if state.leader == self.broker_id:
            if (
                previous is not None
                and previous.leader == self.broker_id
                and previous.leader_epoch == state.leader_epoch
                and partition.leader is not None
                and partition.leader_epoch == state.leader_epoch
            ):
                self._refresh(replica, state)
            else:
                await self._become_leader(topic, replica, state, replicas)
        elif state.leader == NO_LEADER or leader_reg is None:
            await self._stop_fetching(replica)
            await self._stop_leading(replica)
            partition.follow(
                state.leader_epoch,
                LeaderNotAvailableError(f"partition {partition.label} has no live leader now"),
            )
            await partition.drain_leader_appends()
            self._set_remote_role(partition, leading=False, leader_epoch=state.leader_epoch)
            if state.leader != NO_LEADER:  # its registration is not seen yet: retried on a later call
                replica.state = None
                return
        else:
            await self._become_follower(replica, state, leader_reg)
        replica.state = state
        replica.leader_url = leader_url

    async def stop_fetching(self, topic: str, index: int) -> bool:
        """Stop following ``topic``-``index`` until the next :meth:`apply` (which starts a new fetcher even
        for an unchanged state): an operator's pause, and how tests hold a follower back. True when a
        fetcher was running. Never raises."""
        replica = self._replicas.get((topic, index))
        if replica is None or replica.fetcher is None:
            return False
        await self._stop_fetching(replica)
        replica.state = None
        return True

    async def stop(self, topic: str, index: int) -> None:
        """Stop what runs for ``topic``-``index`` (the node is about to close it): the fetcher, the ISR
        manager, the leader state (its waiters fail with the reason the partition will be closed with,
        else NotLeaderOrFollowerError). Idempotent; never raises."""
        replica = self._replicas.pop((topic, index), None)
        if replica is not None:
            await self._stop(replica, None)

    async def close(self) -> None:
        """Stop every fetcher and ISR manager, fail every ``acks=all`` waiter, close the peer client.
        Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        replicas, self._replicas = list(self._replicas.values()), {}
        for replica in replicas:
            await self._stop(replica, None)
        try:
            await self.client.close()
        except Exception:
            log.exception("closing the replication client failed")

    # ---- roles ---------------------------------------------------------------------------------------------

    async def _become_leader(
        self, topic: Topic, replica: _Replica, state: PartitionState, replicas: Sequence[int]
    ) -> None:
        partition = replica.partition
        await self._stop_fetching(replica)
        await self._stop_leading(replica)
        if partition.role == "leader":  # leading again in a newer epoch: end the old epoch first
            partition.follow(
                partition.leader_epoch,
                LeaderNotAvailableError(f"{partition.label} moves to leader epoch {state.leader_epoch}"),
            )
        await partition.drain_leader_appends()  # no batch of an older epoch lands after the new one starts
        if self.remote is not None:
            await self.remote.take_lead(partition, state.leader_epoch)
        start = await partition.assign_leader_epoch(state.leader_epoch)
        leader = LeaderState(
            topic=partition.topic,
            partition=partition.index,
            broker_id=self.broker_id,
            replicas=replicas,
            isr=state.isr,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            leader_epoch_start_offset=start,
            log_end_offset=lambda: partition.log_end_offset,
            high_watermark=partition.high_watermark,
            clock=self.clock,
            replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
        )
        partition.min_insync_replicas = lambda: topic.topic_config.min_insync_replicas
        isr = IsrManager(
            leader,
            topic=partition.topic,
            partition=partition.index,
            broker_id=self.broker_id,
            alter=self._alter_partition,
            clock=self.clock,
            check_interval_s=self.settings.replica_lag_time_max_ms / 2000,
            on_change=partition.advance_high_watermark,
            eligible=lambda broker: self.cache.broker(broker) is not None,
        )
        partition.lead(leader, state.leader_epoch)
        partition.on_follower_fetch = lambda _follower: isr.poke()
        replica.isr = isr
        isr.start()
        self._set_remote_role(partition, leading=True, leader_epoch=state.leader_epoch)
        log.info(
            "leading %s at leader epoch %d from offset %d (ISR %s, high watermark %d)",
            partition.label,
            state.leader_epoch,
            start,
            list(state.isr),
            partition.high_watermark,
        )

    def _refresh(self, replica: _Replica, state: PartitionState) -> None:
        """Same leader epoch, new ISR or partition epoch: the leader state takes the committed ISR."""
        partition = replica.partition
        leader = partition.leader
        if replica.isr is not None:
            replica.isr.refresh(state.isr, state.partition_epoch)  # confirms, resumes proposing
        elif leader is not None:
            partition.advance_high_watermark(leader.confirm(state.isr, state.partition_epoch))

    async def _become_follower(
        self, replica: _Replica, state: PartitionState, leader: BrokerRegistration
    ) -> None:
        partition = replica.partition
        await self._stop_leading(replica)
        reason = NotLeaderOrFollowerError(
            f"broker {self.broker_id} does not lead {partition.label}: broker {leader.broker_id} does "
            f"({leader.url}, leader epoch {state.leader_epoch})",
            leader_id=leader.broker_id,
            leader_url=leader.url,
            leader_epoch=state.leader_epoch,
        )
        previous = replica.state
        running = replica.fetcher
        if (
            running is not None
            and previous is not None
            and previous.leader == state.leader
            and previous.leader_epoch == state.leader_epoch
            and replica.leader_url == leader.url
        ):
            partition.follow(state.leader_epoch, reason)
            return
        await self._stop_fetching(replica)
        partition.follow(state.leader_epoch, reason)
        await partition.drain_leader_appends()  # the fetcher decides where to truncate after them
        self._set_remote_role(partition, leading=False, leader_epoch=state.leader_epoch)
        fetcher = ReplicaFetcher(
            partition,
            broker_id=self.broker_id,
            leader=leader,
            leader_epoch=state.leader_epoch,
            client=self.client,
            settings=self.settings,
            remote_history=self.remote_history,
        )
        replica.fetcher = fetcher
        fetcher.start()
        log.info(
            "following %s: broker %d leads it at leader epoch %d", partition.label, leader.broker_id,
            state.leader_epoch,
        )  # fmt: skip

    async def _stop_fetching(self, replica: _Replica) -> None:
        fetcher, replica.fetcher = replica.fetcher, None
        if fetcher is not None:
            try:
                await fetcher.close()
            except Exception:
                log.exception("stopping the fetcher of %s failed", replica.partition.label)

    async def _stop_leading(self, replica: _Replica) -> None:
        isr, replica.isr = replica.isr, None
        replica.partition.on_follower_fetch = None
        if isr is not None:
            try:
                await isr.close()
            except Exception:
                log.exception("stopping the ISR manager of %s failed", replica.partition.label)

    async def _stop(self, replica: _Replica, reason: TierlogError | None) -> None:
        await self._stop_fetching(replica)
        await self._stop_leading(replica)
        partition = replica.partition
        if partition.leader is not None:
            partition.follow(
                partition.leader_epoch,
                reason
                or NotLeaderOrFollowerError(f"broker {self.broker_id} stopped leading {partition.label}"),
            )

    async def _alter_partition(self, request: AlterPartitionRequest) -> PartitionState:
        """Send an ISR change to the active controller (by the cache). Raises NotControllerError when no
        controller is known, and whatever the controller answers."""
        controller = self.cache.controller
        registration = None if controller is None else self.cache.broker(controller.broker_id)
        if registration is None:
            raise NotControllerError("no active controller is known now")
        return await self.client.alter_partition(registration.url, request)

    def _set_remote_role(self, partition: Partition, *, leading: bool, leader_epoch: int) -> None:
        """Tell the remote tier who uploads (the leader only); it remembers the role for a partition whose
        topic starts tiering later."""
        if self.remote is not None:
            self.remote.set_role(partition, leading, leader_epoch)
