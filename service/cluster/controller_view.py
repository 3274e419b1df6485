"""The controller's view of the metadata store, and the writes it decides from that view.

:class:`View` is the controller's own copy of every key it decides from (brokers, the controller key and
epoch, topics, partition states), each with the revision it was read at, kept by the controller's sync
task from one range read and the watch after it (:mod:`tierlog.service.cluster.controller`). A stored value
that does not parse is logged and never guessed at: an unreadable controller key, controller epoch or
partition state is kept as present but unreadable (None at the revision read, so a commit over it still
compares that revision, and an unreadable epoch stops campaigns); an unreadable broker registration or topic
keeps the last good value read, or stays absent. :class:`Write` is one decided change to a partition's
state with the revisions its commit compares against.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.service.cluster.metadata_store import KeyValue, WatchEvent
from tierlog.service.cluster.model import (
    BROKERS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PARTITIONS,
    TOPICS,
    BrokerRegistration,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    parse_partition_key,
)
from tierlog.wire.errors import CorruptRecordError

__all__ = ["View", "Write"]

log = logging.getLogger("tierlog.cluster.controller")


class View:
    """The controller's copy of the store: every key it decides from, with the revision it was read at."""

    def __init__(self, revision: int) -> None:
        self.revision = revision
        self.brokers: dict[int, BrokerRegistration] = {}
        self.broker_revs: dict[int, int] = {}  # the revision each live registration was read at
        self.controller: ControllerRecord | None = None
        self.controller_rev = 0  # 0: no controller key (a corrupt one still counts as present)
        self.epoch: int | None = 0  # None: controller_epoch is unreadable, so nobody may campaign
        self.epoch_rev = 0
        self.topics: dict[str, tuple[TopicAssignment, int]] = {}
        # topic -> partition -> (state, mod_revision); state None: the stored value is corrupt
        self.partitions: dict[str, dict[int, tuple[PartitionState | None, int]]] = {}

    @classmethod
    def load(cls, kvs: Iterable[KeyValue], revision: int) -> View:
        view = cls(revision)
        for kv in kvs:
            view.put(kv.key, kv.value, kv.mod_revision)
        return view

    def apply(self, event: WatchEvent) -> None:
        if event.kind == "put":
            self.put(event.key, event.value, event.mod_revision)
        else:
            self.delete(event.key)
        self.revision = max(self.revision, event.mod_revision)

    def put(self, key: str, value: bytes, revision: int) -> None:
        try:
            if key == CONTROLLER:
                self.controller, self.controller_rev = None, revision
                self.controller = ControllerRecord.decode(key, value)
            elif key == CONTROLLER_EPOCH:
                self.epoch, self.epoch_rev = None, revision
                self.epoch = int(value.decode())
            elif key.startswith(BROKERS):
                broker_id = int(key.removeprefix(BROKERS))
                self.brokers[broker_id] = BrokerRegistration.decode(key, value)
                self.broker_revs[broker_id] = revision
            elif key.startswith(TOPICS):
                self.topics[key.removeprefix(TOPICS)] = (TopicAssignment.decode(key, value), revision)
            elif key.startswith(PARTITIONS):
                topic, index = parse_partition_key(key)
                states = self.partitions.setdefault(topic, {})
                states[index] = (None, revision)
                states[index] = (PartitionState.decode(key, value), revision)
        except (CorruptRecordError, ValueError, UnicodeDecodeError) as err:
            log.error("controller: ignoring unreadable metadata key %r: %s", key, err)

    def delete(self, key: str) -> None:
        if key == CONTROLLER:
            self.controller, self.controller_rev = None, 0
        elif key == CONTROLLER_EPOCH:
            self.epoch, self.epoch_rev = 0, 0
        elif key.startswith(BROKERS):
            with contextlib.suppress(ValueError):
                self.brokers.pop(int(key.removeprefix(BROKERS)), None)
                self.broker_revs.pop(int(key.removeprefix(BROKERS)), None)
        elif key.startswith(TOPICS):
            self.topics.pop(key.removeprefix(TOPICS), None)
        elif key.startswith(PARTITIONS):
            with contextlib.suppress(CorruptRecordError):
                topic, index = parse_partition_key(key)
                states = self.partitions.get(topic, {})
                states.pop(index, None)
                if not states:
                    self.partitions.pop(topic, None)


@dataclass(frozen=True, slots=True)
class Write:
    """One decided change: ``state`` None deletes the partition state (its topic or index is gone)."""

    topic: str
    topic_rev: int  # the topic key's revision the decision was made from (0: the topic is gone)
    partition: int
    read_rev: int
    state: PartitionState | None
    reason: str | None
    old_leader: int
    old_isr: tuple[int, ...] | None = None  # None: the partition had no state
