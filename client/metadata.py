"""The cluster as the client sees it: live brokers and each partition's leader.

A :class:`ClusterMetadata` is one answer of ``GET /native/v1/metadata`` (docs/design/0008-cluster-metadata.md,
"Routing"), decoded once and never changed: the router publishes a whole new snapshot on every refresh or
leader hint, and readers (the producer's ``send``, the sender, the fetchers) use the snapshot they hold
without locks. ``legacy`` snapshots stand for a broker older than cluster mode (no metadata route): that one
broker leads every partition.

Everything here is pure and thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tierlog.client.types import TopicPartition
from tierlog.wire.errors import CorruptRecordError, UnknownTopicError

__all__ = [
    "NO_LEADER",
    "BrokerInfo",
    "ClusterMetadata",
    "PartitionLeader",
    "decode_metadata",
    "legacy_metadata",
]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    url: str
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Who leads one partition. ``url`` is empty when there is no live leader (``leader`` -1, or a leader
    whose broker is not live)."""

    partition: int
    leader: int
    leader_epoch: int
    url: str


@dataclass(frozen=True)
class ClusterMetadata:
    """One immutable view of the cluster. ``version`` grows with every snapshot a router publishes;
    ``fetched_at`` is the router's clock when the answer arrived (a leader hint keeps it)."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: Mapping[str, tuple[PartitionLeader, ...]]
    unknown_topics: frozenset[str] = frozenset()
    legacy: bool = False
    version: int = 0
    fetched_at: float = 0.0
    _by_url: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(self.topics)))
        object.__setattr__(self, "_by_url", frozenset(b.url for b in self.brokers))

    def leader(self, tp: TopicPartition) -> PartitionLeader | None:
        """The leader of ``tp``, or None when the topic or the partition is not in this snapshot."""
        partitions = self.topics.get(tp.topic)
        if partitions is None or not 0 <= tp.partition < len(partitions):
            return None
        found = partitions[tp.partition]
        return found if found.partition == tp.partition else None

    def partition_count(self, topic: str) -> int | None:
        """The partition count of ``topic``, None when this snapshot does not know the topic."""
        partitions = self.topics.get(topic)
        return None if partitions is None else len(partitions)

    def knows(self, topic: str) -> bool:
        """Whether this snapshot answers for ``topic`` (it exists, or the broker said it does not)."""
        return topic in self.topics or topic in self.unknown_topics

    def check_topic(self, topic: str) -> None:
        """Raises UnknownTopicError when the broker said ``topic`` does not exist."""
        if topic in self.unknown_topics:
            raise UnknownTopicError(f"topic {topic} does not exist")

    def is_live(self, url: str) -> bool:
        return url in self._by_url

    def with_leader(self, tp: TopicPartition, leader: int, url: str, epoch: int) -> ClusterMetadata:
        """This snapshot with ``tp`` led by ``leader`` at ``url`` and ``epoch`` (a NOT_LEADER_OR_FOLLOWER
        hint), version + 1. Unchanged (``self``) when ``tp`` is not in the snapshot. Pure."""
        partitions = self.topics.get(tp.topic)
        if partitions is None or self.leader(tp) is None:
            return self
        updated = list(partitions)
        updated[tp.partition] = PartitionLeader(tp.partition, leader, epoch, url)
        topics = {**self.topics, tp.topic: tuple(updated)}
        brokers = self.brokers
        if not self.is_live(url):
            brokers = (*brokers, BrokerInfo(leader, url))
        return replace(self, topics=topics, brokers=brokers, version=self.version + 1)

    def merged(self, newer: ClusterMetadata, *, version: int) -> ClusterMetadata:
        """``newer`` (the answer for some topics) over this snapshot: topics ``newer`` answered for come from
        it, the others stay as they were. Pure."""
        answered = set(newer.topics) | newer.unknown_topics
        topics = {t: p for t, p in self.topics.items() if t not in answered}
        topics.update(newer.topics)
        unknown = (self.unknown_topics - answered) | newer.unknown_topics
        return replace(newer, topics=topics, unknown_topics=frozenset(unknown), version=version)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def decode_metadata(
    doc: Any, *, answered_by: str | None = None, fetched_at: float = 0.0, version: int = 0
) -> ClusterMetadata:
    """Parse one ``GET /native/v1/metadata`` answer. A topic listed with an ``error_code`` (40401: it does not
    exist) goes to ``unknown_topics``. A leader that is not among the live brokers counts as no leader.

    When the answer lists exactly one live broker, that broker is the one at ``answered_by`` (the URL the
    client reached): a single broker's own idea of its URL (its listen address, port 0 in tests) need not
    be reachable from the client, and the client reached it at ``answered_by`` already. Pure.

    Raises:
        CorruptRecordError: the answer does not have the documented shape.
    """
    try:
        brokers = tuple(
            sorted(
                (
                    BrokerInfo(
                        _int(b["broker_id"]),
                        str(b["url"]).rstrip("/"),
                        None if b.get("rack") is None else str(b["rack"]),
                    )
                    for b in doc["brokers"]
                ),
                key=lambda b: b.broker_id,
            )
        )
        if answered_by is not None and len(brokers) == 1:
            brokers = (replace(brokers[0], url=answered_by.rstrip("/")),)
        urls = {b.broker_id: b.url for b in brokers}
        topics: dict[str, tuple[PartitionLeader, ...]] = {}
        unknown: set[str] = set()
        for t in doc.get("topics", ()):
            name = str(t["topic"])
            if t.get("error_code") is not None:
                unknown.add(name)
                continue
            described = sorted(
                (
                    PartitionLeader(
                        _int(p["partition"]),
                        _int(p["leader"]),
                        _int(p.get("leader_epoch", 0)),
                        urls.get(_int(p["leader"]), ""),
                    )
                    for p in t["partitions"]
                ),
                key=lambda p: p.partition,
            )
            if [p.partition for p in described] != list(range(len(described))):
                raise ValueError(f"topic {name}: partitions are not 0..n-1")
            topics[name] = tuple(described)
        return ClusterMetadata(
            str(doc["cluster_id"]),
            _int(doc.get("controller_id", NO_LEADER)),
            brokers,
            topics,
            frozenset(unknown),
            version=version,
            fetched_at=fetched_at,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CorruptRecordError(f"the broker's metadata answer has an unexpected shape: {err!r}") from err


def legacy_metadata(
    url: str, counts: Mapping[str, int], unknown: Iterable[str], *, fetched_at: float, version: int
) -> ClusterMetadata:
    """What a broker without the metadata route amounts to: one broker (id 0 at ``url``) leading every
    partition of the ``counts`` topics at epoch 0. Pure."""
    topics = {
        topic: tuple(PartitionLeader(p, 0, 0, url) for p in range(count)) for topic, count in counts.items()
    }
    return ClusterMetadata(
        "",
        0,
        (BrokerInfo(0, url),),
        topics,
        frozenset(unknown),
        legacy=True,
        version=version,
        fetched_at=fetched_at,
    )
