"""A REST consumer instance and what the consumer layer needs of the broker to serve it.

Pure declarations: the instance's state lives here, :class:`~tierlog.service.groups.consumers.ConsumerManager`
changes it.

With security on, an instance remembers who created it (principal and client host) and how to ask whether
that principal may Read a topic now (``may_read``): a ``topic_pattern`` subscription is resolved only over
the topics it may Read, as Kafka resolves a pattern only over the topics the principal may see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tierlog.service.groups.consumer_config import ConsumerSettings
from tierlog.service.security.model import Principal

__all__ = ["ConsumerInstance", "PartitionReader", "ReadLike", "TopicPartition"]

TopicPartition = tuple[str, int]


class ReadLike(Protocol):
    @property
    def data(self) -> bytes: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...


class PartitionReader(Protocol):
    """What the consumer layer needs of the broker (``tierlog.service.topics.broker.Broker`` satisfies it)."""

    def partition_counts(self) -> Mapping[str, int]: ...

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | Awaitable[tuple[int, int]]:
        """``(log start offset, high watermark)``: at once for a local partition, awaitable for one
        another broker leads."""
        ...

    async def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> ReadLike: ...

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None: ...


@dataclass
class ConsumerInstance:
    """One REST consumer instance. Use only through :class:`ConsumerManager`'s coroutines."""

    group: str
    name: str
    settings: ConsumerSettings
    base_uri: str
    last_used_ms: int
    member_id: str = ""
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    manual: list[TopicPartition] = field(default_factory=list)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    acknowledged: dict[TopicPartition, int] = field(default_factory=dict)
    last_auto_commit_ms: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    principal: Principal | None = None  # the creating request's (None with security off)
    client_host: str | None = None
    may_read: Callable[[str], bool] | None = field(default=None, repr=False)  # None: every topic
    resolved: list[str] | None = None  # what a pattern resolved to when the group last got it

    @property
    def subscribed(self) -> bool:
        return bool(self.member_id)
