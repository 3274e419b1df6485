"""The broker: topics, their partitions and configs, kept in the cluster's metadata store.

Every broker is a cluster member (:attr:`Broker.cluster`, see :mod:`tierlog.service.cluster.node`), from one
to N: topic metadata changes (create, delete, alter configs, add partitions) are commits to the metadata
store, and the broker opens the partitions it is a replica of; its :attr:`Broker.replication` manager makes
each lead or follow. Without ``metadata.uri`` the store is a local one in the data directory
(``cluster-metadata.json``), so a single broker is a cluster of one; a data directory written before that
(``tierlog-state.json``) is imported into it once (:mod:`tierlog.service.cluster.legacy_state`). Log I/O
runs in worker threads. The broker is opened in the background at start-up (``ready`` is false until it is
registered and every log it leads is open) and closed on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tierlog.service.cluster.node import ClusterNode
from tierlog.service.cluster.view import ClusterView
from tierlog.service.metrics import Metrics, Sample
from tierlog.service.remote.tier import RemoteTier
from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.configs import TopicConfig
from tierlog.service.topics.partition import Partition
from tierlog.service.topics.producer_ids import ProducerIdManager
from tierlog.service.topics.rules import (
    check_new_topic,
    check_partition_count,
)
from tierlog.service.topics.tasks import TaskSet
from tierlog.service.topics.topic import Topic
from tierlog.tiering.log import AppendInfo, Clock, LogConfig, PartitionLog, SystemClock
from tierlog.wire.errors import (
    InvalidConfigError,
    TierlogError,
    UnavailableError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.metadata_store import MetadataStore
    from tierlog.service.cluster.node import ClusterNode
    from tierlog.service.cluster.peers import PeerClient
    from tierlog.service.replication.manager import ReplicaManager
    from tierlog.service.settings.config import Settings
    from tierlog.tiering.remote.object_store import ObjectStore

__all__ = ["AppendInfo", "Broker", "Partition", "Topic", "open_metadata_store"]

log = logging.getLogger("tierlog.broker")


class Broker:
    """Topics, partitions and their persistence for one broker process.

    Every coroutine must run on the event loop that opened the broker; they are safe to call
    concurrently with each other. ``peers``: the app's client to the other brokers (the cluster member's
    replication calls use it; the app opens it before and closes it after the broker).
    """

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        *,
        peers: PeerClient,
        clock: Clock | None = None,
        remote_store: ObjectStore | None = None,
        metadata_store: MetadataStore | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.peers = peers
        self._clock = clock
        self.data_dir = settings.data_dir
        self.cluster_id = ""
        self.broker_id = 0
        self.advertised_url = settings.advertised_url
        # "host:port" of this broker's Kafka protocol listener, set once it is bound (before the broker
        # registers in its cluster); None while there is none
        self.kafka_endpoint: str | None = None
        # In a cluster the broker registers its URL: with port 0 it is known only once the server is bound.
        self._url_known = asyncio.Event()
        if settings.port != 0 or "advertised.url" in settings.sources:
            self._url_known.set()
        self.clean_start = False
        self.background = TaskSet()
        self._topics: dict[str, Topic] = {}
        self._ready = asyncio.Event()
        self._failed: BaseException | None = None
        self._closed = False
        self.close_failures = 0  # logs that could not be closed cleanly by close(); the process exits 1
        self.log_io = ThreadPoolExecutor(settings.log_io_threads, thread_name_prefix="tierlog-log-io")
        # Internal topics (``__consumer_offsets``: offset commits) get a worker of their own, so a commit's
        # small append never queues behind the fetches and produces of user topics (issue 34).
        self.internal_io = ThreadPoolExecutor(1, thread_name_prefix="tierlog-internal-io")
        self.remote = RemoteTier(settings, metrics, lambda: self.clock, store=remote_store)
        metrics.add_collector(self._collect)
        for name, help_text in (
            ("tierlog_bytes_in_total", "Record batch bytes appended, by topic"),
            ("tierlog_bytes_out_total", "Record batch bytes read, by topic"),
            ("tierlog_records_in_total", "Records appended, by topic"),
            ("tierlog_replication_bytes_in_total", "Record batch bytes a follower appended from its leader"),
            (
                "tierlog_produce_duplicates_total",
                "Produced batches found duplicate: nothing appended",
            ),
            (
                "tierlog_produce_sequence_errors_total",
                "Produced batches refused by their sequence, by error",
            ),
        ):
            metrics.describe(name, "counter", help_text)
        metrics.describe("tierlog_log_end_offset", "gauge", "Next offset to be written, by partition")
        metrics.describe("tierlog_log_start_offset", "gauge", "First offset still stored, by partition")
        metrics.describe("tierlog_log_size_bytes", "gauge", "Bytes of local segments, by partition")
        metrics.describe(
            "tierlog_high_watermark",
            "gauge",
            "Offset below which consumers read (committed), by partition",
        )
        metrics.describe(
            "tierlog_under_replicated", "gauge", "1 when a led partition's ISR is smaller than its replicas"
        )
        owns = metadata_store is None
        store = metadata_store if metadata_store is not None else open_metadata_store(settings)
        #: This broker's membership of its cluster (a cluster of one on the local store by default).
        self.cluster = ClusterNode(
            self,
            store,
            owns_store=owns,
            legacy_state=settings.data_dir / meta.STATE_FILE if settings.metadata_uri is None else None,
        )
        #: Producer ids (``POST /native/v1/producers``, design 0011): blocks taken in the metadata store.
        self.producer_ids = ProducerIdManager.cluster(self.cluster.store)

    # ---- lifecycle -------------------------------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        """The clock every partition log uses (the system clock unless one was injected)."""
        if self._clock is None:
            self._clock = SystemClock()
        return self._clock

    def advertise(self, url: str) -> None:
        """Set the URL this broker is reached at (the server bound a port picked at start-up); a cluster
        member registers it. Call before the broker is open; idempotent."""
        self.advertised_url = url
        self._url_known.set()

    @property
    def ready(self) -> bool:
        """True once every log is open and until the broker starts closing."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Wait until the broker is open. Safe concurrently; idempotent.

        Raises: UnavailableError if opening failed (caused by the original error).
        """
        while not self._ready.is_set():
            if self._failed is not None:
                raise UnavailableError(
                    f"the broker failed to open its logs: {self._failed}"
                ) from self._failed
            await self._ready.wait()

    async def open(self, gate: asyncio.Event | None = None) -> None:
        """Join the cluster (importing a ``tierlog-state.json`` first), set aside stray directories, open
        the partition logs this broker leads or follows.

        ``gate`` (tests) delays opening until it is set. Not idempotent: call once. Raises OSError,
        UnavailableError or CorruptRecordError (unreadable state or log); :meth:`wait_ready` then fails.
        """
        try:
            if gate is not None:
                await gate.wait()
            await self._open_cluster(self.cluster)
        except BaseException as err:
            self._failed = err
            self._ready.set()
            self._ready.clear()
            raise

    async def _open_cluster(self, node: ClusterNode) -> None:
        """Join the cluster: prepare the data directory, register, open the partitions this broker leads.
        Topics come from the metadata store."""
        self.broker_id = self.settings.broker_id
        self.clean_start = await asyncio.to_thread(self._prepare_data_dir)
        await self.remote.start()
        await self.remote.check_store()
        await self._url_known.wait()
        await node.start(self.advertised_url)
        if self.settings.remote_restore_on_start:
            restored = await node.topics.restore()
            if restored:
                log.info("restored topics from the remote tier: %s", ", ".join(restored))
        await node.wait_for_self()
        self.cluster_id = node.cache.cluster_id
        for path in await node.prepare_data_dir():
            self.background.spawn(asyncio.to_thread(meta.remove_tree, path), name=f"tierlog-rm-{path.name}")
        await node.reconcile()
        node.start_reconciler()
        timeout = self.settings.broker_session_timeout_ms / 1000
        if not await node.wait_for(node.replicas_led, timeout):
            log.warning(
                "broker %d: some of its partitions have no leader yet; ready all the same", self.broker_id
            )
        self._ready.set()
        log.info(
            "broker %d open in cluster %s: %d topics, leading %d partitions, %s shutdown",
            self.broker_id,
            self.cluster_id,
            len(self._topics),
            len(self.all_partitions()),
            "after a clean" if self.clean_start else "after an unclean (or no previous)",
        )

    def _prepare_data_dir(self) -> bool:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return meta.take_marker(self.data_dir / meta.CLEAN_SHUTDOWN_MARKER)

    async def close(self) -> None:
        """Finish background appends, flush and close every log, write the clean-shutdown marker.

        Idempotent. Safe to call while requests are in flight: they fail with UnknownTopicError or finish.
        A log that fails to close is logged and the marker is not written (the next start recovers).
        """
        if self._closed:
            return
        self._closed = True
        was_ready = self._ready.is_set()
        self._ready.clear()
        await self.cluster.close()
        await self.background.drain()
        failures = 0
        for partition in self.all_partitions():
            try:
                await partition.close()
            except (TierlogError, OSError):
                failures += 1
                log.exception("closing %s failed", partition.label)
        self.close_failures = failures
        await self.remote.close()
        self.log_io.shutdown(wait=False)
        self.internal_io.shutdown(wait=False)
        if was_ready and not failures:
            await asyncio.to_thread(meta.write_marker, self.data_dir / meta.CLEAN_SHUTDOWN_MARKER)
            log.info("broker closed cleanly: logs flushed and closed")

    # ---- reads ---------------------------------------------------------------------------------------

    def cluster_view(self) -> ClusterView:
        """The cluster as this broker sees it, from its metadata cache. Pure lookup; never raises."""
        return self.cluster.cache.view()

    @property
    def replication(self) -> ReplicaManager:
        """The replica manager (design 0010)."""
        return self.cluster.replication

    @property
    def local_topics(self) -> dict[str, Topic]:
        """The topics this broker holds, by name (the live dict: only the broker and its cluster node
        change it)."""
        return self._topics

    def topic_names(self) -> list[str]:
        """Sorted names of all topics. Raises UnavailableError while the broker is not open."""
        self.check_ready()
        return sorted(self._topics)

    def topics(self) -> list[Topic]:
        """All topics, sorted by name. Raises UnavailableError while the broker is not open."""
        self.check_ready()
        return [self._topics[name] for name in sorted(self._topics)]

    def topic(self, name: str) -> Topic:
        """Raises: UnknownTopicError (40401) for an unknown topic; UnavailableError while not open."""
        self.check_ready()
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"Topic not found. ({name})")
        return topic

    def interrupt_polls(self) -> None:
        """Make every pending and future long poll return at once (shutdown). Idempotent."""
        for partition in self.all_partitions():
            partition.interrupt()

    def all_partitions(self) -> list[Partition]:
        """Every open partition (a snapshot), in topic then index order."""
        return [p for name in sorted(self._topics) for p in self._topics[name].partitions if not p.closed]

    # ---- topic changes ---------------------------------------------------------------------------------

    async def ensure_topic(self, name: str) -> Topic:
        """The topic, auto-created with ``num.partitions`` when ``auto.create.topics.enable`` is true.

        Idempotent and safe concurrently (two callers racing get the same topic). Raises:
            UnknownTopicError (40401): unknown and auto-creation is off.
            InvalidConfigError (40002): unknown and the name is not a legal topic name.
        """
        found = self._topics.get(name) if self.ready else None
        if found is not None:
            return found
        self.check_ready()
        if not self.settings.auto_create_topics_enable:
            raise UnknownTopicError(f"Topic not found. ({name})")
        return await self.cluster.topics.ensure(name)

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, str] | None = None,
        *,
        internal: bool = False,
        replication_factor: int | None = None,
    ) -> Topic:
        """Create a topic with ``partitions`` (default ``num.partitions``), config overrides and
        ``replication_factor`` replicas per partition (default ``default.replication.factor``; at most
        the live brokers, so 1 for a single broker).

        ``internal`` allows a name starting with ``__``. Not idempotent (a second call fails). Raises:
            InvalidConfigError (400, 40002): illegal or reserved name, bad partition count, unknown config
                or bad value (naming it), name colliding with an existing one, the topic already exists,
                or a replication factor above the live brokers ("Replication factor: R larger than
                available brokers: B.").
            ResourceLimitError (400, 40010; Kafka POLICY_VIOLATION): the partitions placed here would not
                fit this broker's free file descriptors (RLIMIT_NOFILE) or inodes; nothing is written.
            InsufficientStorageError (507): nor its free disk space; nothing is written.
            UnavailableError: the metadata store cannot be reached (MetadataStoreError).
        """
        self.check_ready()
        await self._check_store_for(configs or {})
        return await self.cluster.topics.create(
            name, partitions, configs or {}, internal=internal, replication_factor=replication_factor
        )

    async def _check_store_for(self, configs: Mapping[str, str]) -> None:
        """Before creating a topic that tiers (its overrides or the defaults say
        ``remote.storage.enable=true``), check the object store with one request.

        Raises:
            InvalidConfigError (400, 40002; Kafka INVALID_CONFIG): the store cannot be used, naming why.
        """
        try:
            resolved = TopicConfig.resolve(self.settings.topic_defaults, dict(configs))
        except (TierlogError, ValueError, TypeError):
            return  # the create's own validation names the bad value
        if not resolved.log.remote_storage_enable:
            return
        problem = await self.remote.check_store()
        if problem is not None:
            raise InvalidConfigError(
                "Invalid value true for configuration remote.storage.enable: the object store "
                f"{self.remote.health.where} cannot be used: {problem}"
            )

    def validate_create_topic(
        self, name: str, partitions: int | None = None, configs: Mapping[str, str] | None = None
    ) -> int:
        """Check what :meth:`create_topic` would check; returns the partition count it would use.

        Pure. Raises: as :meth:`create_topic`.
        """
        self.check_ready()
        return self._validate_create(name, partitions, configs or {}, internal=False)[0]

    def validate_create_locally(
        self, name: str, partitions: int | None, configs: Mapping[str, str], *, internal: bool
    ) -> tuple[int, dict[str, str]]:
        """The partition count and validated overrides a create would use (checked against the topics this
        broker knows). Pure. Raises: as :meth:`create_topic`."""
        return self._validate_create(name, partitions, configs, internal=internal)

    def _validate_create(
        self, name: str, partitions: int | None, configs: Mapping[str, str], *, internal: bool
    ) -> tuple[int, dict[str, str]]:
        return check_new_topic(
            name,
            partitions,
            configs,
            existing=self._topics,
            num_partitions=self.settings.num_partitions,
            topic_defaults=self.settings.topic_defaults,
            internal=internal,
        )

    async def delete_topic(self, name: str, *, internal: bool = False) -> None:
        """Delete a topic: forget it durably, close its logs, rename its directories to
        ``<topic>-<p>.<uuid>-delete`` and remove them in the background. The name is free at once.

        Internal (``__``) topics are deleted only with ``internal``. Not idempotent. Raises:
            UnknownTopicError (40401): unknown topic.
            InvalidConfigError (40002): an internal topic without ``internal``.
            UnavailableError: the metadata store cannot be reached (nothing is deleted).
        """
        self.check_ready()
        self.topic(name)
        await self.cluster.topics.delete(name, internal=internal)

    async def alter_topic_configs(
        self, name: str, updates: Mapping[str, str | None], *, validate_only: bool = False
    ) -> None:
        """Set (value) or reset to the default (``None``) topic configs, persist, and apply them live.

        With ``validate_only`` only checks. All-or-nothing: nothing changes if any name or value is
        invalid. Idempotent. Raises:
            UnknownTopicError (40401): unknown topic.
            InvalidConfigError (400, 40002): unknown config name or bad value, naming it.
        """
        self.check_ready()
        self.topic(name)
        await self.cluster.topics.alter_configs(name, updates, validate_only=validate_only)

    async def add_partitions(self, name: str, count: int) -> Topic:
        """Grow a topic to ``count`` partitions; all-or-nothing. Idempotent for the current count. Raises:
        UnknownTopicError (40401): unknown topic.
        InvalidConfigError (40002): ``count`` is lower than the current count or out of range.
        ResourceLimitError (40010), InsufficientStorageError (507): the new partitions placed here would not
        fit this broker's free file descriptors, inodes or disk (checked before anything is written).
        UnavailableError: a new partition directory cannot be created (nothing is added).
        """
        self.check_ready()
        self.topic(name)
        return await self.cluster.topics.add_partitions(name, count, check_partition_count)

    # ---- internals -----------------------------------------------------------------------------------

    def offline_partitions(self) -> list[tuple[str, int, str]]:
        """``(topic, partition, reason)`` of every partition whose log is offline after an I/O failure."""
        found = []
        for partition in self.all_partitions():
            reason = partition.offline_reason
            if reason is not None:
                found.append((partition.topic, partition.index, reason))
        return found

    def check_ready(self) -> None:
        """Raises: UnavailableError (503, retriable) while the logs are opening or closing."""
        if not self._ready.is_set():
            raise UnavailableError("The broker is not ready: its logs are opening or closing.")

    async def open_partition(
        self, record: meta.TopicRecord, index: int, config: LogConfig, *, opened: PartitionLog | None = None
    ) -> Partition:
        """Open (creating on first use) partition ``index`` of ``record``, the remote tier attached when the
        topic tiers; ``opened``: its log, opened already (then this broker owns it). Raises OSError,
        CorruptRecordError, UnavailableError."""
        return await self._open_partition(record, index, config, opened)

    async def discard_partitions(self, partitions: Iterable[Partition]) -> None:
        """Close ``partitions`` and remove their directories in the background. Never raises."""
        await self._discard(partitions)

    async def _open_partition(
        self, record: meta.TopicRecord, index: int, config: LogConfig, opened: PartitionLog | None = None
    ) -> Partition:
        path = meta.partition_dir(self.data_dir, record.name, index)
        if opened is None:
            opened = await asyncio.to_thread(
                PartitionLog.open, path, config, clock=self.clock, topic=record.name, partition=index
            )
        partition = Partition(
            record.name,
            index,
            opened,
            path,
            self.metrics,
            self._spawn,
            config,
            executor=self.internal_io if record.name.startswith("__") else self.log_io,
        )
        if config.remote_storage_enable:
            await self.remote.attach(partition)
        return partition

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> object:
        return self.background.spawn(coro, name=name)

    async def _discard(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            try:
                await partition.close()
            except (TierlogError, OSError):
                log.exception("closing %s before deletion failed", partition.label)
            target = partition.path.with_name(
                meta.suffixed_dir_name(partition.topic, partition.index, "delete")
            )
            try:
                await asyncio.to_thread(meta.rename_durably, partition.path, target)
            except FileNotFoundError:
                continue
            self.background.spawn(
                asyncio.to_thread(meta.remove_tree, target), name=f"tierlog-rm-{target.name}"
            )

    def _collect(self) -> list[Sample]:
        samples: list[Sample] = []
        for topic in list(self._topics.values()):
            for partition in list(topic.partitions):
                if partition.closed:
                    continue
                labels = {"topic": topic.name, "partition": str(partition.index)}
                samples.append(Sample("tierlog_log_end_offset", partition.log_end_offset, labels))
                samples.append(Sample("tierlog_log_start_offset", partition.log_start_offset, labels))
                samples.append(Sample("tierlog_log_size_bytes", partition.size_bytes, labels))
                samples.append(Sample("tierlog_high_watermark", partition.high_watermark, labels))
                leader = partition.leader
                if leader is not None:
                    under = 1.0 if len(leader.isr) < len(leader.replicas) else 0.0
                    samples.append(Sample("tierlog_under_replicated", under, labels))
                offline = 0.0 if partition.offline_reason is None else 1.0
                samples.append(Sample("tierlog_partition_offline", offline, labels))
                samples.append(Sample("tierlog_partition_failures_total", partition.failure_count, labels))
        return samples


def open_metadata_store(settings: Settings) -> MetadataStore:
    """The store ``metadata.uri`` names: etcd (over TLS with ``metadata.ssl.*``), or (``file://``) the local
    store persisted in that file; without ``metadata.uri``, the local store in
    ``<data-dir>/cluster-metadata.json``."""
    uri = settings.metadata_uri
    if uri is None:
        from tierlog.service.cluster.local_store import LocalMetadataStore

        return LocalMetadataStore(settings.data_dir / meta.CLUSTER_METADATA_FILE)
    if uri.scheme == "file":
        from tierlog.service.cluster.local_store import LocalMetadataStore

        assert uri.path is not None
        return LocalMetadataStore(uri.path)
    from tierlog.service.cluster.etcd_store import EtcdMetadataStore

    return EtcdMetadataStore.from_settings(settings)
