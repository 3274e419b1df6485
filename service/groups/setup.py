"""Wiring of consumer groups into the broker application.

:func:`setup_groups` registers the REST v2 consumer API and the native group API, and a cleanup context
that owns the coordinator, the REST consumer instances and their maintenance task. Once the broker's logs
are open, the task opens (or creates) the internal ``__consumer_offsets`` topic, replays it to restore
every committed offset, then ticks the coordinator: session and instance expiry, rebalance timeouts,
offset expiry, and new topics or partitions for subscribed groups. Group requests answer 503 (retriable)
until the committed offsets are restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

from aiohttp import web

from tierlog.service.broker import Broker
from tierlog.service.config import Settings
from tierlog.service.groups import admin, native, rest
from tierlog.service.groups.consumers import ConsumerManager, ReadLike
from tierlog.service.groups.coordinator import GroupCoordinator
from tierlog.service.groups.offsets import OFFSETS_TOPIC, LogOffsetStore
from tierlog.service.groups.state import CONSUMERS, COORDINATOR, GROUPS_READY
from tierlog.service.partition import Partition
from tierlog.service.state import BROKER
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.errors import NotFoundError, UnavailableError

__all__ = ["BrokerReader", "GroupSettings", "setup_groups", "restore_offsets"]

log = logging.getLogger("tierlog.groups")

OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "retention.ms": "-1", "segment.bytes": str(100 * 2**20)}
REPLAY_CHUNK = 4 * 2**20


@dataclass(frozen=True)
class GroupSettings:
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    consumer_instance_timeout_ms: int = 300_000
    auto_commit_interval_ms: int = 5_000
    tick_interval_ms: int = 1_000
    default_strategy: str = "range"
    offsets_compact_bytes: int = 16 * 2**20

    @classmethod
    def from_settings(cls, settings: Settings) -> GroupSettings:
        return cls(
            offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
            consumer_instance_timeout_ms=settings.consumer_instance_timeout_ms,
            default_strategy=settings.group_default_assignor,
        )


class BrokerReader:
    """The consumer layer's view of the broker: partition counts, watermarks and long-poll reads."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def partition_counts(self) -> Mapping[str, int]:
        return {t.name: len(t.partitions) for t in self._broker.topics() if not t.is_internal}

    def log_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        part = self._broker.topic(topic).partition(partition)
        return part.log_start_offset, part.high_watermark

    async def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> ReadLike:
        part = self._broker.topic(topic).partition(partition)
        return await part.read(offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        found = await self._broker.topic(topic).partition(partition).offset_for_timestamp(timestamp)
        return None if found is None else found[0]


class PartitionOffsetLog:
    """``__consumer_offsets`` partition 0, as the committed-offset store writes and compacts it."""

    partition: Partition | None = None

    def _open(self) -> Partition:
        if self.partition is None:
            raise UnavailableError("consumer groups are not ready: committed offsets are being restored")
        return self.partition

    async def append(self, batch: bytes) -> int:
        return (await self._open().append(batch, acks=1)).base_offset

    async def roll(self) -> None:
        await asyncio.to_thread(self._open().log.roll)

    async def drop_before(self, offset: int) -> None:
        await asyncio.to_thread(
            self._open().log.apply_retention,
            lambda segment: segment.next_offset > offset,
            retention_ms=-1,
            retention_bytes=0,
        )

    async def end_offset(self) -> int:
        return self._open().log_end_offset


async def _offsets_partition(broker: Broker) -> Partition:
    try:
        topic = broker.topic(OFFSETS_TOPIC)
    except NotFoundError:
        topic = None
    if topic is None:
        created = await broker.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIGS, internal=True)
        assert created is not None
        topic = created
    return topic.partition(0)


async def restore_offsets(partition: Partition, store: LogOffsetStore) -> int:
    """Replay ``__consumer_offsets`` into ``store``; returns the number of commit records applied.

    Raises:
        CorruptRecordError: a stored batch or commit record is corrupt.
    """
    chunks: list[bytes] = []
    offset = partition.log_start_offset
    while offset < partition.high_watermark:
        result = await partition.read(offset, REPLAY_CHUNK)
        if not result.data:
            break
        chunks.append(result.data)
        for _, header in iter_batches(result.data, verify=False):
            offset = header.next_offset

    def batches() -> Iterator[bytes]:
        yield from chunks

    return store.replay(batches())


def setup_groups(app: web.Application, settings: GroupSettings | None = None) -> None:
    """Register the group routes and the cleanup context that owns the group machinery."""
    config = settings or GroupSettings()
    rest.setup_routes(app)
    native.setup_routes(app)
    admin.setup_routes(app)

    async def groups_ctx(app: web.Application) -> AsyncIterator[None]:
        broker = app[BROKER]
        clock = broker.clock

        offsets_log = PartitionOffsetLog()
        store = LogOffsetStore(offsets_log, clock.now_ms, compact_after_bytes=config.offsets_compact_bytes)
        reader = BrokerReader(broker)
        coordinator = GroupCoordinator(
            clock=clock,
            metadata=reader.partition_counts,
            offsets=store,
            default_strategy=config.default_strategy,
            offsets_retention_ms=config.offsets_retention_ms,
        )
        consumers = ConsumerManager(
            reader,
            coordinator,
            clock,
            instance_timeout_ms=config.consumer_instance_timeout_ms,
            auto_commit_interval_ms=config.auto_commit_interval_ms,
        )
        ready = asyncio.Event()
        app[COORDINATOR] = coordinator
        app[CONSUMERS] = consumers
        app[GROUPS_READY] = ready

        async def run() -> None:
            await broker.wait_ready()
            offsets_log.partition = await _offsets_partition(broker)
            applied = await restore_offsets(offsets_log.partition, store)
            log.info(
                "consumer groups ready: %d commit records replayed, %d groups",
                applied,
                len(store.group_ids()),
            )
            ready.set()
            while True:
                await asyncio.sleep(config.tick_interval_ms / 1000)
                try:
                    await coordinator.tick()
                    coordinator.metadata_changed()
                    await consumers.tick()
                    if await store.maybe_compact():
                        log.info("compacted %s", OFFSETS_TOPIC)
                except Exception:
                    log.exception("group maintenance failed; retrying at the next tick")

        task = asyncio.create_task(run(), name="tierlog-groups")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await consumers.close()
            coordinator.close()

    app.cleanup_ctx.append(groups_ctx)
