"""What every metadata answer is built from: an immutable picture of the cluster as one broker sees it.

:meth:`tierlog.service.topics.broker.Broker.cluster_view` returns a :class:`ClusterView` built from the
broker's
metadata cache (:meth:`tierlog.service.cluster.cache.MetadataCache.view`); a single broker sees a cluster
of one whose controller it is and which leads every partition. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tierlog.service.cluster.model import BrokerRegistration

__all__ = ["ClusterView", "PartitionView"]


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition's leadership. ``leader`` is -1 when the partition has no live leader (or no state
    yet); ``isr`` lists the in-sync replicas (the leader alone until replication exists)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster at one moment: live brokers by id, the controller (-1 when none) and every topic's
    partitions in index order. Immutable; safe to share between coroutines."""

    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: tuple[BrokerRegistration, ...]
    partitions: Mapping[str, tuple[PartitionView, ...]]
    topic_ids: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # name -> uuid hex

    def topic_uuid(self, name: str) -> uuid.UUID:
        """The topic's id as a UUID (the zero UUID when unknown or not a UUID)."""
        try:
            return uuid.UUID(hex=self.topic_ids[name])
        except (KeyError, ValueError):
            return uuid.UUID(int=0)

    def topic_by_id(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with id ``topic_id``; None when there is none (or it is the zero UUID, which
        Kafka's message codec reads as None)."""
        if topic_id is None or topic_id.int == 0:
            return None
        return next((name for name in self.partitions if self.topic_uuid(name) == topic_id), None)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The live broker ``broker_id``, or ``None``."""
        return next((b for b in self.brokers if b.broker_id == broker_id), None)
