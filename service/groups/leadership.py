"""Following ``__consumer_offsets`` leadership: a broker coordinates the groups of the partitions it leads.

:class:`ShardLoader` keeps :class:`~tierlog.service.groups.shards.CoordinatorShards` in step with the
broker's view: a partition that became this broker's (and is open here) is replayed into a new shard; one
that went elsewhere, or whose log was closed under it, is unloaded and the REST consumer instances of its
groups are dropped (their coordinator state is gone; clients create them again on the new coordinator,
as after a REST proxy restart). :meth:`ShardLoader.sync` runs on every metadata change, every maintenance
tick, and on demand when a request reaches a coordinator whose shard is not loaded yet.

The topic is created on the cluster's first group request (see :mod:`tierlog.service.groups.routing`);
a single broker leads, and so loads, every partition of it.
"""

from __future__ import annotations

import asyncio
import logging

from tierlog.service.groups.consumers import ConsumerManager
from tierlog.service.groups.hashing import coordinator_partition
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.groups.shards import CoordinatorShards
from tierlog.service.topics.broker import Broker
from tierlog.wire.errors import (
    ConflictError,
    InvalidConfigError,
    NotFoundError,
    UnavailableError,
)

__all__ = ["OFFSETS_TOPIC_CONFIGS", "ShardLoader"]

log = logging.getLogger("tierlog.groups")

OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1", "segment.bytes": str(100 * 2**20)}
LOAD_WAIT_MS = 10_000  # how long a request on the coordinator waits for its partition to load


class ShardLoader:
    """Loads and unloads coordinator shards as leadership of ``__consumer_offsets`` moves.

    Event-loop only; every coroutine is safe to call concurrently (one :meth:`sync` runs at a time) and
    idempotent.
    """

    def __init__(
        self,
        broker: Broker,
        shards: CoordinatorShards,
        consumers: ConsumerManager,
        *,
        num_partitions: int,
        load_wait_ms: int = LOAD_WAIT_MS,
    ) -> None:
        self._broker = broker
        self._shards = shards
        self._consumers = consumers
        self._num_partitions = num_partitions
        self._load_wait_s = load_wait_ms / 1000
        self._lock = asyncio.Lock()
        self._create_lock = asyncio.Lock()

    async def follow(self) -> None:
        """Sync after every reconcile pass of the cluster node (partitions opened or closed here), until
        cancelled or the node closes. Raises only CancelledError."""
        node = self._broker.cluster
        seen = [-1]
        while await node.wait_for(lambda: node.passes != seen[0], None):
            seen[0] = node.passes
            try:
                await self.sync()
            except Exception:
                log.exception("following %s leadership failed; retrying at the next change", OFFSETS_TOPIC)

    # -- the topic ------------------------------------------------------------------------------------

    def _topic_partitions(self) -> int:
        """The offsets topic's partition count as this broker sees it; 0 while it does not exist."""
        return len(self._broker.cluster_view().partitions.get(OFFSETS_TOPIC, ()))

    async def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` with ``offsets.topic.num.partitions`` partitions unless it exists.
        A concurrent creation elsewhere in the cluster wins quietly.

        Raises: what topic creation raises (UnavailableError while the broker is not ready).
        """
        async with self._create_lock:
            if self._topic_partitions():
                return
            log.info("creating %s with %d partitions", OFFSETS_TOPIC, self._num_partitions)
            try:
                await self._broker.create_topic(
                    OFFSETS_TOPIC, self._num_partitions, OFFSETS_TOPIC_CONFIGS, internal=True
                )
            except (InvalidConfigError, ConflictError):
                node = self._broker.cluster  # created elsewhere: wait until this broker's cache has seen it
                timeout = self._broker.settings.broker_session_timeout_ms / 1000
                await node.cache.wait_for(lambda: self._topic_partitions() > 0, timeout)
                if not self._topic_partitions():
                    raise
                log.info("%s was created by another broker meanwhile", OFFSETS_TOPIC)

    # -- leadership -----------------------------------------------------------------------------------

    def _leadership(self) -> tuple[int, set[int]]:
        """``(partition count, partitions this broker leads)``."""
        parts = self._broker.cluster_view().partitions.get(OFFSETS_TOPIC, ())
        me = self._broker.broker_id
        return len(parts), {p.partition for p in parts if p.leader == me}

    async def sync(self) -> None:
        """Load the shards of partitions led and open here; unload the others.

        Raises: CorruptRecordError when a partition cannot be replayed (it stays unloaded; the next sync
        tries again).
        """
        async with self._lock:
            count, led = self._leadership()
            if count and count != self._shards.partitions:
                for index in list(self._shards.loaded()):
                    self._unload(index)
                self._shards.partitions = count
            for index, shard in self._shards.loaded().items():
                if index not in led or shard.stale:
                    self._unload(index)
            for index in sorted(led - set(self._shards.loaded())):
                try:
                    partition = self._broker.topic(OFFSETS_TOPIC).partition(index)
                    if not partition.closed:
                        await self._shards.load(partition)
                except (NotFoundError, UnavailableError):
                    continue  # not open here (yet, or closed while replaying): a later sync loads it

    def _unload(self, index: int) -> None:
        count = self._shards.partitions
        if self._shards.unload(index):
            dropped = self._consumers.forget_groups(lambda g: coordinator_partition(g, count) == index)
            if dropped:
                log.info("dropped %d REST consumer instances of %s-%d", dropped, OFFSETS_TOPIC, index)

    def _is_loaded(self, index: int) -> bool:
        shard = self._shards.loaded().get(index)
        return shard is not None and not shard.stale

    def _is_open(self, index: int) -> bool:
        try:
            return not self._broker.topic(OFFSETS_TOPIC).partition(index).closed
        except (NotFoundError, UnavailableError):
            return False

    async def ensure_loaded(self, index: int) -> None:
        """Wait (bounded) until this broker's shard of partition ``index`` is loaded: the broker may not
        have opened the partition yet, just after leadership came here.

        Raises:
            UnavailableError: (50301, retriable) still not loaded after the wait.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._load_wait_s
        node = self._broker.cluster
        while True:
            if self._is_loaded(index):
                return
            await self.sync()
            if self._is_loaded(index):
                return
            remaining = deadline - loop.time()
            if remaining <= 0 or not await node.wait_for(lambda: self._is_open(index), remaining):
                raise UnavailableError(
                    f"the coordinator is loading {OFFSETS_TOPIC}-{index} (its groups are not served yet); "
                    "retry"
                )
