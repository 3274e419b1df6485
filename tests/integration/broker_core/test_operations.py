"""Health, readiness, metrics, the error middleware and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from tierlog.service.openapi import build_document, render
from tierlog.service.web.errors import error_middleware
from tierlog.service.web.keys import SETTINGS
from tierlog.wire.errors import ConsumerInstanceNotFoundError, NotFoundError, OffsetOutOfRangeError

from .conftest import Node, StartNode, batch

REPO = Path(__file__).resolve().parents[3]


async def test_health_and_ready_after_open(node: Node) -> None:
    resp = await node.client.get("/health")
    assert resp.status == 200 and (await resp.json())["status"] == "UP"
    resp = await node.client.get("/ready")
    assert resp.status == 200
    assert (await resp.json())["cluster_id"] == node.broker.cluster_id


async def test_ready_is_503_until_logs_are_open(start_node: StartNode) -> None:
    gate = asyncio.Event()
    node = await start_node(wait=False, gate=gate)
    assert (await node.client.get("/health")).status == 200
    resp = await node.client.get("/ready")
    assert resp.status == 503
    resp = await node.client.get("/v3/clusters")
    assert resp.status == 503 and (await resp.json())["error_code"] == 50301
    gate.set()
    await node.broker.wait_ready()
    assert (await node.client.get("/ready")).status == 200


async def test_metrics_exposition(node: Node) -> None:
    await node.create("measured", 2)
    await node.broker.topic("measured").partition(1).append(batch(b"abc", b"def"))
    await node.broker.topic("measured").partition(1).read(0, 1 << 20)
    await node.client.get(f"{node.v3}/topics/measured")
    await node.client.get(f"{node.v3}/topics/missing")
    await node.client.get("/no/such/route")
    resp = await node.client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = await resp.text()
    route = "/v3/clusters/{cluster_id}/topics/{topic_name}"
    assert f'tierlog_http_requests_total{{method="GET",route="{route}",status="200"}} 1' in text
    assert f'tierlog_http_requests_total{{method="GET",route="{route}",status="404"}} 1' in text
    assert (
        f'tierlog_http_request_duration_seconds_count{{method="GET",route="{route}",status="200"}} 1' in text
    )
    assert 'tierlog_http_requests_total{method="GET",route="unmatched",status="404"} 1' in text
    assert "# TYPE tierlog_http_request_duration_seconds histogram" in text
    assert 'tierlog_log_end_offset{partition="1",topic="measured"} 2' in text
    assert 'tierlog_log_start_offset{partition="1",topic="measured"} 0' in text
    assert 'tierlog_log_size_bytes{partition="0",topic="measured"} 0' in text
    size = len(batch(b"abc", b"def"))
    assert f'tierlog_bytes_in_total{{topic="measured"}} {size}' in text
    assert f'tierlog_bytes_out_total{{topic="measured"}} {size}' in text
    await node.client.delete(f"{node.v3}/topics/measured")
    assert (
        'tierlog_log_end_offset{partition="1",topic="measured"}'
        not in await (await node.client.get("/metrics")).text()
    )


async def test_error_middleware_shapes(aiohttp_client: Any) -> None:
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("kaboom")

    async def gone(request: web.Request) -> web.Response:
        raise ConsumerInstanceNotFoundError("no such thing")

    async def plain(request: web.Request) -> web.Response:
        raise NotFoundError("Cluster x cannot be found.")

    async def late(request: web.Request) -> web.Response:
        raise OffsetOutOfRangeError("offset 9 is past the end", log_start_offset=2, log_end_offset=5)

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/boom", boom)
    app.router.add_get("/gone", gone)
    app.router.add_get("/plain", plain)
    app.router.add_get("/late", late)
    client = await aiohttp_client(app)
    resp = await client.get("/boom")
    assert resp.status == 500
    assert await resp.json() == {"error_code": 50001, "message": "internal server error"}
    resp = await client.get("/gone")
    assert resp.status == 404
    assert await resp.json() == {"error_code": 40403, "message": "no such thing"}
    resp = await client.get("/plain")
    assert resp.status == 404
    assert await resp.json() == {"error_code": 404, "message": "Cluster x cannot be found."}
    resp = await client.get("/late")
    assert resp.status == 416
    assert await resp.json() == {
        "error_code": 41601,
        "message": "offset 9 is past the end",
        "log_start_offset": 2,
        "log_end_offset": 5,
    }


async def test_body_over_limit_is_413_json(start_node: StartNode) -> None:
    node = await start_node(max_request_size="2048")
    resp = await node.client.post(
        f"{node.v3}/topics", data=b"{" + b" " * 4096 + b"}", headers={"Content-Type": "application/json"}
    )
    assert resp.status == 413
    assert (await resp.json())["error_code"] == 41301


def test_openapi_covers_every_route(node: Node) -> None:
    paths = build_document()["paths"]
    missing = []
    for route in node.app.router.routes():
        resource = route.resource
        if resource is None or route.method == "HEAD":
            continue
        operations = paths.get(resource.canonical, {})
        if route.method.lower() not in operations:
            missing.append(f"{route.method} {resource.canonical}")
    assert missing == []


def test_openapi_declares_path_parameters() -> None:
    document = build_document()
    for path, operations in document["paths"].items():
        names = set(re.findall(r"{([^}:]+)", path))
        shared = {p["name"] for p in operations.get("parameters", []) if p.get("in") == "path"}
        for method, operation in operations.items():
            if method == "parameters":
                continue
            declared = shared | {p["name"] for p in operation.get("parameters", []) if p.get("in") == "path"}
            assert names <= declared, (method, path)
            assert operation["responses"], (method, path)
    assert build_document() == document


async def test_served_document_matches_docs(node: Node) -> None:
    resp = await node.client.get("/openapi.json")
    assert resp.status == 200
    served = await resp.json()
    assert served["openapi"].startswith("3.")
    assert served == json.loads(render(node.app[SETTINGS].advertised_url))
    assert served["servers"][0]["url"] == node.app[SETTINGS].advertised_url.rstrip("/")
    assert (REPO / "docs" / "openapi.json").read_text(encoding="utf-8") == render(), (
        "docs/openapi.json is stale: run python -m tierlog.service.openapi > docs/openapi.json"
    )
