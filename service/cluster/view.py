"""What every metadata answer is built from: an immutable picture of the cluster as one broker sees it.

:meth:`tierlog.service.topics.broker.Broker.cluster_view` returns a :class:`ClusterView` in both modes: an
embedded broker is a one-broker cluster whose controller it is and which leads every partition at leader
epoch 0 (:func:`embedded_view`); a cluster member builds it from its metadata cache
(:meth:`tierlog.service.cluster.cache.MetadataCache.view`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tierlog.service.cluster.model import BrokerRegistration

__all__ = ["ClusterView", "PartitionView", "embedded_view"]


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

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        """The live broker ``broker_id``, or ``None``."""
        return next((b for b in self.brokers if b.broker_id == broker_id), None)


def embedded_view(
    cluster_id: str, broker_id: int, url: str, rack: str | None, topics: Iterable[tuple[str, int]]
) -> ClusterView:
    """The view of an embedded broker: itself the only broker and the controller (epoch 0), leader of
    every partition of ``topics`` (``(name, partition_count)`` pairs) at leader epoch 0. Pure."""
    me = (broker_id,)
    partitions = {
        name: tuple(PartitionView(p, broker_id, 0, me, me) for p in range(count)) for name, count in topics
    }
    return ClusterView(
        cluster_id=cluster_id,
        controller_id=broker_id,
        controller_epoch=0,
        brokers=(BrokerRegistration(broker_id, url, rack),),
        partitions=MappingProxyType(dict(sorted(partitions.items()))),
    )
