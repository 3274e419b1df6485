"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): KIP-848's consumer groups, whose members
get their partitions from the broker (:class:`~tierlog.service.groups.modern.ConsumerGroups` of the
group's shard), for clients that opt in (``group.protocol=consumer``).

Assignments travel as topic ids (the ids Metadata answers). A group is used through one protocol at a
time: a heartbeat to a group whose members use the classic protocol or the HTTP APIs answers
GROUP_ID_NOT_FOUND, as Kafka answers a group of another type (and JoinGroup to a consumer group
INCONSISTENT_GROUP_PROTOCOL). ACLs as Kafka's: Read on the Group to heartbeat, Describe on the Group to
describe it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.cluster.view import ClusterView
from tierlog.service.groups.classic import GroupError
from tierlog.service.groups.modern import GroupView, Join
from tierlog.service.groups.reconciliation import Partitions, flatten
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.groups.common import (
    Operation,
    Refused,
    code_of,
    coordinating_shard,
    millis,
)
from tierlog.service.kafka.handlers.groups.membership import has_http_members
from tierlog.service.kafka.messages import ErrorCode

__all__: list[str] = []

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69
CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1's member_type of a KIP-848 member
NOT_REQUESTED = -(2**31)


def _owned(view: ClusterView, topics: Any) -> Partitions | None:
    """The owned partitions of a heartbeat, by name (ids of topics gone are left out)."""
    if topics is None:
        return None
    out: set[tuple[str, int]] = set()
    for t in topics:
        name = view.topic_by_id(t.topic_id)
        if name is not None:
            out.update((name, p) for p in t.partitions)
    return frozenset(out)


def _by_id(view: ClusterView, partitions: Partitions) -> list[dict[str, Any]]:
    return [
        {"topic_id": view.topic_uuid(topic), "partitions": parts}
        for topic, parts in flatten(partitions).items()
    ]


def _error(code: int, message: str, member_id: str) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "member_id": member_id,
        "member_epoch": -1,
        "heartbeat_interval": 0,
    }


@api(CONSUMER_GROUP_HEARTBEAT_KEY, "ConsumerGroupHeartbeat", 0, 1)
async def heartbeat(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    group_id: str = body.group_id
    view = request.broker.cluster_view()
    try:
        shard = await coordinating_shard(request, group_id, Operation.READ)
        if shard.classic.active(group_id) or has_http_members(shard, group_id):
            raise GroupError(ErrorCode.group_id_not_found.value, f"Group {group_id} is not a consumer group.")
        if request.version >= 1 and not body.member_id:
            raise GroupError(ErrorCode.invalid_request.value, "MemberId can't be empty.")
        topics = body.subscribed_topic_names
        join = Join(
            member_id=body.member_id,
            member_epoch=body.member_epoch,
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=millis(body.rebalance_timeout),
            topics=None if topics is None else tuple(topics),
            regex=getattr(body, "subscribed_topic_regex", None),
            assignor=body.server_assignor,
            owned=_owned(view, body.topic_partitions),
            client_id=request.header.client_id or "",
            client_host=request.peer[0],
        )
        answer = shard.consumer.heartbeat(group_id, join)
    except (Refused, GroupError) as err:
        return _error(code_of(err), str(err) if isinstance(err, GroupError) else "", body.member_id)
    out: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": shard.consumer.heartbeat_interval_ms,
    }
    if answer.assignment is not None:
        out["assignment"] = {"topic_partitions": _by_id(view, answer.assignment)}
    return out


def _assignment(view: ClusterView, partitions: Partitions) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": view.topic_uuid(topic), "topic_name": topic, "partitions": parts}
            for topic, parts in flatten(partitions).items()
        ]
    }


def _described(view: ClusterView, group_id: str, group: GroupView) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "group_id": group_id,
        "group_state": group.state,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor,
        "authorized_operations": NOT_REQUESTED,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.topics),
                "subscribed_topic_regex": m.regex,
                "assignment": _assignment(view, m.assigned),
                "target_assignment": _assignment(view, m.target),
                "member_type": CONSUMER_MEMBER,
            }
            for m in group.members
        ],
    }


async def _describe_one(request: KafkaRequest, group_id: str) -> dict[str, Any]:
    failed = {"group_id": group_id, "group_state": "", "group_epoch": -1, "assignment_epoch": -1}
    try:
        shard = await coordinating_shard(request, group_id, Operation.DESCRIBE)
    except Refused as err:
        return {**failed, "error_code": err.code, "assignor_name": "", "members": []}
    group = shard.consumer.describe(group_id)
    if group is None:
        message = f"Group {group_id} is not a consumer group."
        if not shard.kafka_active(group_id) and not has_http_members(shard, group_id):
            message = f"Group {group_id} not found."
        return {
            **failed,
            "error_code": ErrorCode.group_id_not_found,
            "error_message": message,
            "assignor_name": "",
            "members": [],
        }
    return _described(request.broker.cluster_view(), group_id, group)


@api(CONSUMER_GROUP_DESCRIBE_KEY, "ConsumerGroupDescribe", 0, 1)
async def describe(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    return {"throttle_time": 0, "groups": [await _describe_one(request, g) for g in body.group_ids]}
