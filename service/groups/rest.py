"""The REST Proxy v2 consumer API: ``/consumers/{group}`` and its instances.

Request and response JSON, status codes and error codes follow Confluent's REST Proxy v2, so existing REST
clients work unchanged. Handlers parse, call one :class:`~tierlog.service.groups.consumers.ConsumerManager`
method and serialise.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tierlog.service.groups.consumer_config import ConsumerSettings, parse_partitions
from tierlog.service.groups.consumers import ConsumerManager
from tierlog.service.groups.state import CONSUMERS, require_ready
from tierlog.service.rest_v2.media import (
    KAFKA_V2_BINARY,
    KAFKA_V2_JSON,
    KAFKA_V2_JSON_JSON,
    EmbeddedFormat,
    Offer,
    negotiate,
)
from tierlog.tiering.errors import (
    BadRequestError,
    InvalidConsumerConfigError,
    NotAcceptableError,
    UnsupportedMediaTypeError,
)

__all__ = ["setup_routes", "OPENAPI_PATHS"]

REQUEST_TYPES = ("application/vnd.kafka.v2+json", "application/vnd.kafka+json", "application/json")
V2_OFFERS = (
    Offer(KAFKA_V2_JSON, 1.0),
    Offer("application/vnd.kafka+json", 0.8),
    Offer("application/json", 0.5),
)
INSTANCE = "/consumers/{group}/instances/{instance}"


def _manager(request: web.Request) -> ConsumerManager:
    require_ready(request)
    return request.app[CONSUMERS]


async def _body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise BadRequestError("request body is empty")
    content_type = request.headers.get("Content-Type")
    if content_type is not None and content_type.split(";")[0].strip().lower() not in REQUEST_TYPES:
        raise UnsupportedMediaTypeError(f"unsupported Content-Type {content_type!r}; use {REQUEST_TYPES[0]}")
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise BadRequestError(f"malformed JSON body: {err}") from None
    if not isinstance(body, dict):
        raise BadRequestError("the request body must be a JSON object")
    return body


def _reply(request: web.Request, body: Any, status: int = 200) -> web.Response:
    offer = negotiate(request.headers.get("Accept"), V2_OFFERS)
    if offer is None:
        raise NotAcceptableError(f"cannot answer with any of {request.headers.get('Accept')!r}")
    return web.json_response(body, status=status, content_type=offer.response_type)


def _no_content() -> web.Response:
    return web.Response(status=204)


def _offsets(body: dict[str, Any], key: str) -> dict[tuple[str, int], tuple[int, str]]:
    parsed: dict[tuple[str, int], tuple[int, str]] = {}
    for (topic, partition), entry in zip(parse_partitions(body, key), body[key], strict=True):
        offset = entry.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidConsumerConfigError(f"offset of {topic}-{partition} must be an integer")
        metadata = entry.get("metadata") or ""
        parsed[(topic, partition)] = (offset, str(metadata))
    return parsed


async def create_instance(request: web.Request) -> web.Response:
    body = await _body(request)
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidConsumerConfigError("name must be a string")
    settings = ConsumerSettings.from_request(body)
    base_url = f"{request.scheme}://{request.host}"
    instance = _manager(request).create(request.match_info["group"], name, settings, base_url)
    return _reply(request, {"instance_id": instance.name, "base_uri": instance.base_uri})


async def delete_instance(request: web.Request) -> web.Response:
    await _manager(request).delete(request.match_info["group"], request.match_info["instance"])
    return _no_content()


def _instance(request: web.Request) -> Any:
    return _manager(request).get(request.match_info["group"], request.match_info["instance"])


async def subscribe(request: web.Request) -> web.Response:
    instance = _instance(request)
    body = await _body(request)
    topics = body.get("topics") or []
    pattern = body.get("topic_pattern")
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise InvalidConsumerConfigError("topics must be a list of topic names")
    if pattern is not None and not isinstance(pattern, str):
        raise InvalidConsumerConfigError("topic_pattern must be a string")
    await _manager(request).subscribe(instance, topics, pattern)
    return _no_content()


async def get_subscription(request: web.Request) -> web.Response:
    instance = _instance(request)
    return _reply(request, {"topics": _manager(request).subscription(instance)})


async def unsubscribe(request: web.Request) -> web.Response:
    await _manager(request).unsubscribe(_instance(request))
    return _no_content()


async def assign(request: web.Request) -> web.Response:
    instance = _instance(request)
    _manager(request).assign(instance, parse_partitions(await _body(request)))
    return _no_content()


async def get_assignments(request: web.Request) -> web.Response:
    instance = _instance(request)
    partitions = _manager(request).assignment(instance)
    return _reply(request, {"partitions": [{"topic": t, "partition": p} for t, p in partitions]})


async def seek(request: web.Request) -> web.Response:
    instance = _instance(request)
    offsets = _offsets(await _body(request), "offsets")
    _manager(request).seek(instance, {tp: o for tp, (o, _) in offsets.items()})
    return _no_content()


async def seek_beginning(request: web.Request) -> web.Response:
    instance = _instance(request)
    _manager(request).seek_to(instance, parse_partitions(await _body(request)), end=False)
    return _no_content()


async def seek_end(request: web.Request) -> web.Response:
    instance = _instance(request)
    _manager(request).seek_to(instance, parse_partitions(await _body(request)), end=True)
    return _no_content()


def _query_int(request: web.Request, name: str, default: int | None) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"query parameter {name} must be an integer, not {raw!r}") from None
    if value < 0:
        raise BadRequestError(f"query parameter {name} must not be negative")
    return value


async def records(request: web.Request) -> web.Response:
    instance = _instance(request)
    wanted = KAFKA_V2_BINARY if instance.settings.format is EmbeddedFormat.BINARY else KAFKA_V2_JSON_JSON
    offer = negotiate(request.headers.get("Accept"), (Offer(wanted, 1.0),))
    if offer is None:
        raise NotAcceptableError(
            f"this consumer instance uses the {instance.settings.format.value} format; accept {wanted}"
        )
    timeout = _query_int(request, "timeout", None)
    max_bytes = _query_int(request, "max_bytes", 64 * 1024 * 1024) or 1
    out = await _manager(request).poll(instance, timeout, max_bytes)
    return web.json_response(out, content_type=wanted)


async def commit(request: web.Request) -> web.Response:
    instance = _instance(request)
    body = await _body(request, optional=True)
    key = "offsets" if "offsets" in body else "partitions" if "partitions" in body else None
    offsets = _offsets(body, key) if key is not None else None
    await _manager(request).commit(instance, offsets)
    return web.Response(status=200)


async def committed(request: web.Request) -> web.Response:
    instance = _instance(request)
    partitions = parse_partitions(await _body(request))
    return _reply(request, {"offsets": _manager(request).committed(instance, partitions)})


def setup_routes(app: web.Application) -> None:
    """Register the consumer API's routes on ``app``."""
    app.router.add_post("/consumers/{group}", create_instance)
    app.router.add_delete(INSTANCE, delete_instance)
    app.router.add_post(INSTANCE + "/subscription", subscribe)
    app.router.add_get(INSTANCE + "/subscription", get_subscription)
    app.router.add_delete(INSTANCE + "/subscription", unsubscribe)
    app.router.add_post(INSTANCE + "/assignments", assign)
    app.router.add_get(INSTANCE + "/assignments", get_assignments)
    app.router.add_post(INSTANCE + "/positions", seek)
    app.router.add_post(INSTANCE + "/positions/beginning", seek_beginning)
    app.router.add_post(INSTANCE + "/positions/end", seek_end)
    app.router.add_get(INSTANCE + "/records", records)
    app.router.add_post(INSTANCE + "/offsets", commit)
    app.router.add_get(INSTANCE + "/offsets", committed)


def _op(
    summary: str, *, body: str | None = None, ok: str = "200", params: tuple[str, ...] = ()
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "tags": ["consumers (REST Proxy v2)"],
        "parameters": [{"name": p, "in": "query", "schema": {"type": "integer"}} for p in params],
        "responses": {
            ok: {"description": "success"},
            "404": {"description": "40403 consumer instance not found"},
        },
    }
    if body is not None:
        op["requestBody"] = {
            "content": {"application/vnd.kafka.v2+json": {"schema": {"type": "object"}}},
            "description": body,
        }
    return op


_GROUP = [{"name": "group", "in": "path", "required": True, "schema": {"type": "string"}}]
_INST = [*_GROUP, {"name": "instance", "in": "path", "required": True, "schema": {"type": "string"}}]

OPENAPI_PATHS: dict[str, Any] = {
    "/consumers/{group}": {
        "parameters": _GROUP,
        "post": _op(
            "Create a consumer instance in the group",
            body='{"name", "format": binary|json, "auto.offset.reset", "auto.commit.enable", '
            '"fetch.min.bytes", "consumer.request.timeout.ms"}',
        ),
    },
    INSTANCE: {
        "parameters": _INST,
        "delete": _op("Delete the instance (commits with auto commit)", ok="204"),
    },
    INSTANCE + "/subscription": {
        "parameters": _INST,
        "post": _op(
            "Subscribe to topics or a pattern", body='{"topics": [...]} or {"topic_pattern": "..."}', ok="204"
        ),
        "get": _op("The current subscription"),
        "delete": _op("Unsubscribe", ok="204"),
    },
    INSTANCE + "/assignments": {
        "parameters": _INST,
        "post": _op("Assign partitions by hand", body='{"partitions": [{"topic", "partition"}]}', ok="204"),
        "get": _op("The partitions currently assigned"),
    },
    INSTANCE + "/positions": {
        "parameters": _INST,
        "post": _op("Seek", body='{"offsets": [{"topic", "partition", "offset"}]}', ok="204"),
    },
    INSTANCE + "/positions/beginning": {
        "parameters": _INST,
        "post": _op("Seek to the beginning", body='{"partitions": [...]}', ok="204"),
    },
    INSTANCE + "/positions/end": {
        "parameters": _INST,
        "post": _op("Seek to the end", body='{"partitions": [...]}', ok="204"),
    },
    INSTANCE + "/records": {
        "parameters": _INST,
        "get": _op("Fetch records (long poll up to timeout ms)", params=("timeout", "max_bytes")),
    },
    INSTANCE + "/offsets": {
        "parameters": _INST,
        "post": _op("Commit offsets (empty body: everything fetched)", body='{"offsets": [...]} or empty'),
        "get": _op("Committed offsets", body='{"partitions": [...]}'),
    },
}
