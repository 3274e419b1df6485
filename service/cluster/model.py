"""The cluster metadata records and where they live in the metadata store. Pure: no I/O.

Key layout (relative to the store prefix; a topic name never contains ``/``)::

    cluster/id                       the cluster id (created once, by the first broker)
    brokers/<broker_id>              BrokerRegistration, attached to the broker's lease (its session)
    controller                       ControllerRecord, attached to the controller's lease
    controller_epoch                 the last controller epoch handed out (decimal text; never deleted)
    topics/<topic>                   TopicAssignment: id, replica lists per partition, config overrides
    topic_names/<folded>             the topic holding a folded name (``.`` as ``_``): Kafka's collision rule
    partitions/<topic>/<partition>   PartitionState: leader, leader epoch, ISR (written by the controller)

Every value is a UTF-8 JSON object (``controller_epoch`` and ``cluster/id`` are plain text). Decoders
raise :class:`~tierlog.wire.errors.CorruptRecordError` for anything else, naming the key.

Fencing: the controller writes ``partitions/...`` only in a commit that also compares the ``controller``
key's ``mod_revision`` with the one it wrote when it was elected, and the partition key's with the one it
read; a deposed controller's writes therefore fail, and no two decisions race.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tierlog.wire.errors import CorruptRecordError

__all__ = [
    "BROKERS",
    "CLUSTER_ID",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "NO_LEADER",
    "PARTITIONS",
    "TOPICS",
    "TOPIC_NAMES",
    "BrokerRegistration",
    "ControllerRecord",
    "PartitionState",
    "TopicAssignment",
    "AlterPartitionRequest",
    "broker_key",
    "partition_key",
    "partition_prefix",
    "parse_partition_key",
    "topic_key",
    "topic_name_key",
]

CLUSTER_ID = "cluster/id"
BROKERS = "brokers/"
CONTROLLER = "controller"
CONTROLLER_EPOCH = "controller_epoch"
TOPICS = "topics/"
TOPIC_NAMES = "topic_names/"
PARTITIONS = "partitions/"
NO_LEADER = -1


def broker_key(broker_id: int) -> str:
    return f"{BROKERS}{broker_id}"


def topic_key(topic: str) -> str:
    return f"{TOPICS}{topic}"


def topic_name_key(topic: str) -> str:
    """The key claiming ``topic``'s folded name: ``a.b`` and ``a_b`` collide (Kafka's rule)."""
    return f"{TOPIC_NAMES}{topic.replace('.', '_')}"


def partition_prefix(topic: str) -> str:
    """The prefix of every partition state key of ``topic`` (ends with ``/``)."""
    return f"{PARTITIONS}{topic}/"


def partition_key(topic: str, partition: int) -> str:
    return f"{PARTITIONS}{topic}/{partition}"


def parse_partition_key(key: str) -> tuple[str, int]:
    """``partitions/<topic>/<p>`` -> ``(topic, p)``. Raises CorruptRecordError for another shape."""
    rest = key.removeprefix(PARTITIONS)
    topic, sep, index = rest.rpartition("/")
    if not key.startswith(PARTITIONS) or not sep or not topic or not index.isdigit():
        raise CorruptRecordError(f"not a partition state key: {key!r}")
    return topic, int(index)


def _load(key: str, raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptRecordError(f"metadata key {key!r} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise CorruptRecordError(f"metadata key {key!r} is not a JSON object")
    return doc


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise TypeError(f"expected a list of integers, got {value!r}")
    return tuple(value)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: ``brokers/<id>``, attached to its lease. ``incarnation`` is new on every start, so a
    restarted broker is told apart from its previous life (Kafka's broker epoch)."""

    broker_id: int
    url: str
    rack: str | None = None
    incarnation: str = ""
    kafka: str | None = None  # "host:port" of its Kafka protocol listener; None when it has none

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "broker_id": self.broker_id,
            "url": self.url,
            "rack": self.rack,
            "incarnation": self.incarnation,
        }
        if self.kafka is not None:
            doc["kafka"] = self.kafka
        return _dump(doc)

    @classmethod
    def decode(cls, key: str, raw: bytes) -> BrokerRegistration:
        doc = _load(key, raw)
        try:
            rack = doc.get("rack")
            kafka = doc.get("kafka")
            return cls(int(doc["broker_id"]), str(doc["url"]), None if rack is None else str(rack),
                       str(doc.get("incarnation", "")), None if kafka is None else str(kafka))  # fmt: skip
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(f"metadata key {key!r} is not a broker registration: {err!r}") from err


@dataclass(frozen=True, slots=True)
class ControllerRecord:
    """The active controller: ``controller``, attached to the controller's lease."""

    broker_id: int
    epoch: int

    def encode(self) -> bytes:
        return _dump({"broker_id": self.broker_id, "epoch": self.epoch})

    @classmethod
    def decode(cls, key: str, raw: bytes) -> ControllerRecord:
        doc = _load(key, raw)
        try:
            return cls(int(doc["broker_id"]), int(doc["epoch"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(f"metadata key {key!r} is not a controller record: {err!r}") from err


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic: ``topics/<name>``. ``replicas[p]`` lists partition ``p``'s replicas, preferred leader first.

    Written by the broker that creates, alters or grows the topic (a commit conditioned on the key's
    ``mod_revision``); the controller reads it and writes the partition states.
    """

    name: str
    topic_id: str
    replicas: tuple[tuple[int, ...], ...]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        return len(self.replicas[0]) if self.replicas else 0

    def encode(self) -> bytes:
        return _dump(
            {
                "name": self.name,
                "topic_id": self.topic_id,
                "replicas": [list(r) for r in self.replicas],
                "configs": dict(self.configs),
            }
        )

    @classmethod
    def decode(cls, key: str, raw: bytes) -> TopicAssignment:
        doc = _load(key, raw)
        try:
            configs = doc.get("configs", {})
            if not isinstance(configs, dict):
                raise TypeError("configs is not an object")
            return cls(
                name=str(doc["name"]),
                topic_id=str(doc["topic_id"]),
                replicas=tuple(_ints(r) for r in doc["replicas"]),
                configs={str(k): str(v) for k, v in configs.items()},
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(f"metadata key {key!r} is not a topic assignment: {err!r}") from err


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leadership: ``partitions/<topic>/<p>``, written only by the controller.

    ``leader`` is :data:`NO_LEADER` (-1) when no live in-sync replica can lead. ``leader_epoch`` grows by one
    on every leader change (including to and from -1), ``partition_epoch`` on every change of this record;
    ``controller_epoch`` is the epoch of the controller that wrote it. The ISR changes through the leader's
    AlterPartition requests (design 0010) and when a broker's session ends; when the last ISR member is
    lost the ISR keeps it, as Kafka does, so that broker leads again when it returns.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0
    controller_epoch: int = 0

    def encode(self) -> bytes:
        return _dump(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "partition_epoch": self.partition_epoch,
                "controller_epoch": self.controller_epoch,
            }
        )

    @classmethod
    def decode(cls, key: str, raw: bytes) -> PartitionState:
        doc = _load(key, raw)
        try:
            return cls(
                leader=int(doc["leader"]),
                leader_epoch=int(doc["leader_epoch"]),
                isr=_ints(doc["isr"]),
                partition_epoch=int(doc.get("partition_epoch", 0)),
                controller_epoch=int(doc.get("controller_epoch", 0)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(f"metadata key {key!r} is not a partition state: {err!r}") from err


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader's request to the controller to change a partition's ISR (Kafka's AlterPartition, KIP-497).

    ``leader_epoch`` and ``partition_epoch`` are those of the state the leader acts on: the controller refuses
    a request whose leader epoch is not current (:class:`~tierlog.wire.errors.FencedLeaderEpochError`) or
    whose partition epoch is stale (:class:`~tierlog.wire.errors.InvalidUpdateVersionError`), and a new ISR
    that adds a replica not alive or not assigned (:class:`~tierlog.wire.errors.IneligibleReplicaError`).
    ``broker_id`` is the leader sending it. Sent as JSON to ``POST /native/v1/replication/alter-partition``.
    """

    topic: str
    partition: int
    broker_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]

    def encode(self) -> bytes:
        return _dump(
            {
                "topic": self.topic,
                "partition": self.partition,
                "broker_id": self.broker_id,
                "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch,
                "new_isr": list(self.new_isr),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> AlterPartitionRequest:
        """Raises CorruptRecordError for a body of another shape (the route answers it as 400)."""
        doc = _load("alter-partition request", raw)
        try:
            return cls(
                topic=str(doc["topic"]),
                partition=int(doc["partition"]),
                broker_id=int(doc["broker_id"]),
                leader_epoch=int(doc["leader_epoch"]),
                partition_epoch=int(doc["partition_epoch"]),
                new_isr=_ints(doc["new_isr"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(f"not an alter-partition request: {err!r}") from err
