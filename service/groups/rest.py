"""The REST Proxy consumer API: ``/consumers/{group}`` and its instances, v2 and v1.

Request and response JSON, status codes and error codes follow Confluent's REST Proxy v2, so existing REST
clients work unchanged. The v1 API shares the v2 routes (create, delete, commit) and adds one:
``GET /consumers/{group}/instances/{instance}/topics/{topic}`` subscribes the instance to the topic (on
the first read) and returns its records. Request bodies may come as any REST Proxy media type, v1 or v2,
format-specific or not, or as ``application/json``; an empty or ``null`` body means "no fields".
Handlers parse, call one :class:`~tierlog.service.groups.consumers.ConsumerManager` method and serialise.

With security on, an instance remembers its creator's principal and client host: its ``topic_pattern`` is
resolved only over the topics that principal may Read, so ``/subscription``, ``/assignments`` and the
records never name a topic it may not Describe. Every request on the instance is still checked for its own
principal (the route's ACLs, and Read on the topics it names or reads).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from aiohttp import web

from tierlog.service.groups.consumer_config import MAX_REQUEST_TIMEOUT_MS, ConsumerSettings, parse_partitions
from tierlog.service.groups.consumers import ConsumerManager
from tierlog.service.groups.routing import base_url_of, group_route
from tierlog.service.groups.state import CONSUMERS, require_ready
from tierlog.service.security import authz
from tierlog.service.security.authn import CLIENT_HOST, PRINCIPAL
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.web.media import (
    consumer_records_offers,
    negotiate,
    parse_kafka_type,
    response_offers,
)
from tierlog.wire.errors import (
    BadRequestError,
    IllegalStateError,
    InvalidConsumerConfigError,
    NotAcceptableError,
    UnknownTopicError,
    UnsupportedMediaTypeError,
)

__all__ = ["setup_routes"]

INSTANCE = "/consumers/{group}/instances/{instance}"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # and the most a read may ask for
_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _manager(request: web.Request) -> ConsumerManager:
    require_ready(request)
    return request.app[CONSUMERS]


async def _body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The JSON object of the body; ``{}`` for an empty or ``null`` body when ``optional``.

    Raises:
        UnsupportedMediaTypeError: (41501) a ``Content-Type`` that is no REST Proxy type.
        BadRequestError: (40001) malformed JSON, not an object, or no body where one is required.
    """
    content_type = request.headers.get("Content-Type")
    if request.can_read_body and content_type is not None and parse_kafka_type(content_type) is None:
        raise UnsupportedMediaTypeError(
            f"HTTP 415 Unsupported Media Type: {content_type!r}; use application/vnd.kafka.v2+json"
        )
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise BadRequestError("request body is empty")
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise BadRequestError(f"malformed JSON body: {err}") from None
    if body is None and optional:
        return {}
    if not isinstance(body, dict):
        raise BadRequestError("the request body must be a JSON object")
    return body


def _reply(request: web.Request, body: Any, status: int = 200) -> web.Response:
    offers = response_offers(request.headers.get("Content-Type"))
    offer = negotiate(request.headers.get("Accept"), offers)
    if offer is None:
        raise NotAcceptableError(f"HTTP 406 Not Acceptable: {request.headers.get('Accept')!r}")
    return web.json_response(body, status=status, content_type=offer.response_type)


def _no_content() -> web.Response:
    return web.Response(status=204)


def _offsets(body: dict[str, Any], key: str) -> dict[tuple[str, int], tuple[int, str]]:
    parsed: dict[tuple[str, int], tuple[int, str]] = {}
    for (topic, partition), entry in zip(parse_partitions(body, key), body[key], strict=True):
        offset = entry.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidConsumerConfigError(f"offset of {topic}-{partition} must be an integer")
        metadata = entry.get("metadata")
        if metadata is not None and not isinstance(metadata, str):
            raise InvalidConsumerConfigError(f"metadata of {topic}-{partition} must be a string")
        parsed[(topic, partition)] = (offset, metadata or "")
    return parsed


async def create_instance(request: web.Request) -> web.Response:
    body = await _body(request, optional=True)
    name = body.get("name")
    if name is None:
        name = body.get("id")  # the v1 API's older name for it
    if name is not None and not isinstance(name, str):
        raise InvalidConsumerConfigError("name must be a string")
    settings = ConsumerSettings.from_request(body)
    base_url = base_url_of(request)
    enabled = authz.is_enabled(request)
    instance = _manager(request).create(
        request.match_info["group"],
        name,
        settings,
        base_url,
        principal=request[PRINCIPAL] if enabled else None,
        client_host=request[CLIENT_HOST] if enabled else None,
        may_read=_reader(request) if enabled else None,
    )
    return _reply(request, {"instance_id": instance.name, "base_uri": instance.base_uri})


async def delete_instance(request: web.Request) -> web.Response:
    await _manager(request).delete(request.match_info["group"], request.match_info["instance"])
    return _no_content()


def _reader(request: web.Request) -> Callable[[str], bool]:
    """Whether the request's principal, from its client host, may Read a topic, asked anew (current
    ACLs) on every call, also after the request has ended."""
    authorizer = request.app[authz.AUTHORIZER]
    principal, host = request[PRINCIPAL], request[CLIENT_HOST]

    def may_read(topic: str) -> bool:
        return authorizer.current().authorize(principal, host, Operation.READ, ResourceType.TOPIC, topic)

    return may_read


def _instance(request: web.Request) -> Any:
    return _manager(request).get(request.match_info["group"], request.match_info["instance"])


def _authorize_topics(request: web.Request, operation: Operation, topics: Iterable[str]) -> None:
    """Refuse unless the principal may do ``operation`` on every one of ``topics`` (each checked once).

    Raises:
        AuthorizationError: (40301) one of them is not allowed.
    """
    if not authz.is_enabled(request):
        return
    for topic in dict.fromkeys(topics):
        authz.authorize(request, operation, ResourceType.TOPIC, topic)


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe to ``topics`` (Read on each) or ``topic_pattern`` (with security on, matching only the
    topics the instance's creator may Read). Raises AuthorizationError (40301) for a topic of ``topics``."""
    instance = _instance(request)
    body = await _body(request, optional=True)
    topics = body.get("topics") or []
    pattern = body.get("topic_pattern")
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise InvalidConsumerConfigError("topics must be a list of topic names")
    if pattern is not None and not isinstance(pattern, str):
        raise InvalidConsumerConfigError("topic_pattern must be a string")
    _authorize_topics(request, Operation.READ, topics)
    await _manager(request).subscribe(instance, topics, pattern)
    return _no_content()


async def get_subscription(request: web.Request) -> web.Response:
    instance = _instance(request)
    return _reply(request, {"topics": _manager(request).subscription(instance)})


async def unsubscribe(request: web.Request) -> web.Response:
    await _manager(request).unsubscribe(_instance(request))
    return _no_content()


async def assign(request: web.Request) -> web.Response:
    """Assign partitions manually (Read on each topic). Raises AuthorizationError (40301)."""
    instance = _instance(request)
    partitions = parse_partitions(await _body(request))
    _authorize_topics(request, Operation.READ, (topic for topic, _ in partitions))
    _manager(request).assign(instance, partitions)
    return _no_content()


async def get_assignments(request: web.Request) -> web.Response:
    instance = _instance(request)
    manager = _manager(request)
    await manager.refresh(instance)
    partitions = manager.assignment(instance)
    return _reply(request, {"partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def _timestamp(raw: Any, topic: str, partition: int) -> int:
    """Milliseconds since the epoch from Confluent's ISO 8601 string (``2024-01-01T00:00:00Z``) or an int."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return int(datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            pass
    raise InvalidConsumerConfigError(
        f"timestamp of {topic}-{partition} must be an ISO 8601 date-time or epoch milliseconds, not {raw!r}"
    )


async def seek(request: web.Request) -> web.Response:
    """``{"offsets": [...]}``, ``{"timestamps": [{"topic", "partition", "timestamp"}]}``, or both."""
    instance = _instance(request)
    body = await _body(request)
    if "offsets" not in body and "timestamps" not in body:
        raise InvalidConsumerConfigError("give offsets or timestamps to seek to")
    manager = _manager(request)
    if body.get("offsets") is not None:
        offsets = _offsets(body, "offsets")
        manager.seek(instance, {tp: o for tp, (o, _) in offsets.items()})
    if body.get("timestamps") is not None:
        targets = {
            (topic, partition): _timestamp(entry.get("timestamp"), topic, partition)
            for (topic, partition), entry in zip(
                parse_partitions(body, "timestamps"), body["timestamps"], strict=True
            )
        }
        await manager.seek_to_timestamps(instance, targets)
    return _no_content()


async def seek_beginning(request: web.Request) -> web.Response:
    instance = _instance(request)
    await _manager(request).seek_to(instance, parse_partitions(await _body(request)), end=False)
    return _no_content()


async def seek_end(request: web.Request) -> web.Response:
    instance = _instance(request)
    await _manager(request).seek_to(instance, parse_partitions(await _body(request)), end=True)
    return _no_content()


def _query_int(request: web.Request, name: str, high: int) -> int | None:
    """Query parameter ``name`` as an int; absent or negative (Confluent's default is -1) means None.

    Raises:
        BadRequestError: (40001) not a decimal integer, or over ``high``.
    """
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    if not _INTEGER_TEXT.fullmatch(raw):
        raise BadRequestError(f"query parameter {name} must be an integer, not {raw!r}")
    value = int(raw)
    if value > high:
        raise BadRequestError(f"query parameter {name} must be at most {high}, not {value}")
    return value if value >= 0 else None


async def _read(request: web.Request, *, topic: str | None) -> web.Response:
    instance = _instance(request)
    fmt = instance.settings.format
    offer = negotiate(request.headers.get("Accept"), consumer_records_offers(fmt))
    if offer is None:
        raise NotAcceptableError(
            f"HTTP 406 Not Acceptable: this consumer instance uses the {fmt.value} format; "
            f"accept application/vnd.kafka.{fmt.value}.v2+json"
        )
    timeout = _query_int(request, "timeout", MAX_REQUEST_TIMEOUT_MS)
    max_bytes = _query_int(request, "max_bytes", DEFAULT_MAX_BYTES)
    budget = max_bytes or DEFAULT_MAX_BYTES
    manager = _manager(request)
    await manager.refresh(instance)
    _authorize_topics(request, Operation.READ, (t for t, _ in manager.assignment(instance)))
    out = await manager.poll(instance, timeout, budget, topic=topic)
    return web.json_response(out, content_type=offer.response_type)


async def records(request: web.Request) -> web.Response:
    """Records of the instance's partitions. See :meth:`ConsumerManager.poll`. Raises AuthorizationError
    (40301) when the principal may no longer Read one of the assigned topics (nothing is read)."""
    return await _read(request, topic=None)


async def read_topic_v1(request: web.Request) -> web.Response:
    """The v1 API's read: subscribe the instance to ``{topic}`` if it is not yet, then read its records."""
    instance = _instance(request)
    topic = request.match_info["topic"]
    manager = _manager(request)
    if topic not in instance.topics:
        if instance.manual or instance.pattern is not None:
            raise IllegalStateError("a v1 topic read needs an instance without assignment or pattern")
        if topic not in manager.reader.partition_counts():
            raise UnknownTopicError(f"Topic not found. ({topic})")
        await manager.subscribe(instance, [*instance.topics, topic], None)
    return await _read(request, topic=topic)


async def commit(request: web.Request) -> web.Response:
    """Commit, and answer what was committed: ``[{"topic", "partition", "consumed", "committed"}]``.
    Raises AuthorizationError (40301): no Read on a topic committed (nothing is committed)."""
    instance = _instance(request)
    body = await _body(request, optional=True)
    # a null list is an absent one: commit everything returned (as the document says)
    key = next((name for name in ("offsets", "partitions") if body.get(name) is not None), None)
    offsets = _offsets(body, key) if key is not None else None
    topics = (t for t, _ in (offsets if offsets is not None else instance.positions))
    _authorize_topics(request, Operation.READ, topics)
    committed = await _manager(request).commit(instance, offsets)
    return _reply(request, committed)


async def committed(request: web.Request) -> web.Response:
    """The group's committed offsets of these partitions (Describe on each topic). Raises
    AuthorizationError (40301)."""
    instance = _instance(request)
    partitions = parse_partitions(await _body(request))
    _authorize_topics(request, Operation.DESCRIBE, (topic for topic, _ in partitions))
    return _reply(request, {"offsets": _manager(request).committed(instance, partitions)})


def setup_routes(app: web.Application) -> None:
    """Register the consumer API's routes on ``app``."""
    app.router.add_post("/consumers/{group}", group_route(create_instance))
    app.router.add_delete(INSTANCE, group_route(delete_instance))
    app.router.add_post(INSTANCE + "/subscription", group_route(subscribe))
    app.router.add_get(INSTANCE + "/subscription", group_route(get_subscription))
    app.router.add_delete(INSTANCE + "/subscription", group_route(unsubscribe))
    app.router.add_post(INSTANCE + "/assignments", group_route(assign))
    app.router.add_get(INSTANCE + "/assignments", group_route(get_assignments))
    app.router.add_post(INSTANCE + "/positions", group_route(seek))
    app.router.add_post(INSTANCE + "/positions/beginning", group_route(seek_beginning))
    app.router.add_post(INSTANCE + "/positions/end", group_route(seek_end))
    app.router.add_get(INSTANCE + "/records", group_route(records))
    app.router.add_post(INSTANCE + "/offsets", group_route(commit))
    app.router.add_get(INSTANCE + "/offsets", group_route(committed))
    app.router.add_get(INSTANCE + "/topics/{topic}", group_route(read_topic_v1))
