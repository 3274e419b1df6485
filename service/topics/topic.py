"""A topic as the broker holds it: its record, its resolved configs and the partitions open on this broker.

A broker opens the partitions it is a replica of (leading or following them, design 0010; a single broker
leads all of them) but serves clients only those it leads; asking it for another one raises the error that
sends the client to the leader (see :meth:`Topic.partition`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.wire.errors import UnknownPartitionError

if TYPE_CHECKING:
    from tierlog.service.topics import data_dir as meta
    from tierlog.service.topics.configs import TopicConfig
    from tierlog.service.topics.partition import Partition
    from tierlog.tiering.log import LogConfig

__all__ = ["Leadership", "Topic"]

# ``check(topic, index, local)``: returns the partition to serve, or raises NotLeaderOrFollowerError /
# LeaderNotAvailableError. ``local`` is the partition open on this broker, if any.
Leadership = Callable[[str, int, "Partition | None"], "Partition"]


class Topic:
    """A topic and the partitions open on this broker. Read-only to callers; the broker mutates it.

    Its configs are one immutable :class:`TopicConfig` snapshot, replaced whole by :meth:`reconfigure`:
    a reader on the event loop sees the old or the new configs, never a mix, and takes no lock.
    ``leadership`` is the cluster's check of who serves a partition.
    """

    def __init__(
        self,
        record: meta.TopicRecord,
        config: TopicConfig,
        partitions: list[Partition],
        *,
        leadership: Leadership,
    ) -> None:
        self.name = record.name
        self.topic_id = record.topic_id
        self._local: dict[int, Partition] = {p.index: p for p in partitions}
        self._record = record
        self._config = config
        self._leadership = leadership

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def partition_count(self) -> int:
        """How many partitions the topic has (in a cluster: on every broker, open here or not)."""
        return self._record.partitions

    @property
    def partitions(self) -> list[Partition]:
        """The partitions open on this broker, in index order: the replicas this broker holds, leading or
        following (``Partition.role``; use
        :meth:`partition` to serve a client, :attr:`partition_count` for the topic's count)."""
        return [self._local[i] for i in sorted(self._local)]

    @property
    def overrides(self) -> dict[str, str]:
        """The configs set on this topic (``DYNAMIC_TOPIC_CONFIG``), by Kafka name."""
        return dict(self._record.configs)

    @property
    def record(self) -> meta.TopicRecord:
        return self._record

    @property
    def config(self) -> LogConfig:
        """The typed effective configs (the current snapshot); what the produce path reads."""
        return self._config.log

    @property
    def topic_config(self) -> TopicConfig:
        return self._config

    def configs(self) -> dict[str, str]:
        """Every topic config's effective value, by Kafka name (a copy of the current snapshot)."""
        return dict(self._config.values)

    def reconfigure(self, config: TopicConfig, record: meta.TopicRecord | None = None) -> None:
        """Publish ``config`` (and, in a cluster, the new ``record``) as the topic's configs (the broker
        calls this after persisting them)."""
        if record is not None:
            self._record = record
        self._config = config

    def local(self, index: int) -> Partition | None:
        """The partition open on this broker, or ``None``. Never raises."""
        return self._local.get(index)

    def add_local(self, partition: Partition) -> None:
        """Register an opened partition (the broker calls this)."""
        self._local[partition.index] = partition

    def remove_local(self, index: int) -> Partition | None:
        """Forget a partition this broker closed (the broker calls this)."""
        return self._local.pop(index, None)

    def partition(self, index: int) -> Partition:
        """The partition to serve ``index`` from. Raises:
        UnknownPartitionError (40402): ``index`` is outside ``[0, partition_count)``.
        NotLeaderOrFollowerError (50310, retriable): another broker leads it (the error names the leader,
            its URL and the leader epoch).
        LeaderNotAvailableError (50311, retriable): no live broker leads it now.
        """
        if isinstance(index, int) and 0 <= index < self.partition_count:
            local = self._local.get(index)
            return self._leadership(self.name, index, local)
        raise UnknownPartitionError(f"Partition not found. (partition {index} of topic {self.name})")
