"""Background work owned by the application: tracked one-off tasks and the periodic log maintenance.

Every task started here has an owner that cancels (or drains) and awaits it: one-off tasks belong to a
:class:`TaskSet` drained by the broker on close; the periodic loops belong to :func:`maintenance_ctx`,
an aiohttp ``cleanup_ctx`` entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tierlog.service.web.keys import BROKER, SETTINGS
from tierlog.wire.errors import UnavailableError

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker

__all__ = ["MAINTENANCE", "Maintenance", "TaskSet", "maintenance_ctx", "setup_maintenance"]

log = logging.getLogger("tierlog.tasks")


class TaskSet:
    """Tracks fire-and-forget tasks so that shutdown can wait for them. Event-loop only."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Start ``coro`` as a tracked task. Exceptions must be handled inside ``coro``."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait for every tracked task, including ones spawned while waiting. Never raises their errors."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel every tracked task and wait for them to finish. Idempotent."""
        for task in list(self._tasks):
            task.cancel()
        await self.drain()


class Maintenance:
    """Periodic passes over every partition: roll and flush by time, retention, the high watermark
    checkpoint (``replica.high.watermark.checkpoint.interval.ms``; closing a log writes it too) and the
    expiry of idle producer ids (``producer.id.expiration.check.interval.ms``, design 0011).

    Each pass runs the blocking engine calls in worker threads, one partition at a time. A failure on one
    partition is logged and counted and does not stop the pass. ``passes`` counts completed passes per
    kind; :meth:`wait_for_pass` lets a test wait for the next one without sleeping.
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.passes: dict[str, int] = {"flush": 0, "retention": 0, "checkpoint": 0, "producer_expiry": 0}
        self._changed = asyncio.Condition()

    async def flush_pass(self) -> None:
        """``maybe_roll`` then ``maybe_flush`` on every open partition. Safe concurrently; never raises."""
        for partition in self._broker.all_partitions():
            await self._guard("flush", partition.label, partition.maybe_roll_and_flush)
        await self._count("flush")

    async def retention_pass(self) -> int:
        """``apply_retention`` on every open partition; returns the segments deleted. Never raises."""
        deleted = 0
        for partition in self._broker.all_partitions():
            result = await self._guard("retention", partition.label, partition.apply_retention)
            deleted += result or 0
        await self._count("retention")
        return deleted

    async def checkpoint_pass(self) -> None:
        """Write every open partition's high watermark to its ``replication-offset-checkpoint`` (in worker
        threads). Safe concurrently; never raises."""
        for partition in self._broker.all_partitions():
            await self._guard("checkpoint", partition.label, partition.checkpoint_high_watermark)
        await self._count("checkpoint")

    async def producer_expiry_pass(self) -> int:
        """Drop the producer ids idle ``producer.id.expiration.ms`` or more (by their last batch's
        timestamp, against the broker's clock) on every open partition, in worker threads; returns how
        many. Safe concurrently; never raises."""
        broker = self._broker
        removed = 0
        for partition in broker.all_partitions():
            expire = functools.partial(
                partition.remove_expired_producers,
                broker.clock.now_ms(),
                broker.settings.producer_id_expiration_ms,
            )
            removed += await self._guard("producer_expiry", partition.label, expire) or 0
        await self._count("producer_expiry")
        return removed

    async def wait_for_pass(self, kind: str, count: int) -> None:
        """Return once at least ``count`` passes of ``kind`` have completed. Safe concurrently."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.passes[kind] >= count)

    async def run(self, kind: str, interval_s: float) -> None:
        """Run passes of ``kind`` every ``interval_s`` seconds until cancelled; nothing if opening failed."""
        try:
            await self._broker.wait_ready()
        except UnavailableError:
            return
        steps: dict[str, Callable[[], Awaitable[object]]] = {
            "flush": self.flush_pass,
            "retention": self.retention_pass,
            "checkpoint": self.checkpoint_pass,
            "producer_expiry": self.producer_expiry_pass,
        }
        step = steps[kind]
        while True:
            await asyncio.sleep(interval_s)
            await step()

    async def run_uploads(self, interval_s: float) -> None:
        """Run the remote tier's uploader until cancelled (see :meth:`RemoteTier.run`); nothing if opening
        failed."""
        try:
            await self._broker.wait_ready()
        except UnavailableError:
            return
        await self._broker.remote.run(interval_s)

    async def _guard(self, kind: str, label: str, call: Callable[[], Awaitable[int | None]]) -> int | None:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s pass failed on %s", kind, label)
            self._broker.metrics.inc("tierlog_maintenance_errors_total", kind=kind)
            return None

    async def _count(self, kind: str) -> None:
        async with self._changed:
            self.passes[kind] += 1
            self._changed.notify_all()


MAINTENANCE: web.AppKey[Maintenance] = web.AppKey("tierlog.maintenance", Maintenance)


async def maintenance_ctx(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx entry: start the flush, retention, high watermark checkpoint, producer id expiry and
    upload loops; cancel and await them on shutdown."""
    settings = app[SETTINGS]
    maintenance = app[MAINTENANCE]
    loops = [
        asyncio.create_task(
            maintenance.run("flush", settings.log_flush_scheduler_interval_ms / 1000), name="tierlog-flush"
        ),
        asyncio.create_task(
            maintenance.run("retention", settings.log_retention_check_interval_ms / 1000),
            name="tierlog-retention",
        ),
        asyncio.create_task(
            maintenance.run("checkpoint", settings.replica_high_watermark_checkpoint_interval_ms / 1000),
            name="tierlog-hw-checkpoint",
        ),
        asyncio.create_task(
            maintenance.run("producer_expiry", settings.producer_id_expiration_check_interval_ms / 1000),
            name="tierlog-producer-expiry",
        ),
        asyncio.create_task(
            maintenance.run_uploads(settings.remote_upload_interval_ms / 1000), name="tierlog-upload"
        ),
    ]
    try:
        yield
    finally:
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def setup_maintenance(app: web.Application) -> None:
    """Register the maintenance passes and their loops on ``app``. Call once, after the broker is set."""
    app[MAINTENANCE] = Maintenance(app[BROKER])
    app.cleanup_ctx.append(maintenance_ctx)
