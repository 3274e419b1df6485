"""The OpenAPI 3 document for every route, merged from each route module's ``OPENAPI_PATHS`` (and the
v3 admin API's ``OPENAPI_COMPONENTS``).

``python -m tierlog.service.openapi > docs/openapi.json`` regenerates the checked-in copy.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import re
import sys
from typing import Any

from aiohttp import web

from tierlog.service import admin_v3, rest_v2
from tierlog.service.admin_v3 import openapi as admin_v3_openapi
from tierlog.service.groups import admin as groups_admin
from tierlog.service.groups import native as groups_native
from tierlog.service.groups import rest as groups_rest
from tierlog.service.native_api import openapi as native_openapi
from tierlog.service.security import openapi as security_openapi
from tierlog.service.topics import data_dir as meta
from tierlog.service.web import health

__all__ = ["OPENAPI_PATHS", "build_document", "render", "rendered", "setup_routes"]

VERSION = "0.1.0"

OPENAPI_PATHS: dict[str, Any] = {
    "/openapi.json": {
        "get": {
            "tags": ["Operations"],
            "summary": "This OpenAPI document",
            "operationId": "getOpenApi",
            "responses": {"200": {"description": "The document", "content": {"application/json": {}}}},
        }
    }
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error_code", "message"],
    "properties": {
        "error_code": {"type": "integer", "example": 40401},
        "message": {"type": "string"},
        "log_start_offset": {"type": "integer", "description": "offset-out-of-range errors only"},
        "log_end_offset": {"type": "integer", "description": "offset-out-of-range errors only"},
        "leader_id": {"type": "integer", "description": "not-leader errors (50310) only; -1 when unknown"},
        "leader_url": {"type": "string", "description": "not-leader errors (50310) only; empty when unknown"},
        "leader_epoch": {"type": "integer", "description": "not-leader errors (50310) only"},
    },
}


def build_document() -> dict[str, Any]:
    """The whole document: the paths of every module whose routes :func:`tierlog.service.app.create_app`
    registers (the consumer groups' included). Pure; idempotent; never modifies the modules' dicts.
    """
    documented = (
        health.OPENAPI_PATHS,
        admin_v3.OPENAPI_PATHS,
        rest_v2.OPENAPI_PATHS,
        native_openapi.OPENAPI_PATHS,
        groups_rest.OPENAPI_PATHS,
        groups_native.OPENAPI_PATHS,
        groups_admin.OPENAPI_PATHS,
        security_openapi.OPENAPI_PATHS,
        OPENAPI_PATHS,
    )
    paths: dict[str, Any] = {}
    for module_paths in documented:
        for path, operations in module_paths.items():
            paths.setdefault(path, {}).update(copy.deepcopy(operations))
    components: dict[str, Any] = {"schemas": {"Error": ERROR_SCHEMA}}
    for module_components in (admin_v3_openapi.OPENAPI_COMPONENTS, security_openapi.OPENAPI_COMPONENTS):
        for kind, entries in module_components.items():
            components.setdefault(kind, {}).update(copy.deepcopy(entries))
    for path, operations in paths.items():
        _declare_path_parameters(path, operations)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "tierlog broker",
            "version": VERSION,
            "description": "Kafka-style commit log over HTTP: Confluent REST v2/v3 compatible routes, "
            "a native binary path, and operations endpoints. Errors are JSON "
            '{"error_code", "message"} with Confluent REST codes.',
        },
        "paths": dict(sorted(paths.items())),
        "components": components,
    }


_INTEGER_PARAMETERS = {"partition", "partition_id", "broker_id"}
_TOPIC_PARAMETERS = {"topic", "topic_name"}
# A ``{topic}`` path (v2 and native routes) is checked against the name rule before any lookup.
_TOPIC_RULE_400 = {
    "description": "The {topic} path segment is not a legal topic name (40001), or another malformed input",
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}},
        "application/vnd.kafka.v2+json": {"schema": {"$ref": "#/components/schemas/Error"}},
    },
}


def _topic_schema() -> dict[str, Any]:
    return {"type": "string", "pattern": meta.TOPIC_NAME_PATTERN, "maxLength": meta.MAX_TOPIC_NAME}


def _declare_path_parameters(path: str, operations: dict[str, Any]) -> None:
    """Declare every ``{name}`` of ``path`` as a required path parameter where a module did not, give
    every topic parameter Kafka's name rule as a pattern, and document the 400 that a ``{topic}`` path
    (checked by :func:`tierlog.service.web.requests.topic_name`) can answer."""
    names = re.findall(r"{([^}:]+)(?::[^}]*)?}", path)
    for method, operation in operations.items():
        if method == "parameters" or not isinstance(operation, dict):
            continue
        declared = {
            (p.get("in"), p.get("name")) for p in operation.get("parameters", []) if isinstance(p, dict)
        }
        declared |= {
            (p.get("in"), p.get("name")) for p in operations.get("parameters", []) if isinstance(p, dict)
        }
        for name in names:
            if ("path", name) not in declared:
                kind = "integer" if name in _INTEGER_PARAMETERS else "string"
                operation.setdefault("parameters", []).append(
                    {"name": name, "in": "path", "required": True, "schema": {"type": kind}}
                )
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "path" and parameter.get("name") in _TOPIC_PARAMETERS:
                parameter["schema"] = {**parameter.get("schema", {}), **_topic_schema()}
        if "topic" in names:
            operation.setdefault("responses", {}).setdefault("400", copy.deepcopy(_TOPIC_RULE_400))


def render() -> str:
    """The document as stable, pretty JSON text ending in a newline."""
    return json.dumps(build_document(), indent=2, sort_keys=True) + "\n"


@functools.cache
def rendered() -> bytes:
    """:func:`render` as bytes, built once per process, when ``/openapi.json`` is first asked for (building
    it takes a tenth of a second or more: not part of a broker's start-up)."""
    return render().encode()


async def openapi_json(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the document, rendered in a worker thread the first time. Read-only."""
    body = await asyncio.to_thread(rendered)
    return web.Response(body=body, content_type="application/json")


def setup_routes(app: web.Application) -> None:
    """Register ``/openapi.json`` (the document is rendered on its first request)."""
    app.router.add_get("/openapi.json", openapi_json, name="openapi", allow_head=False)


if __name__ == "__main__":
    sys.stdout.write(render())
