"""A topic as the broker holds it: its persisted record, the broker defaults and its open partitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tierlog.service.topic_configs import effective_configs
from tierlog.tiering.errors import UnknownPartitionError

if TYPE_CHECKING:
    from tierlog.service import metadata as meta
    from tierlog.service.partition import Partition

__all__ = ["Topic"]


class Topic:
    """A topic and its open partitions. Read-only to callers; the broker mutates it."""

    def __init__(
        self, record: meta.TopicRecord, defaults: Mapping[str, str], partitions: list[Partition]
    ) -> None:
        self.name = record.name
        self.topic_id = record.topic_id
        self.partitions = partitions
        self._record = record
        self._defaults = defaults

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def overrides(self) -> dict[str, str]:
        """The configs set on this topic (``DYNAMIC_TOPIC_CONFIG``), by Kafka name."""
        return dict(self._record.configs)

    def configs(self) -> dict[str, str]:
        """Every topic config's effective value, by Kafka name. Pure."""
        return effective_configs(self._defaults, self._record.configs)

    def partition(self, index: int) -> Partition:
        """Raises: UnknownPartitionError (40402) for an index outside ``[0, partitions_count)``."""
        if isinstance(index, int) and 0 <= index < len(self.partitions):
            return self.partitions[index]
        raise UnknownPartitionError(f"Partition {index} of topic {self.name} not found.")
