"""Topic changes in a cluster: compare-and-commit writes of ``topics/<name>`` by the serving broker.

Create puts the assignment if the key is absent (replicas placed over the live brokers, racks honoured);
alter configs and add partitions put it compared on the ``mod_revision`` they read (retried on a race);
delete removes the key and every partition state of the topic in one commit. The controller writes the
partition states: on the broker that is the active controller, a create's commit carries them already (one
write, as KRaft's controller handles CreateTopics); elsewhere the controller writes them after it. Then
the serving broker waits, bounded by ``broker.session.timeout.ms``, until its cache shows a leader for
every partition and the partitions it leads are open, and answers. A wait that runs out still answers
(the change is committed; leaders follow when a broker can take them).

Every method raises what :class:`~tierlog.service.topics.broker.Broker` documents for the same request, with
MetadataStoreError (503, retriable) when the store fails. A create or growth whose partitions placed on this
broker would not fit its free file descriptors, inodes or disk is refused before the write
(ResourceLimitError, InsufficientStorageError; :mod:`tierlog.service.topics.resources`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tierlog.service.cluster.metadata_store import Compare, Delete, KeyValue, MetadataStore, Put
from tierlog.service.cluster.model import (
    BROKERS,
    NO_LEADER,
    BrokerRegistration,
    TopicAssignment,
    partition_prefix,
    topic_key,
    topic_name_key,
)
from tierlog.service.cluster.placement import assign_replicas, rack_alternated
from tierlog.service.topics.configs import TOPIC_CONFIGS, TopicConfig, validate_overrides
from tierlog.service.topics.resources import check_room_for_partitions
from tierlog.wire.errors import (
    CorruptRecordError,
    InvalidConfigError,
    TierlogError,
    UnavailableError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.controller import Controller
    from tierlog.service.cluster.node import ClusterNode
    from tierlog.service.topics.topic import Topic

__all__ = ["ClusterTopics", "commit_new_topic"]

log = logging.getLogger("tierlog.cluster.topics")

ATTEMPTS = 8  # compare-and-commit rounds before a write racing others gives up (503, retriable)


class ClusterTopics:
    """Topic admin for one cluster member. Event-loop only; every method is safe to call concurrently."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node

    @property
    def _timeout(self) -> float:
        return self._node.settings.broker_session_timeout_ms / 1000

    # ---- create ------------------------------------------------------------------------------------------

    async def create(
        self,
        name: str,
        partitions: int | None,
        configs: Mapping[str, str],
        *,
        internal: bool,
        replication_factor: int | None,
    ) -> Topic:
        """Create the topic with replicas over the live brokers. Not idempotent. Raises InvalidConfigError
        (as :meth:`Broker.create_topic`; "Topic 'x' already exists." also when another broker created it
        first), MetadataStoreError."""
        if self._node.cache.topic(name) is not None:
            raise InvalidConfigError(f"Topic '{name}' already exists.")
        assignment = await self._new_assignment(name, partitions, configs, internal, replication_factor)
        if not await self._commit_new(assignment):
            raise InvalidConfigError(f"Topic '{name}' already exists.")
        return await self._settled(assignment)

    async def ensure(self, name: str) -> Topic:
        """The topic, auto-created (``num.partitions``, ``default.replication.factor``) when absent.
        Idempotent; two brokers racing both answer the one topic. Raises as :meth:`create` (an illegal name
        at once)."""
        node = self._node
        found = node.broker.local_topics.get(name)
        if found is not None:
            return found
        existing = node.cache.topic(name)
        if existing is None:
            try:
                assignment = await self._new_assignment(name, None, {}, False, None)
            except InvalidConfigError:
                existing = node.cache.topic(name)
                if existing is None:
                    raise
            else:
                if await self._commit_new(assignment):
                    return await self._settled(assignment)
        if existing is None:  # another broker created it first: wait for this broker's cache to show it
            await node.cache.wait_for(lambda: node.cache.topic(name) is not None, self._timeout)
            existing = node.cache.topic(name)
            if existing is None:
                raise UnavailableError(f"Topic {name} exists but this broker has not seen it yet; retry.")
        return await self._settled(existing)

    async def _new_assignment(
        self,
        name: str,
        partitions: int | None,
        configs: Mapping[str, str],
        internal: bool,
        replication_factor: int | None,
    ) -> TopicAssignment:
        node = self._node
        count, overrides = node.broker.validate_create_locally(name, partitions, configs, internal=internal)
        factor = (
            node.settings.default_replication_factor if replication_factor is None else replication_factor
        )
        replicas = assign_replicas(await self._live_brokers(), count, factor)
        await self._check_room(replicas, f"Creating topic '{name}'")
        return TopicAssignment(name, uuid.uuid4().hex, tuple(replicas), overrides)

    async def _check_room(self, replicas: Sequence[Sequence[int]], action: str) -> None:
        """Refuse, before anything is written, partitions whose replicas placed here this broker cannot
        open (file descriptors, inodes, disk: :mod:`tierlog.service.topics.resources`)."""
        here = sum(1 for placed in replicas if self._node.broker_id in placed)
        await check_room_for_partitions(self._node.broker.data_dir, here, action)

    async def restore(self, only: set[str] | None = None) -> list[str]:
        """Create the topics the remote tier has manifests for and the cluster lacks (see
        :func:`~tierlog.service.remote.restore.restore_missing_topics`), one replica each (on the live
        brokers), without waiting for their leaders. Returns the restored names. Raises as that function."""
        from tierlog.service.remote.restore import restore_missing_topics

        node = self._node
        live = await self._live_brokers()
        return await restore_missing_topics(
            node.broker.remote.manifests,
            node.cache.topics(),
            self._commit_new,
            lambda count: assign_replicas(live, count, 1),
            only=only,
        )

    async def _commit_new(self, assignment: TopicAssignment) -> bool:
        """Commit the new topic; when this broker holds a replica, record its id in the data directory
        (``tierlog-cluster.json``) and open its new partition directories while the commit is written, not
        after it: the reconcile then takes the opened logs without a write of its own (it waits for the
        record when it is still in flight). A record and logs made for a create that did not commit are
        taken back. Raises as :func:`commit_new_topic`."""
        node = self._node
        ids, name = node.topic_ids, assignment.name
        commit = commit_new_topic(node.store, assignment, node.controller)
        mine = any(node.broker_id in replicas for replicas in assignment.replicas)
        if not (mine and ids.loaded and name not in ids.topics):
            committed = await commit
        else:
            ids.topics[name] = assignment.topic_id
            writes = asyncio.gather(
                commit, ids.save(node.cache.cluster_id, node.broker_id), return_exceptions=True
            )
            self._open_early(assignment)  # after the writes are under way: they are the longer path
            outcome, saved = await writes
            if isinstance(saved, BaseException) and not isinstance(saved, Exception):
                raise saved
            if isinstance(saved, Exception):  # the reconcile records it before opening, as it retries
                log.warning("could not record the id of topic %s in the data directory: %s", name, saved)
            if isinstance(outcome, BaseException) or not outcome:
                await node.early.discard(name, assignment.topic_id)
                await self._unrecord(name, assignment.topic_id)
            if isinstance(outcome, BaseException):
                raise outcome
            committed = outcome
        if not committed:
            return False
        log.info(
            "created topic %s: %d partitions, replication factor %d, overrides %s",
            assignment.name,
            assignment.partitions,
            assignment.replication_factor,
            assignment.configs or "none",
        )
        return True

    def _open_early(self, assignment: TopicAssignment) -> None:
        """Start opening this broker's new partitions of the topic while its commit is written (see
        :mod:`~tierlog.service.cluster.early_open`)."""
        node = self._node
        try:
            config = TopicConfig.resolve(node.settings.topic_defaults, assignment.configs).log
        except TierlogError:
            return  # the reconcile logs configs this broker cannot apply
        mine = [i for i, replicas in enumerate(assignment.replicas) if node.broker_id in replicas]
        leads = frozenset(i for i in mine if assignment.replicas[i][0] == node.broker_id)
        node.early.start(assignment.name, assignment.topic_id, mine, config, leads=leads)

    async def _unrecord(self, name: str, topic_id: str) -> None:
        ids = self._node.topic_ids
        if ids.topics.get(name) != topic_id:
            return  # the reconcile recorded the topic of that name another broker created
        del ids.topics[name]
        try:
            await ids.save(self._node.cache.cluster_id, self._node.broker_id)
        except TierlogError as err:  # a restart finds no such topic and no directory of it: nothing to undo
            log.warning("could not take back the id of topic %s in the data directory: %s", name, err)

    # ---- change ------------------------------------------------------------------------------------------

    async def delete(self, name: str, *, internal: bool) -> None:
        """Delete the topic and its partition states in one commit; wait until this broker dropped it.
        Not idempotent. Raises UnknownTopicError, InvalidConfigError (internal), MetadataStoreError,
        UnavailableError (kept racing other writers)."""
        node = self._node
        if name.startswith("__") and not internal:
            node.broker.topic(name)
            raise InvalidConfigError(f"Topic {name} is an internal topic and cannot be deleted.")
        key = topic_key(name)
        for _ in range(ATTEMPTS):
            kv = await self._read(name)
            ops = [Delete(key), Delete(partition_prefix(name), prefix=True), Delete(topic_name_key(name))]
            if await node.store.commit([Compare(key, kv.mod_revision)], ops) is not None:
                break
        else:
            raise UnavailableError(f"Topic {name} kept changing while being deleted; retry.")
        topic_id = TopicAssignment.decode(key, kv.value).topic_id
        log.info("deleted topic %s", name)

        def gone() -> bool:
            local = node.broker.local_topics.get(name)
            return local is None or local.topic_id != topic_id

        await node.wait_for(gone, self._timeout)

    async def alter_configs(
        self, name: str, updates: Mapping[str, str | None], *, validate_only: bool
    ) -> None:
        """Set or reset topic configs (all-or-nothing), then wait until this broker applied them.
        Idempotent. Raises UnknownTopicError, InvalidConfigError, MetadataStoreError, UnavailableError."""
        node = self._node
        defaults = node.settings.topic_defaults
        for _ in range(ATTEMPTS):
            kv = await self._read(name)
            assignment = TopicAssignment.decode(kv.key, kv.value)
            merged = dict(assignment.configs)
            for key, value in updates.items():
                if value is None:
                    if key not in TOPIC_CONFIGS:
                        raise InvalidConfigError(f"Unknown topic config name: {key}")
                    merged.pop(key, None)
                else:
                    merged[key] = value
            merged = validate_overrides(defaults, merged)
            config = TopicConfig.resolve(defaults, merged)
            was_remote = TopicConfig.resolve(defaults, assignment.configs).log.remote_storage_enable
            if was_remote and not config.log.remote_storage_enable:
                raise InvalidConfigError(
                    "Invalid value false for configuration remote.storage.enable: remote storage cannot be "
                    "disabled once enabled; delete the topic instead"
                )
            if validate_only:
                return
            changed = replace(assignment, configs=merged)
            if await node.store.commit([Compare(kv.key, kv.mod_revision)], [Put(kv.key, changed.encode())]):
                break
        else:
            raise UnavailableError(f"Topic {name} kept changing while its configs were altered; retry.")
        log.info("altered configs of topic %s: %s", name, dict(updates))

        def applied() -> bool:
            local = node.broker.local_topics.get(name)
            if local is None or local.topic_id != changed.topic_id:
                return True
            return local.overrides == merged and all(p.config == local.config for p in local.partitions)

        await node.wait_for(applied, self._timeout)

    async def add_partitions(self, name: str, count: int, check: Callable[[int], None]) -> Topic:
        """Grow the topic to ``count`` partitions, placing the new ones where the pattern continues.
        Idempotent for the current count. Raises UnknownTopicError, InvalidConfigError (also for an internal
        topic), MetadataStoreError, UnavailableError."""
        node = self._node
        if name.startswith("__"):
            node.broker.topic(name)
            # a group's coordinator is partition hash(group) % count: another count would move every group
            raise InvalidConfigError(
                f"Topic {name} is an internal topic: its partition count cannot be changed."
            )
        check(count)
        for _ in range(ATTEMPTS):
            kv = await self._read(name)
            assignment = TopicAssignment.decode(kv.key, kv.value)
            current = assignment.partitions
            if count < current:
                raise InvalidConfigError(
                    f"Topic currently has {current} partitions, which is higher than the requested {count}."
                )
            if count == current:
                return await self._settled(assignment)
            added = self._place_more(assignment, count - current, dict(await self._live_brokers()))
            await self._check_room(added, f"Growing topic '{name}' from {current} to {count} partitions")
            grown = replace(assignment, replicas=assignment.replicas + tuple(added))
            if await node.store.commit([Compare(kv.key, kv.mod_revision)], [Put(kv.key, grown.encode())]):
                break
        else:
            raise UnavailableError(f"Topic {name} kept changing while partitions were added; retry.")
        log.info("topic %s now has %d partitions", name, count)
        return await self._settled(grown)

    def _place_more(
        self, assignment: TopicAssignment, more: int, live: dict[int, str | None]
    ) -> list[tuple[int, ...]]:
        racks = {b: r for b, r in live.items() if r is not None}
        ordered = rack_alternated(racks) if len(racks) == len(live) and live else sorted(live)
        first = assignment.replicas[0][0] if assignment.replicas and assignment.replicas[0] else None
        start = ordered.index(first) if first in ordered else None
        return assign_replicas(
            list(live.items()),
            more,
            max(1, assignment.replication_factor),
            first_partition=assignment.partitions,
            start_index=start,
        )

    # ---- helpers -----------------------------------------------------------------------------------------

    async def _live_brokers(self) -> list[tuple[int, str | None]]:
        """``(broker_id, rack)`` of every live broker, read from the store (the cache may not have seen a
        broker that just registered). Raises MetadataStoreError."""
        kvs, _ = await self._node.store.range(BROKERS)
        live = []
        for kv in kvs:
            try:
                registration = BrokerRegistration.decode(kv.key, kv.value)
            except CorruptRecordError as err:
                log.error("ignoring an undecodable broker registration: %s", err)
                continue
            live.append((registration.broker_id, registration.rack))
        return live

    async def _read(self, name: str) -> KeyValue:
        kv = await self._node.store.get(topic_key(name))
        if kv is None:
            raise UnknownTopicError(f"Topic not found. ({name})")
        return kv

    async def _settled(self, assignment: TopicAssignment) -> Topic:
        """Wait (bounded) until this broker has the topic and every partition has a leader, the ones this
        broker leads open and led here at their leader epoch (so a produce right after the create is
        served); answer the local topic. Raises UnavailableError when the broker never saw the
        topic within the wait (it is committed: describing it later shows it)."""
        node = self._node
        name, topic_id = assignment.name, assignment.topic_id

        def local() -> Topic | None:
            found = node.broker.local_topics.get(name)
            return found if found is not None and found.topic_id == topic_id else None

        def settled() -> bool:
            topic = local()
            if topic is None or topic.partition_count < assignment.partitions:
                return False
            for index in range(assignment.partitions):
                state = node.cache.partition_state(name, index)
                if state is None or state.leader == NO_LEADER:
                    return False
                if state.leader == node.broker_id:
                    # open AND leading at the state's epoch: opened as a follower, it is not serving yet
                    opened = topic.local(index)
                    if opened is None or opened.role != "leader" or opened.leader_epoch != state.leader_epoch:
                        return False
            return True

        if not await node.wait_for(settled, self._timeout):
            missing = [i for i in range(assignment.partitions) if node.cache.leader_of(name, i) is None]
            log.warning("topic %s: no leader yet for partitions %s", name, missing)
        topic = local()
        if topic is None:
            raise UnavailableError(f"Topic {name} is committed but this broker has not seen it yet; retry.")
        return topic


async def commit_new_topic(
    store: MetadataStore, assignment: TopicAssignment, controller: Controller | None = None
) -> bool:
    """Put the assignment if no topic of that name exists; False when one does. The name's folded form
    (``.`` as ``_``, Kafka's collision rule) is claimed in the same commit, so two brokers creating
    ``a.b`` and ``a_b`` at once cannot both succeed. When ``controller`` is this broker's and active, the
    same commit carries the partitions' initial states (:meth:`Controller.commit_new_topic`); otherwise, or
    when that fenced commit is refused, the topic is committed alone and the controller decides the states.

    Raises: InvalidConfigError (40002) when another topic holds the folded name; MetadataStoreError."""
    key, claim = topic_key(assignment.name), topic_name_key(assignment.name)
    compares = [Compare(key, 0), Compare(claim, 0)]
    ops = [Put(key, assignment.encode()), Put(claim, assignment.name.encode())]
    if controller is not None and await controller.commit_new_topic(assignment, compares, ops):
        return True
    if await store.commit(compares, ops) is None:
        held = await store.get(claim)
        holder = held.value.decode("utf-8", "replace") if held is not None else assignment.name
        if holder != assignment.name:
            raise InvalidConfigError(f"Topic '{assignment.name}' collides with existing topic: {holder}")
        return False
    return True
