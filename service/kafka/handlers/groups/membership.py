"""JoinGroup (11), SyncGroup (14), Heartbeat (12) and LeaveGroup (13): Kafka's classic group protocol with
client-side assignment, on :class:`~tierlog.service.groups.classic.ClassicGroups` of the group's shard.

A group is used through one protocol at a time: a Kafka join to a group with members that joined over the
HTTP APIs answers INCONSISTENT_GROUP_PROTOCOL (and the reverse, see
:class:`~tierlog.service.groups.shards.CoordinatorShards`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.groups.classic import INCONSISTENT_GROUP_PROTOCOL, GroupError
from tierlog.service.groups.shards import Shard
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.groups.common import (
    Operation,
    Refused,
    code_of,
    coordinating_shard,
    millis,
)
from tierlog.service.kafka.messages import ErrorCode
from tierlog.wire.errors import UnknownGroupError

__all__ = ["has_http_members"]

JOIN_GROUP_KEY = 11
HEARTBEAT_KEY = 12
LEAVE_GROUP_KEY = 13
SYNC_GROUP_KEY = 14
FIRST_JOIN_NEEDS_MEMBER_ID = 4  # JoinGroup v4+: MEMBER_ID_REQUIRED on a first join (KIP-394)


def has_http_members(shard: Shard, group_id: str) -> bool:
    """Whether ``group_id`` has members that joined through the HTTP APIs."""
    try:
        return bool(shard.coordinator.describe(group_id).members)
    except UnknownGroupError:
        return False


@api(JOIN_GROUP_KEY, "JoinGroup", 0, 9)
async def join_group(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    group_id: str = body.group_id
    session_ms = millis(body.session_timeout)
    try:
        shard = await coordinating_shard(request, group_id, Operation.READ)
        if has_http_members(shard, group_id):
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "the group's members use the HTTP APIs")
        if shard.consumer.active(group_id):
            raise GroupError(INCONSISTENT_GROUP_PROTOCOL, "the group's members use the consumer protocol")
        answer = await shard.classic.join(
            group_id,
            body.member_id,
            instance_id=getattr(body, "group_instance_id", None),
            protocol_type=body.protocol_type,
            protocols=[(p.name, p.metadata) for p in body.protocols],
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=millis(getattr(body, "rebalance_timeout", None), session_ms),
            client_id=request.header.client_id or "",
            client_host=request.peer[0],
            require_known_member_id=request.version >= FIRST_JOIN_NEEDS_MEMBER_ID,
        )
    except (Refused, GroupError) as err:
        return {
            "throttle_time": 0,
            "error_code": code_of(err),
            "generation_id": -1,
            "protocol_name": None if request.version >= 7 else "",
            "leader": "",
            "member_id": err.member_id if isinstance(err, GroupError) and err.member_id else body.member_id,
            "members": [],
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "generation_id": answer.generation,
        "protocol_type": answer.protocol_type,
        "protocol_name": answer.protocol,
        "leader": answer.leader_id,
        "member_id": answer.member_id,
        "members": [
            {"member_id": m, "group_instance_id": instance, "metadata": metadata}
            for m, instance, metadata in answer.members
        ],
    }


@api(SYNC_GROUP_KEY, "SyncGroup", 0, 5)
async def sync_group(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    try:
        shard = await coordinating_shard(request, body.group_id, Operation.READ)
        protocol_type, protocol, assignment = await shard.classic.sync(
            body.group_id,
            body.member_id,
            body.generation_id,
            instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol=getattr(body, "protocol_name", None),
            assignments=[(a.member_id, a.assignment) for a in body.assignments],
        )
    except (Refused, GroupError) as err:
        return {"throttle_time": 0, "error_code": code_of(err), "assignment": b""}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "protocol_type": protocol_type,
        "protocol_name": protocol,
        "assignment": assignment,
    }


@api(HEARTBEAT_KEY, "Heartbeat", 0, 4)
async def heartbeat(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    try:
        shard = await coordinating_shard(request, body.group_id, Operation.READ)
        shard.classic.heartbeat(
            body.group_id, body.member_id, body.generation_id, getattr(body, "group_instance_id", None)
        )
    except (Refused, GroupError) as err:
        return {"throttle_time": 0, "error_code": code_of(err)}
    return {"throttle_time": 0, "error_code": ErrorCode.none}


@api(LEAVE_GROUP_KEY, "LeaveGroup", 0, 5)
async def leave_group(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    members = getattr(body, "members", None)
    if request.version < 3 or members is None:
        leaving = [(body.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in members]
    try:
        shard = await coordinating_shard(request, body.group_id, Operation.READ)
    except Refused as err:
        return {"throttle_time": 0, "error_code": err.code, "members": []}
    answers = []
    for member_id, instance_id in leaving:
        try:
            shard.classic.leave(body.group_id, member_id, instance_id)
            code: int = ErrorCode.none.value
        except GroupError as err:
            code = err.code
        answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": code})
    top = answers[0]["error_code"] if request.version < 3 else ErrorCode.none.value
    return {"throttle_time": 0, "error_code": top, "members": answers}
