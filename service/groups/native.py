"""The native group API: compact JSON calls a client library uses to be a group member.

``POST /native/v1/groups/{group}/join`` waits until the group's next generation forms and answers with the
member's assignment (the broker runs the assignor); ``heartbeat`` keeps the member alive and answers 409
with error code 40910 when the member must join again; ``sync`` re-reads the assignment of a generation;
``leave`` exits at once. Offsets are committed with the member id and generation, so a fenced member's
commit is refused (40911). Committed offsets follow Kafka's convention: the offset of the next record to
read. See docs/groups.md for the full reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tierlog.service.groups.consumer_config import parse_partitions
from tierlog.service.groups.coordination import Coordination
from tierlog.service.groups.coordinator import JoinResult
from tierlog.service.groups.lag import group_lag
from tierlog.service.groups.patterns import NO_TOPIC, compile_pattern, matching_topics
from tierlog.service.groups.routing import from_other_brokers, group_route
from tierlog.service.groups.state import CONSUMERS, COORDINATOR, require_ready
from tierlog.service.security import authz
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType
from tierlog.service.web.keys import BROKER
from tierlog.wire.errors import BadRequestError, InvalidRequestError
from tierlog.wire.native import GROUPS_PREFIX

__all__ = ["setup_routes"]

BASE = GROUPS_PREFIX


def _coordinator(request: web.Request) -> Coordination:
    require_ready(request)
    return request.app[COORDINATOR]


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise BadRequestError(f"malformed JSON body: {err}") from None
    if not isinstance(body, dict):
        raise BadRequestError("the request body must be a JSON object")
    return body


def _field(body: Mapping[str, Any], name: str, kind: type, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None and default is None:
        raise InvalidRequestError(f"missing field {name!r}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidRequestError(f"field {name!r} must be {kind.__name__}")
    return value


def _assignment(partitions: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in partitions]


def _join_body(result: JoinResult) -> dict[str, Any]:
    return {
        "group_id": result.group_id,
        "member_id": result.member_id,
        "generation": result.generation,
        "leader_id": result.leader_id,
        "protocol": result.protocol,
        "members": result.members,
        "assignment": _assignment(result.assignment),
    }


async def join(request: web.Request) -> web.Response:
    body = await _body(request)
    topics = _field(body, "topics", list, [])
    if not all(isinstance(t, str) for t in topics):
        raise InvalidRequestError("topics must be a list of strings")
    pattern = body.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise InvalidRequestError("pattern must be a string")
    strategy = body.get("strategy")
    if strategy is not None and not isinstance(strategy, str):
        raise InvalidRequestError("strategy must be a string")
    if pattern is not None and authz.is_enabled(request):
        topics, pattern = _readable_matches(request, pattern)
    result = await _coordinator(request).join(
        request.match_info["group"],
        _field(body, "member_id", str, ""),
        topics=topics,
        pattern=pattern,
        client_id=_field(body, "client_id", str, "tierlog-client"),
        session_timeout_ms=_field(body, "session_timeout_ms", int, 45_000),
        rebalance_timeout_ms=_field(body, "rebalance_timeout_ms", int, 300_000),
        strategy=strategy,
    )
    return web.json_response(_join_body(result))


def _readable_matches(request: web.Request, pattern: str) -> tuple[list[str], str | None]:
    """With security on, a pattern subscription resolved here over the topics the caller may Read (Kafka
    resolves patterns only over authorized topics), so an assignment never names a topic the member may not
    see: the topics, and the pattern to pass on (one matching nothing when no topic matches).

    Raises InvalidRequestError for a malformed pattern."""
    names = request.app[BROKER].cluster_view().partitions
    readable = matching_topics(
        compile_pattern(pattern),
        names,
        lambda name: authz.allowed(request, Operation.READ, ResourceType.TOPIC, name),
    )
    return (readable, None) if readable else ([], NO_TOPIC)


async def sync(request: web.Request) -> web.Response:
    body = await _body(request)
    partitions = _coordinator(request).assignment(
        request.match_info["group"], _field(body, "member_id", str), _field(body, "generation", int)
    )
    return web.json_response({"assignment": _assignment(partitions)})


async def heartbeat(request: web.Request) -> web.Response:
    body = await _body(request)
    _coordinator(request).heartbeat(
        request.match_info["group"], _field(body, "member_id", str), _field(body, "generation", int)
    )
    return web.Response(status=204)


async def leave(request: web.Request) -> web.Response:
    body = await _body(request)
    _coordinator(request).leave(request.match_info["group"], _field(body, "member_id", str))
    return web.Response(status=204)


async def commit(request: web.Request) -> web.Response:
    body = await _body(request)
    partitions = parse_partitions(body, "offsets")
    offsets: dict[tuple[str, int], tuple[int, str]] = {}
    for tp, entry in zip(partitions, body["offsets"], strict=True):
        offsets[tp] = (_field(entry, "offset", int), str(entry.get("metadata") or ""))
    if authz.is_enabled(request):
        for topic in dict.fromkeys(topic for topic, _ in partitions):
            authz.authorize(request, Operation.READ, ResourceType.TOPIC, topic)
    await _coordinator(request).commit(
        request.match_info["group"],
        offsets,
        member_id=_field(body, "member_id", str, ""),
        generation=_field(body, "generation", int, -1),
    )
    return web.Response(status=204)


async def fetch_committed(request: web.Request) -> web.Response:
    body = await _body(request)
    wanted = parse_partitions(body) if "partitions" in body else None
    secured = authz.is_enabled(request)
    if wanted is not None and secured:
        for topic in dict.fromkeys(topic for topic, _ in wanted):
            authz.authorize(request, Operation.DESCRIBE, ResourceType.TOPIC, topic)
    stored = _coordinator(request).committed(request.match_info["group"], wanted)
    keys = wanted if wanted is not None else sorted(stored)
    if wanted is None and secured:
        keys = [tp for tp in keys if authz.allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, tp[0])]
    return web.json_response(
        {
            "offsets": [
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "offset": stored[tp].offset if tp in stored else -1,
                    "metadata": stored[tp].metadata if tp in stored else "",
                }
                for tp in keys
            ]
        }
    )


async def list_groups(request: web.Request) -> web.Response:
    """Every group of the cluster the principal may Describe: this broker's, and those each other live
    broker coordinates. Describe on the Cluster lists every group (Kafka's ListGroups)."""
    coordinator = _coordinator(request)
    groups = [{"group_id": g, "state": coordinator.describe(g).state} for g in coordinator.group_ids()]
    for answer in await from_other_brokers(request):
        groups.extend(answer["groups"])
    if authz.is_enabled(request) and not authz.allowed(
        request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        groups = [
            g
            for g in groups
            if authz.allowed(request, Operation.DESCRIBE, ResourceType.GROUP, str(g["group_id"]))
        ]
    return web.json_response({"groups": sorted(groups, key=lambda g: str(g["group_id"]))})


async def describe_group(request: web.Request) -> web.Response:
    group_id = request.match_info["group"]
    description = _coordinator(request).describe(group_id)
    reader = request.app[CONSUMERS].reader
    return web.json_response(
        {
            "group_id": description.group_id,
            "state": description.state,
            "generation": description.generation,
            "protocol": description.protocol,
            "leader_id": description.leader_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "topics": m.topics,
                    "pattern": m.pattern,
                    "assignment": _assignment(m.assignment),
                }
                for m in description.members
            ],
            "lag": await group_lag(_coordinator(request), reader, group_id),
        }
    )


def setup_routes(app: web.Application) -> None:
    """Register the native group API on ``app``."""
    app.router.add_get(BASE, list_groups)
    app.router.add_get(BASE + "/{group}", group_route(describe_group))
    app.router.add_post(BASE + "/{group}/join", group_route(join))
    app.router.add_post(BASE + "/{group}/sync", group_route(sync))
    app.router.add_post(BASE + "/{group}/heartbeat", group_route(heartbeat))
    app.router.add_post(BASE + "/{group}/leave", group_route(leave))
    app.router.add_post(BASE + "/{group}/offsets/commit", group_route(commit))
    app.router.add_post(BASE + "/{group}/offsets/fetch", group_route(fetch_committed))
