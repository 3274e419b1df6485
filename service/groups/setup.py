"""Wiring of consumer groups into the broker application.

:func:`setup_groups` registers the REST v2 consumer API, the native group API and the v3 group routes
(each wrapped so that a request reaching a broker that is not the group's coordinator is forwarded there,
see :mod:`tierlog.service.groups.routing`), and a cleanup context that owns the coordinators, the REST
consumer instances and their maintenance task.

Once the broker's logs are open, the task loads the coordinator shards (one per ``__consumer_offsets``
partition this broker leads, see :mod:`tierlog.service.groups.leadership`), then ticks: shards
follow leadership, session and instance expiry, rebalance timeouts, offset expiry, compaction, and new
topics or partitions for subscribed groups. Group requests answer 503 (retriable) until the first load is
done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass

from aiohttp import web

from tierlog.service.cluster.proxy import LocalPartition, RoutedPartition, routed_partition
from tierlog.service.groups import admin, native, rest
from tierlog.service.groups.access import GROUP_ACCESS, GroupAccess
from tierlog.service.groups.consumers import ConsumerManager, ReadLike
from tierlog.service.groups.leadership import ShardLoader
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.groups.offsets_log import restore_offsets
from tierlog.service.groups.routing import setup_forwarding
from tierlog.service.groups.shards import CoordinatorShards
from tierlog.service.groups.state import CONSUMERS, COORDINATOR, GROUPS_READY, LOADER
from tierlog.service.settings.config import Settings
from tierlog.service.web.keys import BROKER

__all__ = ["BrokerReader", "GroupSettings", "setup_groups", "restore_offsets"]

log = logging.getLogger("tierlog.groups")


@dataclass(frozen=True)
class GroupSettings:
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    consumer_instance_timeout_ms: int = 300_000
    auto_commit_interval_ms: int = 5_000
    tick_interval_ms: int = 1_000
    default_strategy: str = "range"
    offsets_compact_bytes: int = 16 * 2**20
    offsets_topic_num_partitions: int = 1
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000

    @classmethod
    def from_settings(cls, settings: Settings) -> GroupSettings:
        return cls(
            offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
            consumer_instance_timeout_ms=settings.consumer_instance_timeout_ms,
            default_strategy=settings.group_default_assignor,
            offsets_topic_num_partitions=settings.offsets_topic_num_partitions,
            consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
        )


class BrokerReader:
    """The consumer layer's view of the cluster: partition counts, watermarks and long-poll reads, on this
    broker for the partitions it leads and on their leaders (over the native API) for the others."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    def partition_counts(self) -> Mapping[str, int]:
        broker = self._app[BROKER]
        return {
            name: len(parts)
            for name, parts in broker.cluster_view().partitions.items()
            if not name.startswith("__")
        }

    def _partition(self, topic: str, partition: int) -> RoutedPartition:
        return routed_partition(self._app, topic, partition)

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int] | Awaitable[tuple[int, int]]:
        routed = self._partition(topic, partition)
        if isinstance(routed, LocalPartition):
            return routed.partition.log_start_offset, routed.partition.high_watermark
        return self._remote_bounds(routed)

    @staticmethod
    async def _remote_bounds(routed: RoutedPartition) -> tuple[int, int]:
        offsets = await routed.offsets()
        return offsets.log_start_offset, offsets.high_watermark

    async def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> ReadLike:
        routed = self._partition(topic, partition)
        return await routed.read(offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        found = await self._partition(topic, partition).offset_for_timestamp(timestamp)
        return None if found is None else found[0]


def setup_groups(app: web.Application, settings: GroupSettings | None = None) -> None:
    """Register the group routes and the cleanup context that owns the group machinery."""
    config = settings or GroupSettings()
    rest.setup_routes(app)
    native.setup_routes(app)
    admin.setup_routes(app)
    setup_forwarding(app)

    async def groups_ctx(app: web.Application) -> AsyncIterator[None]:
        broker = app[BROKER]
        clock = broker.clock
        reader = BrokerReader(app)
        shards = CoordinatorShards(
            clock=clock,
            metadata=reader.partition_counts,
            default_strategy=config.default_strategy,
            offsets_retention_ms=config.offsets_retention_ms,
            compact_after_bytes=config.offsets_compact_bytes,
            consumer_session_timeout_ms=config.consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
        )
        consumers = ConsumerManager(
            reader,
            shards,
            clock,
            instance_timeout_ms=config.consumer_instance_timeout_ms,
            auto_commit_interval_ms=config.auto_commit_interval_ms,
        )
        loader = ShardLoader(broker, shards, consumers, num_partitions=config.offsets_topic_num_partitions)
        ready = asyncio.Event()
        app[COORDINATOR] = shards
        app[CONSUMERS] = consumers
        app[GROUPS_READY] = ready
        app[LOADER] = loader
        app[GROUP_ACCESS] = GroupAccess(shards, ready, loader)

        async def run() -> None:
            await broker.wait_ready()
            await loader.sync()
            loaded = shards.loaded()
            log.info(
                "consumer groups ready: coordinator of %d of %d %s partitions, %d groups",
                len(loaded),
                shards.partitions,
                OFFSETS_TOPIC,
                len(shards.group_ids()),
            )
            ready.set()
            while True:
                await asyncio.sleep(config.tick_interval_ms / 1000)
                try:
                    await loader.sync()
                    await shards.tick()
                    shards.metadata_changed()
                    await consumers.tick()
                    for index in await shards.maybe_compact():
                        log.info("compacted %s-%d", OFFSETS_TOPIC, index)
                except Exception:
                    log.exception("group maintenance failed; retrying at the next tick")

        async def follow() -> None:
            await broker.wait_ready()
            await loader.follow()

        tasks = [
            asyncio.create_task(run(), name="tierlog-groups"),
            asyncio.create_task(follow(), name="tierlog-groups-leadership"),
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            await consumers.close()
            shards.close()

    app.cleanup_ctx.append(groups_ctx)
