"""A topic as the broker holds it: its persisted record, its resolved configs and its open partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.tiering.errors import UnknownPartitionError

if TYPE_CHECKING:
    from tierlog.service import metadata as meta
    from tierlog.service.partition import Partition
    from tierlog.service.topic_configs import TopicConfig
    from tierlog.tiering.log import LogConfig

__all__ = ["Topic"]


class Topic:
    """A topic and its open partitions. Read-only to callers; the broker mutates it.

    Its configs are one immutable :class:`TopicConfig` snapshot, replaced whole by :meth:`reconfigure`:
    a reader on the event loop sees the old or the new configs, never a mix, and takes no lock.
    """

    def __init__(self, record: meta.TopicRecord, config: TopicConfig, partitions: list[Partition]) -> None:
        self.name = record.name
        self.topic_id = record.topic_id
        self.partitions = partitions
        self._record = record
        self._config = config

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def overrides(self) -> dict[str, str]:
        """The configs set on this topic (``DYNAMIC_TOPIC_CONFIG``), by Kafka name."""
        return dict(self._record.configs)

    @property
    def config(self) -> LogConfig:
        """The typed effective configs (the current snapshot); what the produce path reads."""
        return self._config.log

    def configs(self) -> dict[str, str]:
        """Every topic config's effective value, by Kafka name (a copy of the current snapshot)."""
        return dict(self._config.values)

    def reconfigure(self, config: TopicConfig) -> None:
        """Publish ``config`` as the topic's configs (the broker calls this after persisting them)."""
        self._config = config

    def partition(self, index: int) -> Partition:
        """Raises: UnknownPartitionError (40402) for an index outside ``[0, partitions_count)``."""
        if isinstance(index, int) and 0 <= index < len(self.partitions):
            return self.partitions[index]
        raise UnknownPartitionError(f"Partition not found. (partition {index} of topic {self.name})")
