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
from tierlog.service.groups import openapi as groups_openapi
from tierlog.service.native_api import openapi as native_openapi
from tierlog.service.openapi_meta import (
    PARAMETER_DESCRIPTIONS,
    SECURITY_SCHEMES,
    TAGS,
    describe_security,
    security_note,
    servers,
)
from tierlog.service.security import openapi as security_openapi
from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.rules import NOT_INTERNAL_TOPIC_PATTERN
from tierlog.service.web import health
from tierlog.service.web.keys import SETTINGS
from tierlog.wire import native

__all__ = ["OPENAPI_PATHS", "build_document", "render", "rendered", "setup_routes"]

VERSION = "0.1.0"

OPENAPI_PATHS: dict[str, Any] = {
    "/openapi.json": {
        "get": {
            "tags": ["Operations"],
            "summary": "This OpenAPI document",
            "description": "The OpenAPI 3 document of every route, as checked in at docs/openapi.json, with "
            "this broker's `advertised.url` as its first server. No credentials needed.",
            "operationId": "getOpenApi",
            "responses": {"200": {"description": "The document", "content": {"application/json": {}}}},
        }
    }
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every error answer: a stable code (docs/errors.md) and a message for people; some "
    "codes carry the fields named below",
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


def build_document(advertised_url: str | None = None) -> dict[str, Any]:
    """The whole document: the paths of every module whose routes :func:`tierlog.service.app.create_app`
    registers (the consumer groups' included), with the security each route needs (from the authorizer's
    table), tags and servers (``advertised_url`` first when given). Pure; idempotent; never modifies the
    modules' dicts.
    """
    documented = (
        health.OPENAPI_PATHS,
        admin_v3.OPENAPI_PATHS,
        rest_v2.OPENAPI_PATHS,
        native_openapi.OPENAPI_PATHS,
        groups_openapi.REST_PATHS,
        groups_openapi.NATIVE_PATHS,
        groups_openapi.V3_PATHS,
        security_openapi.OPENAPI_PATHS,
        OPENAPI_PATHS,
    )
    paths: dict[str, Any] = {}
    for module_paths in documented:
        for path, operations in module_paths.items():
            paths.setdefault(path, {}).update(copy.deepcopy(operations))
    components: dict[str, Any] = {
        "schemas": {"Error": ERROR_SCHEMA},
        "securitySchemes": copy.deepcopy(SECURITY_SCHEMES),
    }
    for module_components in (admin_v3_openapi.OPENAPI_COMPONENTS, security_openapi.OPENAPI_COMPONENTS):
        for kind, entries in module_components.items():
            components.setdefault(kind, {}).update(copy.deepcopy(entries))
    for path, operations in paths.items():
        _declare_path_parameters(path, operations)
        for method, operation in operations.items():
            if method != "parameters":
                describe_security(path, method, operation)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "tierlog broker",
            "version": VERSION,
            "description": "Kafka-style commit log over HTTP: Confluent REST v2/v3 compatible routes, "
            "a native binary path, and operations endpoints. Errors are JSON "
            '{"error_code", "message"} with Confluent REST codes (docs/errors.md lists every code).\n\n'
            + security_note(),
            "license": {"name": "Apache-2.0"},
        },
        "servers": servers(advertised_url),
        "tags": copy.deepcopy(TAGS),
        # Any one of these, or none while authentication is off (the empty requirement).
        "security": [{}, {"basicAuth": []}, {"bearerAuth": []}],
        "paths": dict(sorted(paths.items())),
        "components": components,
    }


# A group id: 1-255 characters, no control characters (the coordinator's rule).
_GROUP_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[^\x00-\x1f\x7f]+$"}
# Operations refused (400, 40002) on an internal topic, a name starting with "__": clients do not write to
# internal topics, delete them or change their partition count.
_NOT_INTERNAL = {
    ("post", "/topics/{topic}"),
    ("post", "/topics/{topic}/partitions/{partition}"),
    ("post", native.PARTITION_ROUTE + "/batches"),
    ("delete", "/v3/clusters/{cluster_id}/topics/{topic_name}"),
    ("patch", "/v3/clusters/{cluster_id}/topics/{topic_name}"),
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
        # operations of one path may share a module's parameter objects: change copies only
        operation["parameters"] = [copy.deepcopy(p) for p in operation.get("parameters", [])]
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
        for parameter in [*operation.get("parameters", []), *operations.get("parameters", [])]:
            if "description" not in parameter and parameter.get("name") in PARAMETER_DESCRIPTIONS:
                parameter["description"] = PARAMETER_DESCRIPTIONS[parameter["name"]]
            if parameter.get("in") == "path" and parameter.get("name") == "group":
                parameter["schema"] = {**parameter.get("schema", {}), **_GROUP_SCHEMA}
            if parameter.get("in") == "path" and parameter.get("name") in _TOPIC_PARAMETERS:
                parameter["schema"] = {**parameter.get("schema", {}), **_topic_schema()}
                if (method, path) in _NOT_INTERNAL:
                    parameter["schema"]["pattern"] = NOT_INTERNAL_TOPIC_PATTERN
                    parameter["description"] += "; not an internal (`__`) topic"
        if "topic" in names:
            operation.setdefault("responses", {}).setdefault("400", copy.deepcopy(_TOPIC_RULE_400))


def render(advertised_url: str | None = None) -> str:
    """The document as stable, pretty JSON text ending in a newline (``servers`` naming
    ``advertised_url`` first when given)."""
    return json.dumps(build_document(advertised_url), indent=2, sort_keys=True) + "\n"


@functools.cache
def rendered(advertised_url: str | None) -> bytes:
    """:func:`render` as bytes, built once per process and advertised URL, when ``/openapi.json`` is first
    asked for (building it takes a tenth of a second or more: not part of a broker's start-up)."""
    return render(advertised_url).encode()


async def openapi_json(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the document, rendered in a worker thread the first time. Read-only."""
    body = await asyncio.to_thread(rendered, request.app[SETTINGS].advertised_url)
    return web.Response(body=body, content_type="application/json")


def setup_routes(app: web.Application) -> None:
    """Register ``/openapi.json`` (the document, its first server this broker's ``advertised.url``, is
    rendered on its first request)."""
    app.router.add_get("/openapi.json", openapi_json, name="openapi", allow_head=False)


if __name__ == "__main__":
    sys.stdout.write(render())
