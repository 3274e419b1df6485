"""A broker as a cluster member: the store, its membership, the controller, the metadata cache and the
reconciler that makes the broker's open partitions follow the leadership the controller decided.

:class:`ClusterNode` is owned by the :class:`~tierlog.service.topics.broker.Broker` (``broker.cluster``; every
broker is a cluster member, a single one a cluster of one). :meth:`ClusterNode.start` connects (importing
a ``tierlog-state.json`` first, see :mod:`tierlog.service.cluster.legacy_state`) and registers; every
background task (the cache's watch, the membership's keep-alive, the controller's two tasks, the failure
detector of :mod:`~tierlog.service.cluster.liveness`, the reconciler) is owned by one of these objects
and cancelled and awaited by :meth:`ClusterNode.close`, which also
revokes the lease so the broker leaves the cluster at once.

**Reconciling** (one pass after every change the cache applies, serialised): a topic in the store gets a
local :class:`~tierlog.service.topics.topic.Topic`; a partition whose assignment lists this broker as a
replica is
opened (created on first use, the remote tier attached when the topic tiers) and handed with its state to
the :class:`~tierlog.service.replication.manager.ReplicaManager`, which makes it lead or follow (design
0010); one that no longer lists it is stopped and closed (its data kept); a topic gone from the store (or
re-created under a new id) has its partitions closed and its local directories removed, and the remote data
of the partitions this broker led is deleted; a change of a topic's configs is applied to the open
partitions. A partition that fails to open is logged and retried on a later pass.

**The data directory** records, in ``tierlog-cluster.json``
(:class:`~tierlog.service.cluster.datadir.LocalTopicIds`), the cluster and broker it belongs to and the topic
id of every topic it holds data of. A broker refuses a data directory of another cluster or broker id
(Kafka's ``InconsistentClusterIdException``), and at start-up removes the directories of topics deleted, or
deleted and re-created under a new id, while it was down: a re-created topic never serves the old one's
data.

Every store call goes through
:class:`~tierlog.service.cluster.instrumented.InstrumentedMetadataStore`:
``tierlog_metadata_request_seconds`` (a histogram by ``op``) and ``tierlog_metadata_errors_total``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.service.cluster.cache import MetadataCache
from tierlog.service.cluster.controller import Controller
from tierlog.service.cluster.datadir import LocalTopicIds, partition_dirs
from tierlog.service.cluster.early_open import EarlyOpens
from tierlog.service.cluster.instrumented import InstrumentedMetadataStore
from tierlog.service.cluster.legacy_state import import_legacy_security, import_legacy_state
from tierlog.service.cluster.liveness import FailureDetector
from tierlog.service.cluster.membership import Membership
from tierlog.service.cluster.metadata_store import (
    Compare,
    MetadataStore,
    MetadataStoreError,
    Put,
)
from tierlog.service.cluster.model import CLUSTER_ID, NO_LEADER, BrokerRegistration, TopicAssignment
from tierlog.service.cluster.topics import ClusterTopics
from tierlog.service.metrics import Sample
from tierlog.service.replication.manager import ReplicaManager
from tierlog.service.security.store_format import SECURITY_FILE
from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.configs import TopicConfig
from tierlog.service.topics.topic import Topic
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    InvalidConfigError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    TierlogError,
    UnavailableError,
)

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.partition import Partition

__all__ = ["ClusterNode"]

log = logging.getLogger("tierlog.cluster.node")

RETRY_S = 1.0  # a failed reconcile step is tried again after this long


class ClusterNode:
    """This broker's membership of the cluster (see the module doc). Event-loop only.

    ``owns_store``: close the store on :meth:`close` (a store built from ``metadata.uri`` or the data
    directory's); an injected store (tests sharing one among several brokers) is left open.
    ``legacy_state``: a ``tierlog-state.json`` to import into the store at start when it exists (and the
    ``tierlog-security.json`` beside it).
    """

    def __init__(
        self, broker: Broker, store: MetadataStore, *, owns_store: bool, legacy_state: Path | None = None
    ) -> None:
        settings = broker.settings
        self.broker = broker
        self.broker_id = settings.broker_id
        self.settings = settings
        self.store = InstrumentedMetadataStore(store, broker.metrics)
        self._owns_store = owns_store
        self._legacy_state = legacy_state
        #: Set once :meth:`start` has started the store (the security store then reads it too).
        self.store_started = asyncio.Event()
        self.cache = MetadataCache(
            self.store, retry_s=min(RETRY_S, settings.broker_heartbeat_interval_ms / 1000)
        )
        registration = BrokerRegistration(
            self.broker_id, broker.advertised_url, settings.broker_rack, uuid.uuid4().hex
        )
        self.membership = Membership(
            self.store,
            registration,
            session_timeout_ms=settings.broker_session_timeout_ms,
            heartbeat_interval_ms=settings.broker_heartbeat_interval_ms,
            metrics=broker.metrics,
        )
        self.controller = Controller(
            self.store, self.broker_id, self.membership, settings, metrics=broker.metrics, clock=broker.clock
        )
        self.liveness = FailureDetector(
            self.store,
            self.broker_id,
            self.cache.brokers,
            heartbeat_interval_ms=settings.broker_heartbeat_interval_ms,
            session_timeout_ms=settings.broker_session_timeout_ms,
            watched=self._watched_peers,
            metrics=broker.metrics,
        )
        self.topics = ClusterTopics(self)
        self.replication = ReplicaManager(
            broker_id=self.broker_id,
            settings=settings,
            cache=self.cache,
            clock=broker.clock,
            peers=broker.peers,
            remote=broker.remote,
            remote_history=broker.remote.remote_epoch_history,
        )
        self.topic_ids = LocalTopicIds(broker.data_dir)
        #: partition logs a create opens while its commit is written (taken by the reconcile)
        self.early = EarlyOpens(broker.data_dir, broker.clock)
        self.passes = 0  # reconcile passes completed
        self._dirty = asyncio.Event()
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        broker.metrics.describe("tierlog_metadata_revision", "gauge", "The metadata revision this broker saw")
        broker.metrics.describe(
            "tierlog_partitions_led", "gauge", "Partitions this broker leads and has open"
        )
        broker.metrics.add_collector(self._collect)

    # ---- lifecycle -------------------------------------------------------------------------------------

    @property
    def registered(self) -> bool:
        return self.membership.registered.is_set()

    @property
    def ready(self) -> bool:
        """Registered, the cache loaded and the first reconcile pass done."""
        return self.registered and self.cache.loaded.is_set() and self.passes > 0

    async def start(self, url: str) -> None:
        """Connect, make sure the cluster has an id, load the cache, register as ``url`` and start the
        controller; a ``legacy_state`` file is imported first. An unreachable store is retried until it
        answers (``/ready`` stays 503 meanwhile). A live registration of this ``broker.id`` (this broker's
        previous life, killed less than a session ago) is waited out for up to twice the session timeout.
        Not idempotent. Raises InvalidConfigError (another live broker kept ``broker.id`` that long, or
        the state file belongs to another cluster), CorruptRecordError (an invalid state file)."""
        if self._started or self._closed:
            raise RuntimeError("cluster node already started")
        self._started = True
        await self._retrying("connecting to the metadata store", self.store.start)
        legacy = self._legacy_state
        if legacy is not None:
            await self._retrying(
                f"importing {legacy}",
                lambda: import_legacy_state(self.store, legacy, self.broker_id, self.topic_ids),
            )
            security = legacy.with_name(SECURITY_FILE)
            await self._retrying(
                f"importing {security}", lambda: import_legacy_security(self.store, security)
            )
        self.store_started.set()
        await self._retrying("creating the cluster id", self._ensure_cluster_id)
        await self._retrying("reading the cluster metadata", self.cache.start)
        self.cache.add_listener(self._dirty.set)
        self.membership.add_listener(self._dirty.set)
        self.membership.registration = replace(
            self.membership.registration, url=url, kafka=self.broker.kafka_endpoint
        )
        await self._register()
        await self.controller.start()
        self.broker.peers.on_unresponsive = self.liveness.suspect_url
        await self.liveness.start()
        log.info(
            "broker %d joined cluster %s as %s (rack %s)",
            self.broker_id,
            self.cache.cluster_id,
            url,
            self.settings.broker_rack or "none",
        )

    async def wait_for_self(self) -> None:
        """Wait until the cache shows this broker's own registration (the cluster as others see it), bounded
        by ``broker.session.timeout.ms``. Raises UnavailableError when it does not appear."""
        incarnation = self.membership.registration.incarnation

        def seen() -> bool:
            found = self.cache.broker(self.broker_id)
            return found is not None and found.incarnation == incarnation

        if not await self.cache.wait_for(seen, self.settings.broker_session_timeout_ms / 1000):
            raise UnavailableError(f"broker {self.broker_id} registered but its metadata cache never saw it")

    async def prepare_data_dir(self) -> list[Path]:
        """Check the data directory belongs to this cluster and broker, set aside partition directories of
        no topic (``*-stray``), and list for removal those of topics deleted or re-created while this broker
        was down, with the ``*-delete`` leftovers. Call after :meth:`start`. Raises InvalidConfigError
        (another cluster's or broker's directory), OSError."""
        ids = self.topic_ids
        await ids.load()
        cluster_id = self.cache.cluster_id
        ids.check(cluster_id, self.broker_id)
        assignments = self.cache.topics()
        data_dir = self.broker.data_dir
        stale: list[Path] = []
        for name, recorded in list(ids.topics.items()):
            assignment = assignments.get(name)
            if assignment is not None and assignment.topic_id == recorded:
                continue
            del ids.topics[name]
            log.info(
                "topic %s (id %s) was deleted while this broker was down: removing its data", name, recorded
            )
            for path in await asyncio.to_thread(partition_dirs, data_dir, name):
                target = path.with_name(
                    meta.suffixed_dir_name(name, int(path.name.rpartition("-")[2]), "delete")
                )
                await asyncio.to_thread(meta.rename_durably, path, target)
                stale.append(target)
        expected = {
            meta.partition_dir(data_dir, name, p).name
            for name, assignment in assignments.items()
            if name in ids.topics
            for p in range(assignment.partitions)
        }
        stale += await asyncio.to_thread(meta.sweep_data_dir, data_dir, expected)
        await ids.save(cluster_id, self.broker_id)
        return stale

    def start_reconciler(self) -> None:
        """Start the reconcile task (after the broker's first :meth:`reconcile`)."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name=f"tierlog-reconcile-{self.broker_id}")

    async def close(self) -> None:
        """Stop reconciling, stop replicating (fetchers, ISR managers; ``acks=all`` waiters fail), stop the
        controller, revoke the lease (this broker leaves the cluster at once) and stop the cache; close the
        store when this node owns it. Open partitions stay open (the broker closes them). Idempotent; never
        raises."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._dirty.set()
        task, self._task = self._task, None
        if task is not None:  # not cancelled: a pass ends after its current step, leaving nothing half-open
            await task
        await self.early.close()
        await self.replication.close()
        self.broker.peers.on_unresponsive = None
        await self.liveness.close()
        await self.controller.close()
        await self.membership.close(revoke=True)
        await self.cache.close()
        if self._owns_store:
            try:
                await self.store.close()
            except MetadataStoreError as err:
                log.warning("closing the metadata store failed: %s", err)
        await self._notify()
        log.info("broker %d left the cluster", self.broker_id)

    def _watched_peers(self) -> list[int]:
        """The brokers whose addresses the failure detector tries: every other one from the active
        controller, the controller from the others."""
        others = [b for b in self.cache.brokers() if b != self.broker_id]
        if self.controller.active:
            return others
        controller = self.controller.controller_id
        return [controller] if controller in others else []

    async def _retrying(self, what: str, step: Callable[[], Awaitable[object]]) -> None:
        delay = 0.1
        while True:
            try:
                await step()
                return
            except MetadataStoreError as err:
                log.warning("%s failed, retrying in %.1f s: %s", what, delay, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_S * 5)

    async def _register(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.membership.ttl_seconds + 1
        while True:
            try:
                await self._retrying("registering", self.membership.start)
                return
            except InvalidConfigError as err:
                if loop.time() >= deadline:
                    raise
                log.warning("%s: waiting for that registration to expire", err)
            await asyncio.sleep(self.settings.broker_heartbeat_interval_ms / 1000)

    async def _ensure_cluster_id(self) -> None:
        new_id = meta.new_cluster_id()
        if await self.store.commit([Compare(CLUSTER_ID, 0)], [Put(CLUSTER_ID, new_id.encode())]) is not None:
            log.info("new cluster: id %s", new_id)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait until ``predicate()`` holds, re-checked after every reconcile pass; ``False`` on timeout
        (``None``: no limit) or when the node closes first. Safe concurrently."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: self._closed or predicate())
        except TimeoutError:
            return False
        return predicate()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- leadership ------------------------------------------------------------------------------------

    def leadership(self, topic: str, index: int, local: Partition | None) -> Partition:
        """The check :meth:`Topic.partition` runs in a cluster: ``local`` when this broker leads the
        partition (by the cache), is registered, has it open and leads it at the current leader epoch (the
        replica manager applied the state). Raises NotLeaderOrFollowerError (another live broker leads it;
        the error names it) or LeaderNotAvailableError (none does, or this broker leads it but has lost
        its session or not become its leader yet). Pure lookup."""
        state = self.cache.partition_state(topic, index)
        if state is None or state.leader == NO_LEADER:
            raise LeaderNotAvailableError(f"partition {topic}-{index} has no leader now")
        if state.leader == self.broker_id:
            if not self.registered:
                raise LeaderNotAvailableError(
                    f"broker {self.broker_id} lost its cluster session; {topic}-{index} waits for a leader"
                )
            if local is None or local.closed:
                raise LeaderNotAvailableError(f"partition {topic}-{index} is being opened on its leader")
            if local.role != "leader" or local.leader_epoch != state.leader_epoch:
                raise LeaderNotAvailableError(
                    f"broker {self.broker_id} is becoming the leader of {topic}-{index} "
                    f"(leader epoch {state.leader_epoch})"
                )
            return local
        leader = self.cache.broker(state.leader)
        if leader is None:
            raise LeaderNotAvailableError(f"partition {topic}-{index} has no live leader now")
        raise NotLeaderOrFollowerError(
            f"broker {self.broker_id} does not lead {topic}-{index}: broker {leader.broker_id} does "
            f"({leader.url}, leader epoch {state.leader_epoch})",
            leader_id=leader.broker_id,
            leader_url=leader.url,
            leader_epoch=state.leader_epoch,
        )

    def replicas_led(self) -> bool:
        """Whether every partition this broker is a replica of has a leader, and those it leads are open
        and led here at the current leader epoch (what readiness waits for). Pure lookup."""
        for name, assignment in self.cache.topics().items():
            topic = self.broker.local_topics.get(name)
            for index, replicas in enumerate(assignment.replicas):
                if self.broker_id not in replicas:
                    continue
                state = self.cache.partition_state(name, index)
                if state is None or state.leader == NO_LEADER:
                    return False
                if state.leader != self.broker_id:
                    continue
                local = topic.local(index) if topic is not None else None
                if local is None or local.role != "leader" or local.leader_epoch != state.leader_epoch:
                    return False
        return True

    def leads(self, topic: str, index: int) -> bool:
        """Whether the cache names this broker the partition's leader."""
        state = self.cache.partition_state(topic, index)
        return state is not None and state.leader == self.broker_id

    def is_replica(self, topic: str, index: int) -> bool:
        """Whether the cache's assignment of ``topic`` lists this broker as a replica of ``index``."""
        assignment = self.cache.topic(topic)
        if assignment is None or not 0 <= index < assignment.partitions:
            return False
        return self.broker_id in assignment.replicas[index]

    # ---- reconciling -----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closed:
            await self._dirty.wait()
            self._dirty.clear()
            if self._closed:
                return
            try:
                complete = await self.reconcile()
            except Exception:
                log.exception("reconciling the local partitions failed; retrying")
                complete = False
            if not complete:
                await wait_signalled(self._stopping, RETRY_S)
                self._dirty.set()

    async def reconcile(self) -> bool:
        """One pass (see the module doc): True when everything was applied, False when something must be
        retried. Serialised; safe to call concurrently with itself."""
        async with self._lock:
            complete = await self._reconcile()
            self.passes += 1
        await self._notify()
        return complete

    async def _reconcile(self) -> bool:
        broker = self.broker
        topics: dict[str, Topic] = broker.local_topics
        assignments = self.cache.topics()
        complete = True
        for name in list(topics):
            assignment = assignments.get(name)
            if assignment is None or assignment.topic_id != topics[name].topic_id:
                await self._remove_topic(topics[name])  # listed until its directories are set aside
                del topics[name]
        registered = self.registered
        for name in sorted(assignments):
            assignment = assignments[name]
            topic = topics.get(name)
            record = meta.TopicRecord(
                name, assignment.partitions, dict(assignment.configs), assignment.topic_id
            )
            if topic is None:
                config = self._resolve(assignment)
                if config is None:
                    continue
                topic = Topic(record, config, [], leadership=self.leadership)
                topics[name] = topic
            elif record.partitions != topic.partition_count or record.configs != topic.overrides:
                self._update_topic(topic, assignment, record)
            for index in range(assignment.partitions):
                if self._closed:
                    return True
                replica = registered and self.broker_id in assignment.replicas[index]
                local = topic.local(index)
                if replica and local is None:
                    complete &= await self._open(topic, index, assignment.replicas[index])
                elif not replica and local is not None:
                    await self._close(topic, index)
                elif local is not None:
                    complete &= await self._apply_config(topic, local)
                    complete &= await self._apply_role(topic, index, assignment.replicas[index], local)
        return complete

    async def _apply_role(
        self, topic: Topic, index: int, replicas: tuple[int, ...], partition: Partition
    ) -> bool:
        """Hand the partition's current state to the replica manager (it ignores a state it applied)."""
        state = self.cache.partition_state(topic.name, index)
        if state is None:
            return True
        try:
            await self.replication.apply(topic, index, state, replicas, partition=partition)
        except (TierlogError, OSError):
            log.exception("applying the state of %s-%d failed; retrying", topic.name, index)
            return False
        return True

    def _resolve(self, assignment: TopicAssignment) -> TopicConfig | None:
        try:
            return TopicConfig.resolve(self.settings.topic_defaults, assignment.configs)
        except TierlogError as err:
            log.error("topic %s has configs this broker cannot apply: %s", assignment.name, err)
            return None

    def _update_topic(self, topic: Topic, assignment: TopicAssignment, record: meta.TopicRecord) -> None:
        config = self._resolve(assignment)
        if config is not None:
            if record.configs != topic.overrides:
                log.info("topic %s: configs now %s", topic.name, record.configs or "defaults")
            topic.reconfigure(config, record)

    async def _apply_config(self, topic: Topic, partition: Partition) -> bool:
        """Bring an open partition to its topic's configs (a change, or one that failed before)."""
        config = topic.config
        try:
            if partition.config != config:
                await partition.update_config(config)
            if config.remote_storage_enable and partition.remote is None:
                await self.broker.remote.attach(partition, reset_local=False)
        except (TierlogError, OSError):
            log.exception("applying the configs of topic %s to %s failed", topic.name, partition.label)
            return False
        return True

    async def _open(self, topic: Topic, index: int, replicas: tuple[int, ...]) -> bool:
        """Open a replica, give it its role, then register it with ``topic`` (so a partition the topic
        lists has had its state applied once). False when it must be retried."""
        try:
            # durably recorded before the directory exists (maybe by the create, its write in flight)
            if self.topic_ids.durable_id(topic.name) != topic.topic_id:
                self.topic_ids.topics[topic.name] = topic.topic_id
                await self.topic_ids.save(self.cache.cluster_id, self.broker_id)
            early = await self.early.take(topic.name, topic.topic_id, index, topic.config)
            partition = await self.broker.open_partition(topic.record, index, topic.config, opened=early)
        except (TierlogError, OSError):
            log.exception("opening %s-%d, a replica on this broker, failed; retrying", topic.name, index)
            return False
        partition.min_insync_replicas = lambda: topic.topic_config.min_insync_replicas
        if not await self._apply_role(topic, index, replicas, partition):
            await self.replication.stop(topic.name, index)
            try:
                await partition.close()
            except (TierlogError, OSError):
                log.exception("closing %s after a failed start failed", partition.label)
            self.broker.remote.detach(partition)
            return False
        topic.add_local(partition)
        log.info("opened %s as %s (leader epoch %d)", partition.label, partition.role, partition.leader_epoch)
        return True

    async def _close(self, topic: Topic, index: int) -> None:
        partition = topic.remove_local(index)
        if partition is None:
            return
        await self.replication.stop(topic.name, index)
        reason: TierlogError | None = None
        try:  # requests still on their way to the closed log are told who leads now
            self.leadership(topic.name, index, None)
        except TierlogError as err:
            reason = err
        try:
            await partition.close(reason)
        except (TierlogError, OSError):
            log.exception("closing %s failed", partition.label)
        self.broker.remote.detach(partition)
        log.info("no longer a replica of %s: closed (data kept)", partition.label)

    async def _remove_topic(self, topic: Topic) -> None:
        """Close the topic's partitions, remove its local directories, delete the remote data of the
        partitions this broker led."""
        broker = self.broker
        await self.early.discard(topic.name, topic.topic_id)
        opened = topic.partitions
        led = {p.index for p in opened if p.role == "leader"}
        for partition in opened:
            topic.remove_local(partition.index)
            await self.replication.stop(topic.name, partition.index)
        await broker.discard_partitions(opened)
        for partition in opened:
            remote = broker.remote.detach(partition)
            if remote is not None and partition.index in led:  # one replica deletes: the leader
                task = broker.background.spawn(
                    broker.remote.delete_partition_data(remote), name=f"tierlog-rm-remote-{partition.label}"
                )
                broker.remote.deleting(partition, task)
        open_indexes = {p.index for p in opened}
        closed = [
            meta.partition_dir(broker.data_dir, topic.name, index)
            for index in range(topic.partition_count)
            if index not in open_indexes
        ]
        await self._remove_dirs(topic.name, closed)
        if self.topic_ids.topics.get(topic.name) == topic.topic_id:
            del self.topic_ids.topics[topic.name]
            try:
                await self.topic_ids.save(self.cache.cluster_id, self.broker_id)
            except TierlogError as err:
                log.warning(
                    "could not record the deletion of topic %s (a restart removes it): %s", topic.name, err
                )
        log.info("topic %s was deleted: its local data is removed", topic.name)

    async def _remove_dirs(self, topic: str, paths: Iterable[Path]) -> None:
        for path in paths:
            index = int(path.name.rpartition("-")[2])
            target = path.with_name(meta.suffixed_dir_name(topic, index, "delete"))
            try:
                await asyncio.to_thread(meta.rename_durably, path, target)
            except FileNotFoundError:
                continue
            except OSError:
                log.exception("could not set %s aside for deletion", path)
                continue
            self.broker.background.spawn(
                asyncio.to_thread(meta.remove_tree, target), name=f"tierlog-rm-{target.name}"
            )

    def _collect(self) -> list[Sample]:
        led = sum(
            1 for t in list(self.broker.local_topics.values()) for p in t.partitions if p.role == "leader"
        )
        return [
            Sample("tierlog_metadata_revision", float(self.cache.revision)),
            Sample("tierlog_partitions_led", float(led)),
        ]
