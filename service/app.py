"""The application factory: wires settings, metrics, the broker, routes and background tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from tierlog.service import admin_v3, openapi, rest_v2
from tierlog.service.cluster.metadata_store import MetadataStoreError
from tierlog.service.cluster.peers import setup_peers
from tierlog.service.groups.setup import GroupSettings, setup_groups
from tierlog.service.kafka.setup import setup_kafka_listener
from tierlog.service.metrics import Metrics, metrics_middleware
from tierlog.service.native_api import routes as native
from tierlog.service.replication import routes as replication_routes
from tierlog.service.security import admin_routes as security_routes
from tierlog.service.security.authn import AUTHENTICATOR, Authenticator, authn_middleware
from tierlog.service.security.authz import authz_middleware, setup_authorizer
from tierlog.service.security.bearer import BearerVerifier
from tierlog.service.security.security_store import SECURITY_STORE, SecurityStore
from tierlog.service.settings.config import Settings
from tierlog.service.topics.broker import Broker
from tierlog.service.topics.tasks import setup_maintenance
from tierlog.service.web import health
from tierlog.service.web.connections import ConnectionGuard
from tierlog.service.web.cors import cors_middleware, setup_cors
from tierlog.service.web.errors import error_middleware
from tierlog.service.web.keys import BROKER, METRICS, SETTINGS
from tierlog.service.web.routing import body_limit_middleware, trailing_slash_middleware

if TYPE_CHECKING:
    from tierlog.service.cluster.metadata_store import MetadataStore
    from tierlog.tiering.log import Clock
    from tierlog.tiering.remote.object_store import ObjectStore

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
    auth_clock: Callable[[], float] | None = None,
) -> web.Application:
    """Build the broker application. Opening the logs starts with the app and runs in the background
    (``/ready`` answers 503 until it is done); shutdown closes them and writes the clean-shutdown marker.

    ``clock`` drives segment rolling and retention (tests pass a ManualClock); ``startup_gate`` delays
    opening the logs until it is set (tests observe ``/ready`` before the logs are open); ``remote_store``
    replaces the store ``remote.uri`` names (tests wrap a real store in fault injection).

    The broker is a cluster member (``docs/design/0008-cluster-metadata.md``) on ``metadata_store`` (tests
    share one ``LocalMetadataStore`` among several apps, which then stays open when an app stops), else on
    the store ``metadata.uri`` names, else on the local store ``<data-dir>/cluster-metadata.json`` (a
    cluster of one); the app owns the last two.

    Security (``docs/design/0012-security.md``): the security store (users, ACLs) lives in the metadata
    store. ``auth_clock``
    (milliseconds; tests) drives the failed-authentication window.
    """
    metrics = Metrics()
    guard = ConnectionGuard(
        idle_ms=settings.connections_max_idle_ms,
        read_ms=settings.request_read_timeout_ms,
        max_connections=settings.max_connections,
        metrics=metrics,
    )
    security = settings.security
    authz = authz_middleware(security)
    app = web.Application(
        client_max_size=settings.max_request_size,
        middlewares=[
            guard.middleware(),
            metrics_middleware(metrics),
            *([cors_middleware(settings)] if settings.http_cors_allowed_origins else []),
            error_middleware,
            authn_middleware(security),
            *([] if authz is None else [authz]),
            body_limit_middleware,
            trailing_slash_middleware,
        ],
    )
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[CONNECTIONS] = guard
    setup_cors(app)
    peers = setup_peers(app, lambda: app[BROKER].broker_id)  # opened before the broker, closed after it
    broker = app[BROKER] = Broker(
        settings,
        metrics,
        peers=peers,
        clock=clock,
        remote_store=remote_store,
        metadata_store=metadata_store,
    )
    guard.kafka_endpoint = lambda: broker.kafka_endpoint  # named when a Kafka client reaches an HTTP port
    store = app[SECURITY_STORE] = SecurityStore(broker.cluster.store, owns_store=False)
    app[AUTHENTICATOR] = Authenticator(
        security, store, metrics, clock=auth_clock, bearer=_bearer_verifier(settings)
    )
    setup_authorizer(app, security, store)
    health.setup_routes(app)
    admin_v3.setup_routes(app)
    rest_v2.setup_routes(app)
    native.setup_routes(app)
    replication_routes.setup_routes(app)
    security_routes.setup_routes(app)
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
    setup_kafka_listener(app)  # bound before the broker opens: a cluster member registers its endpoint
    app.cleanup_ctx.append(broker_ctx)
    app.cleanup_ctx.append(_security_ctx)
    setup_maintenance(app)
    setup_groups(app, GroupSettings.from_settings(settings))
    return app


def _bearer_verifier(settings: Settings) -> BearerVerifier | None:
    security = settings.security
    if "bearer" not in security.authentication_methods or security.bearer_jwks is None:
        return None
    return BearerVerifier(
        security.bearer_jwks,
        audience=security.bearer_audience,
        issuer=security.bearer_issuer,
        principal_claim=security.bearer_principal_claim,
        refresh_ms=security.bearer_jwks_refresh_ms,
    )


async def _start_security(app: web.Application) -> None:
    """Load the security store once the cluster node has started the metadata store (retried while it
    cannot be read). Authenticated routes answer 503 until then."""
    store = app[SECURITY_STORE]
    await app[BROKER].cluster.store_started.wait()
    delay = 0.1
    while True:
        try:
            await store.start()
            return
        except MetadataStoreError as err:
            log.warning("loading the security store failed, retrying in %.1f s: %s", delay, err)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


async def _security_ctx(app: web.Application) -> AsyncIterator[None]:
    """Own the security store and the authenticator (its bearer verifier). Closed before the broker, so
    a cluster's metadata store is still open while the security store's watch stops."""
    authenticator = app[AUTHENTICATOR]
    await authenticator.start()
    task = asyncio.create_task(_start_security(app), name="tierlog-security-start")
    task.add_done_callback(_report_security_failure)
    try:
        yield
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
        try:
            await app[SECURITY_STORE].close()
        except MetadataStoreError as err:
            log.warning("closing the security store failed: %s", err)
        await authenticator.close()


def _report_security_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("loading the security store failed: %s", task.exception())


def _report_open_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("opening the logs failed: %s", task.exception())
