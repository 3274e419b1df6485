"""What the OpenAPI document says about every route at once: tags, servers, security schemes, which routes
need credentials and which ACL, the answers authentication adds, and the meaning of the path parameters
every API shares. Applied by :func:`tierlog.service.openapi.build_document` to the paths the route modules
describe; pure.

Security follows :data:`tierlog.service.security.authz.ROUTE_ACTIONS`, the table the authorizer enforces,
so the document cannot name another ACL than the one a request is checked against.
"""

from __future__ import annotations

import copy
from typing import Any

from tierlog.service.security.authz import AUTHENTICATED, HANDLER, OPEN, ROUTE_ACTIONS, Need, Row

__all__ = [
    "PARAMETER_DESCRIPTIONS",
    "SECURITY_SCHEMES",
    "TAGS",
    "describe_security",
    "servers",
]

TAGS: list[dict[str, str]] = [
    {
        "name": "REST Proxy v2",
        "description": "Confluent REST Proxy v2 compatible topics, partitions, produce and reads: JSON or "
        "base64 records in `application/vnd.kafka.{json,binary}.v2+json` (docs/rest-v2.md).",
    },
    {
        "name": "consumers (REST Proxy v2)",
        "description": "REST Proxy v2 consumer instances: a stateful consumer per instance in a group, "
        "subscribed or assigned, committing offsets shared with every other door (docs/groups.md).",
    },
    {
        "name": "Admin (v3)",
        "description": "Confluent REST v3 cluster, broker, topic, config, partition and replica resources "
        "(docs/admin-api.md).",
    },
    {"name": "consumer groups (v3)", "description": "Confluent REST v3 consumer groups, members and lag."},
    {
        "name": "Security (v3)",
        "description": "Kafka-model ACLs (Confluent's v3 ACL API) and SCRAM users (docs/security.md).",
    },
    {
        "name": "Native binary path",
        "description": "Raw Kafka v2 record batches in and out, no JSON or base64 on the broker; used by the "
        "Python client (docs/native-api.md).",
    },
    {
        "name": "groups (native)",
        "description": "Kafka's classic group protocol over HTTP (join, sync, heartbeat, leave, offsets) "
        "for the Python client's group consumer (docs/groups.md).",
    },
    {
        "name": "Replication (between brokers)",
        "description": "Followers' fetches and the leader's ISR changes inside a cluster; brokers call "
        "these, clients do not (docs/cluster.md).",
    },
    {"name": "Operations", "description": "Liveness, readiness, Prometheus metrics and this document."},
]

SECURITY_SCHEMES: dict[str, Any] = {
    "basicAuth": {
        "type": "http",
        "scheme": "basic",
        "description": "HTTP Basic against the user's SCRAM credential (`authentication.methods` lists "
        "`basic`). Failures are throttled per user and address (429, 42901). Users are managed with "
        "`PUT /v3/clusters/{cluster_id}/users/{name}`.",
    },
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "An OAuth 2 / OIDC JWT checked against the configured issuer and keys "
        "(`authentication.methods` lists `bearer`; docs/security.md).",
    },
}

_SECURITY_NOTE = (
    "Authentication is off by default (every request acts as `User:ANONYMOUS`). With "
    "`authentication.methods` set, every route except `/health`, `/ready` and `/openapi.json` (and "
    "`/metrics` with `metrics.public`) needs one of: HTTP Basic (`basicAuth`), a bearer JWT (`bearerAuth`), "
    "or a client certificate on a TLS listener with `ssl.client.auth` (`mtls`: mutual TLS is a property of "
    "the connection, which OpenAPI 3.0 cannot declare as a scheme). Which ACL each operation needs is in "
    "its description and in `x-tierlog-acl`."
)

PARAMETER_DESCRIPTIONS: dict[str, str] = {
    "topic": "A topic name: Kafka's rule, 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`",
    "topic_name": "A topic name: Kafka's rule, 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`",
    "partition": "A partition index of the topic, from 0",
    "partition_id": "A partition index of the topic, from 0",
    "cluster_id": "The cluster's id, as `GET /v3/clusters` lists it",
    "broker_id": "A broker's `broker.id`",
    "group": "A consumer group id",
    "instance": "A consumer instance's name, as its create answered",
    "name": "The name of the resource the path names",
    "epoch": "A leader epoch",
}

_AUTH_RESPONSES: dict[str, str] = {
    "401": "Authentication is on and the request has no valid credentials (40101); the answer carries a "
    "`WWW-Authenticate` challenge per enabled method",
    "403": "An ACL denies the operation (40301)",
    "429": "Too many failed authentications for this user from this address, or from this address "
    "(42901, with `Retry-After`)",
}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


def servers(advertised_url: str | None) -> list[dict[str, Any]]:
    """The ``servers`` entries: this broker's URL first when known (the served document), then the default
    listener and a template any viewer can fill in. Pure."""
    entries: list[dict[str, Any]] = []
    if advertised_url:
        entries.append({"url": advertised_url.rstrip("/"), "description": "This broker (`advertised.url`)"})
    entries.append(
        {"url": "http://127.0.0.1:8082", "description": "A broker on the default `host` and `port`"}
    )
    entries.append(
        {
            "url": "{scheme}://{host}:{port}",
            "description": "Any broker: every broker answers for the whole cluster",
            "variables": {
                "scheme": {"default": "http", "enum": ["http", "https"], "description": "https with TLS"},
                "host": {"default": "127.0.0.1", "description": "The broker's host"},
                "port": {"default": "8082", "description": "The broker's `port`"},
            },
        }
    )
    return entries


def _acl_text(row: Row) -> str:
    if row is AUTHENTICATED:
        return "any authenticated principal"
    if row is HANDLER:
        return "checked per resource by the handler (see the description)"
    assert isinstance(row, tuple)
    return "; ".join(_need_text(need) for need in row)


def _need_text(need: Need) -> str:
    resource = need.resource_type.kafka_name
    name = "kafka-cluster" if need.key is None else "{" + need.key + "}"
    return f"{need.operation.kafka_name} on {resource} {name}"


def describe_security(path: str, method: str, operation: dict[str, Any]) -> None:
    """Mark ``operation`` open (``security: []``) or give it the ACL it needs (in ``x-tierlog-acl`` and its
    description) and the 401/403/429 answers authentication adds. Routes the authorizer has no row for are
    left alone (a test holds every route to have one)."""
    row = ROUTE_ACTIONS.get((method.upper(), path))
    if row is None:
        return
    if row is OPEN:
        operation["security"] = []
        return
    acl = _acl_text(row)
    operation["x-tierlog-acl"] = acl
    note = f"Authorization (when on): {acl}."
    description = operation.get("description")
    operation["description"] = f"{description}\n\n{note}" if description else note
    responses = operation.setdefault("responses", {})
    for status, text in _AUTH_RESPONSES.items():
        if status == "403" and row is AUTHENTICATED:
            continue
        responses.setdefault(status, {"description": text, "content": copy.deepcopy(_ERROR_CONTENT)})


def security_note() -> str:
    """The paragraph of ``info.description`` on authentication. Pure."""
    return _SECURITY_NOTE
