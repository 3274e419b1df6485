"""The application factory: wires settings, metrics, the broker, routes and background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from aiohttp import web

from tierlog.service import admin_v3, health, native, openapi, rest_v2
from tierlog.service.broker import Broker
from tierlog.service.config import Settings
from tierlog.service.connections import ConnectionGuard
from tierlog.service.errors import error_middleware
from tierlog.service.groups.setup import GroupSettings, setup_groups
from tierlog.service.metrics import Metrics, metrics_middleware
from tierlog.service.replication import routes as replication_routes
from tierlog.service.routing import body_limit_middleware, trailing_slash_middleware
from tierlog.service.state import BROKER, METRICS, SETTINGS
from tierlog.service.tasks import setup_maintenance

if TYPE_CHECKING:
    from tierlog.service.cluster.store import MetadataStore
    from tierlog.tiering.log import Clock
    from tierlog.tiering.remote.store import ObjectStore

__all__ = ["CONNECTIONS", "OPEN_TASK", "create_app"]

log = logging.getLogger("tierlog.app")

OPEN_TASK: web.AppKey[asyncio.Task[None]] = web.AppKey("tierlog.open_task", asyncio.Task)
CONNECTIONS: web.AppKey[ConnectionGuard] = web.AppKey("tierlog.connections", ConnectionGuard)


def create_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    startup_gate: asyncio.Event | None = None,
    remote_store: ObjectStore | None = None,
    metadata_store: MetadataStore | None = None,
) -> web.Application:
    """Build the broker application. Opening the logs starts with the app and runs in the background
    (``/ready`` answers 503 until it is done); shutdown closes them and writes the clean-shutdown marker.

    ``clock`` drives segment rolling and retention (tests pass a ManualClock); ``startup_gate`` delays
    opening the logs until it is set (tests observe ``/ready`` before the logs are open); ``remote_store``
    replaces the store ``remote.uri`` names (tests wrap a real store in fault injection).

    Cluster mode: ``metadata_store`` (tests share one ``LocalMetadataStore`` among several apps, which
    then stays open when an app stops) or ``metadata.uri`` (an etcd store the app owns) makes the broker a
    cluster member (``docs/design/0008-cluster-metadata.md``); with neither it runs alone, as always.
    """
    metrics = Metrics()
    guard = ConnectionGuard(
        idle_ms=settings.connections_max_idle_ms,
        read_ms=settings.request_read_timeout_ms,
        max_connections=settings.max_connections,
        metrics=metrics,
    )
    app = web.Application(
        client_max_size=settings.max_request_size,
        middlewares=[
            guard.middleware(),
            metrics_middleware(metrics),
            error_middleware,
            body_limit_middleware,
            trailing_slash_middleware,
        ],
    )
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[CONNECTIONS] = guard
    app[BROKER] = Broker(
        settings, metrics, clock=clock, remote_store=remote_store, metadata_store=metadata_store
    )
    health.setup_routes(app)
    admin_v3.setup_routes(app)
    rest_v2.setup_routes(app)
    native.setup_routes(app)
    replication_routes.setup_routes(app)
    openapi.setup_routes(app)

    async def broker_ctx(app: web.Application) -> AsyncIterator[None]:
        broker = app[BROKER]
        task = asyncio.create_task(broker.open(startup_gate), name="tierlog-open")
        task.add_done_callback(_report_open_failure)
        app[OPEN_TASK] = task
        try:
            yield
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(BaseException):
                await task
            await broker.close()

    async def interrupt_polls(app: web.Application) -> None:
        app[BROKER].interrupt_polls()

    app.on_shutdown.append(interrupt_polls)
    app.cleanup_ctx.append(broker_ctx)
    setup_maintenance(app)
    setup_groups(app, GroupSettings.from_settings(settings))
    return app


def _report_open_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("opening the logs failed: %s", task.exception())
