"""Liveness, readiness and metrics routes. ``/health`` and ``/ready`` need no credentials, so they show no
secret: failure reasons lose the ``user:password@`` of any URL in them."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from tierlog.service.metrics import CONTENT_TYPE
from tierlog.service.security import authz
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType
from tierlog.service.security.redact import redact_userinfo
from tierlog.service.web.keys import BROKER, METRICS, SETTINGS

__all__ = ["OPENAPI_PATHS", "metrics_handler", "setup_routes"]


async def metrics_handler(request: web.Request) -> web.Response:
    """``GET /metrics``: the registry in Prometheus text format. Renders in a worker thread.

    With authentication on and ``metrics.public`` false it needs Describe on the Cluster.

    Raises:
        AuthorizationError: (40301) the principal may not Describe the Cluster.
    """
    if not request.app[SETTINGS].security.metrics_public:
        authz.authorize(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    text = await asyncio.to_thread(request.app[METRICS].render)
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


async def health(request: web.Request) -> web.Response:
    """``GET /health``: 200 while the process serves HTTP. The body also has ``cluster``: this broker's
    id, whether it is registered, the controller it knows, the metadata revision its cache has applied and
    how long the store has not confirmed its session (``session_unconfirmed_ms``)."""
    body: dict[str, Any] = {"status": "UP"}
    node = request.app[BROKER].cluster
    body["cluster"] = {
        "cluster_id": node.cache.cluster_id,
        "broker_id": node.broker_id,
        "registered": node.registered,
        "controller_id": node.cache.view().controller_id,
        "controller_epoch": node.cache.view().controller_epoch,
        "is_controller": node.controller.active,
        "metadata_revision": node.cache.revision,
        # how long the metadata store has not confirmed this broker's session (etcd unreachable)
        "session_unconfirmed_ms": int(node.membership.unconfirmed_s * 1000),
    }
    return web.json_response(body)


async def ready(request: web.Request) -> web.Response:
    """``GET /ready``: 200 once every partition log is open, 503 before that, while shutting down and while
    a partition is offline after an I/O failure (``offline_partitions`` says which and why), and
    (``NOT_REGISTERED``) while the broker's session in the cluster is lost. An object store that cannot be
    used leaves readiness at 200 (local data is served) and is named in ``remote_store``.

    The route needs no credentials, so with authentication on it names no topic and no reason: only how
    many partitions are offline or cannot upload (the broker's log and metrics say which)."""
    broker = request.app[BROKER]
    node = broker.cluster
    if broker.ready and not node.registered:
        body = {"status": "NOT_REGISTERED", "error_code": 50301, "cluster_id": broker.cluster_id}
        return web.json_response(body, status=503)
    if broker.ready:
        offline = broker.offline_partitions()
        secured = request.app[SETTINGS].security.enabled
        if offline and secured:
            body = {"status": "DEGRADED", "error_code": 50301, "offline_partitions_count": len(offline)}
            return web.json_response(body, status=503)
        if offline:
            body = {
                "status": "DEGRADED",
                "error_code": 50301,
                "cluster_id": broker.cluster_id,
                "offline_partitions": [
                    {"topic": topic, "partition": index, "reason": redact_userinfo(reason)}
                    for topic, index, reason in offline
                ],
            }
            return web.json_response(body, status=503)
        body = {"status": "READY", "cluster_id": broker.cluster_id}
        store_problem = broker.remote.health.problem
        if store_problem is not None and secured:
            body["remote_store_usable"] = False
        elif store_problem is not None:  # readiness holds: local data is served without the store
            body["remote_store"] = {
                "store": broker.remote.health.where,
                "usable": False,
                "problem": redact_userinfo(store_problem),
            }
        remote_problems = broker.remote.problems()
        if remote_problems and secured:
            body["remote_tier_problems_count"] = len(remote_problems)
        elif remote_problems:  # still serving: readiness holds, but say loudly why uploads stopped
            body["remote_tier_problems"] = [
                {"topic": topic, "partition": index, "reason": redact_userinfo(reason)}
                for topic, index, reason in remote_problems
            ]
        return web.json_response(body)
    return web.json_response({"status": "STARTING", "error_code": 50301}, status=503)


def setup_routes(app: web.Application) -> None:
    """Register ``/health``, ``/ready`` and ``/metrics``."""
    app.router.add_get("/health", health, name="health", allow_head=False)
    app.router.add_get("/ready", ready, name="ready", allow_head=False)
    app.router.add_get("/metrics", metrics_handler, name="metrics", allow_head=False)


_STATUS = {
    "type": "object",
    "properties": {"status": {"type": "string"}, "cluster_id": {"type": "string"}},
}

OPENAPI_PATHS: dict[str, Any] = {
    "/health": {
        "get": {
            "tags": ["Operations"],
            "summary": "Liveness: the process answers HTTP",
            "description": "200 while the process serves HTTP, before its logs are open too; no "
            "credentials needed. For a liveness probe.",
            "operationId": "getHealth",
            "responses": {
                "200": {"description": "Alive", "content": {"application/json": {"schema": _STATUS}}}
            },
        }
    },
    "/ready": {
        "get": {
            "tags": ["Operations"],
            "summary": "Readiness: every partition log is open",
            "description": "200 once every partition log is open (a store that cannot be used is named, "
            "but does not make the broker unready); 503 before that and while shutting down. No "
            "credentials needed. For a readiness probe.",
            "operationId": "getReady",
            "responses": {
                "200": {
                    "description": "Ready (an object store that cannot be used is named in remote_store)",
                    "content": {"application/json": {"schema": _STATUS}},
                },
                "503": {"description": "Still opening logs, shutting down, or a partition is offline"},
            },
        }
    },
    "/metrics": {
        "get": {
            "tags": ["Operations"],
            "summary": "Prometheus metrics (text format 0.0.4)",
            "description": "Every metric of the broker in Prometheus' text format (docs/admin-api.md lists "
            "them). With authentication on, needs Describe on the Cluster unless `metrics.public` is set.",
            "operationId": "getMetrics",
            "responses": {
                "200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}
            },
        }
    },
}
