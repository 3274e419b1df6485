"""Each broker's copy of the cluster metadata: one ``range("")``, then one ``watch("", revision + 1)``.

:class:`MetadataCache` holds the cluster id, the live brokers, the controller, every topic's assignment and
every partition's state, as of :attr:`MetadataCache.revision`. It is what a broker answers metadata from
(:meth:`MetadataCache.view`), routes by (:meth:`MetadataCache.leader_of`) and reconciles its local logs
against. A broken watch (the store unreachable, the watch compacted) is logged; the cache keeps its last
state, then reads everything again and watches from there.

Records that do not decode are logged and skipped (the key is treated as absent): one corrupt key must not
take a broker's view of the whole cluster down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from types import MappingProxyType

from tierlog.service.cluster.metadata_store import KeyValue, MetadataStore, MetadataStoreError, WatchEvent
from tierlog.service.cluster.model import (
    BROKERS,
    CLUSTER_ID,
    CONTROLLER,
    CONTROLLER_EPOCH,
    NO_LEADER,
    PARTITIONS,
    TOPICS,
    BrokerRegistration,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    parse_partition_key,
)
from tierlog.service.cluster.view import ClusterView, PartitionView
from tierlog.wire.errors import CorruptRecordError

__all__ = ["MetadataCache"]

log = logging.getLogger("tierlog.cluster.cache")


class MetadataCache:
    """The cluster metadata as this broker last saw it (see the module doc).

    Event-loop only. Queries never wait and never fail; they answer from the last applied revision.
    :meth:`start` and :meth:`close` own the watch task.
    """

    def __init__(self, store: MetadataStore, *, retry_s: float = 1.0) -> None:
        self.store = store
        self.revision = 0
        self.version = 0  # +1 per applied change (or reload): what waiters compare
        self.loaded = asyncio.Event()
        self.cluster_id = ""
        self.controller: ControllerRecord | None = None
        self.controller_epoch = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        self._topics: dict[str, TopicAssignment] = {}
        self._topic_revs: dict[str, int] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        # mod revisions of partition states and broker registrations: a leader registered after its
        # partition's state was written restarted since its election (see :meth:`partition_state`)
        self._state_revs: dict[tuple[str, int], int] = {}
        self._broker_revs: dict[int, int] = {}
        self._retry_s = retry_s
        self._changed = asyncio.Condition()
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._view: ClusterView | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read everything once (so the cache is loaded when this returns), then keep it current in a task.

        Raises MetadataStoreError when the first read fails (nothing is started). Not idempotent.
        """
        kvs, revision = await self.store.range("")
        self._load(kvs, revision)
        self._task = asyncio.create_task(self._run(revision), name="tierlog-metadata-cache")

    async def close(self) -> None:
        """Stop watching (cancel and await the task) and wake every waiter. Idempotent; never raises."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._notify()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on the event loop after every applied change. It must not raise."""
        self._listeners.append(listener)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait until ``predicate()`` holds, re-checking after every applied change; ``False`` on timeout
        (``None``: no limit). The signature is the design note's (0008). Safe concurrently."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(predicate)
        except TimeoutError:
            return False
        return True

    # ---- queries -----------------------------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerRegistration]:
        """The live brokers by id (a copy)."""
        return dict(self._brokers)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def topics(self) -> dict[str, TopicAssignment]:
        """Every topic's assignment by name (a copy)."""
        return dict(self._topics)

    def topic(self, name: str) -> TopicAssignment | None:
        return self._topics.get(name)

    def topic_revision(self, name: str) -> int:
        """The ``mod_revision`` of ``topics/<name>`` as last seen (0: absent)."""
        return self._topic_revs.get(name, 0)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's state, with leader -1 while its leader's registration is newer than the state:
        that broker restarted since it was elected (maybe with a shorter log) and must not lead in the old
        epoch; the controller fences it and elects again with a bump (``decide_partition``'s
        ``restarted``), as Kafka does for a bounced broker. Every broker's cache applies the same rule."""
        key = (topic, partition)
        state = self._states.get(key)
        if state is None or state.leader == NO_LEADER:
            return state
        if self._broker_revs.get(state.leader, 0) > self._state_revs.get(key, 0):
            return dataclasses.replace(state, leader=NO_LEADER)
        return state

    def leader_of(self, topic: str, partition: int) -> BrokerRegistration | None:
        """The live broker leading the partition, or ``None`` (no state, leader -1, or its broker gone)."""
        state = self.partition_state(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        return self._brokers.get(state.leader)

    def view(self) -> ClusterView:
        """The cluster at :attr:`revision` (built once per change, then shared)."""
        if self._view is None:
            self._view = self._build_view()
        return self._view

    # ---- applying changes ----------------------------------------------------------------------------------

    def _load(self, kvs: list[KeyValue], revision: int) -> None:
        self._brokers.clear()
        self._topics.clear()
        self._topic_revs.clear()
        self._states.clear()
        self._state_revs.clear()
        self._broker_revs.clear()
        self.cluster_id, self.controller = "", None
        for kv in kvs:
            self._put(kv.key, kv.value, kv.mod_revision)
        self.revision = revision
        self._changed_now()
        self.loaded.set()

    def _apply(self, event: WatchEvent) -> None:
        if event.kind == "put":
            self._put(event.key, event.value, event.mod_revision)
        else:
            self._delete(event.key)
        self.revision = max(self.revision, event.mod_revision)

    def _put(self, key: str, value: bytes, mod_revision: int) -> None:
        try:
            if key == CLUSTER_ID:
                self.cluster_id = value.decode()
            elif key == CONTROLLER:
                self.controller = ControllerRecord.decode(key, value)
                self.controller_epoch = max(self.controller_epoch, self.controller.epoch)
            elif key == CONTROLLER_EPOCH:
                self.controller_epoch = int(value.decode())
            elif key.startswith(BROKERS):
                registration = BrokerRegistration.decode(key, value)
                self._brokers[registration.broker_id] = registration
                self._broker_revs[registration.broker_id] = mod_revision
            elif key.startswith(TOPICS):
                assignment = TopicAssignment.decode(key, value)
                self._topics[key.removeprefix(TOPICS)] = assignment
                self._topic_revs[key.removeprefix(TOPICS)] = mod_revision
            elif key.startswith(PARTITIONS):
                self._states[parse_partition_key(key)] = PartitionState.decode(key, value)
                self._state_revs[parse_partition_key(key)] = mod_revision
        except (CorruptRecordError, UnicodeDecodeError, ValueError) as err:
            log.error("ignoring undecodable metadata key %r: %s", key, err)
            self._delete(key)

    def _delete(self, key: str) -> None:
        if key == CONTROLLER:
            self.controller = None
        elif key.startswith(BROKERS):
            with contextlib.suppress(ValueError):
                self._brokers.pop(int(key.removeprefix(BROKERS)), None)
                self._broker_revs.pop(int(key.removeprefix(BROKERS)), None)
        elif key.startswith(TOPICS):
            self._topics.pop(key.removeprefix(TOPICS), None)
            self._topic_revs.pop(key.removeprefix(TOPICS), None)
        elif key.startswith(PARTITIONS):
            with contextlib.suppress(CorruptRecordError):
                self._states.pop(parse_partition_key(key), None)
                self._state_revs.pop(parse_partition_key(key), None)

    def _changed_now(self) -> None:
        self.version += 1
        self._view = None
        for listener in list(self._listeners):
            listener()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _run(self, revision: int) -> None:
        while True:
            try:
                await self._watch(revision)
                log.warning("metadata watch ended, reading everything again")
            except MetadataStoreError as err:
                log.warning("metadata watch broken, reading everything again: %s", err)
            while True:
                await asyncio.sleep(self._retry_s)
                try:
                    kvs, revision = await self.store.range("")
                except MetadataStoreError as err:
                    log.warning("metadata store unreachable, retrying: %s", err)
                    continue
                self._load(kvs, revision)
                await self._notify()
                break

    async def _watch(self, revision: int) -> None:
        watch = self.store.watch("", revision + 1)
        try:
            async for event in watch:
                self._apply(event)
                self._changed_now()
                await self._notify()
        finally:
            aclose = getattr(watch, "aclose", None)
            if aclose is not None:
                await aclose()

    def _build_view(self) -> ClusterView:
        partitions: dict[str, tuple[PartitionView, ...]] = {}
        for name in sorted(self._topics):
            assignment = self._topics[name]
            views = []
            for index, replicas in enumerate(assignment.replicas):
                state = self.partition_state(name, index)
                if state is None:
                    views.append(PartitionView(index, NO_LEADER, -1, replicas, ()))
                else:
                    leader = state.leader if state.leader in self._brokers else NO_LEADER
                    views.append(PartitionView(index, leader, state.leader_epoch, replicas, state.isr))
            partitions[name] = tuple(views)
        controller = self.controller
        return ClusterView(
            cluster_id=self.cluster_id,
            controller_id=NO_LEADER if controller is None else controller.broker_id,
            controller_epoch=self.controller_epoch if controller is None else controller.epoch,
            brokers=tuple(self._brokers[b] for b in sorted(self._brokers)),
            partitions=MappingProxyType(partitions),
            topic_ids=MappingProxyType({name: self._topics[name].topic_id for name in partitions}),
        )
