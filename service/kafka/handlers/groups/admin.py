"""ListGroups (16), DescribeGroups (15) and DeleteGroups (42) over every group this broker coordinates:
Kafka-protocol groups and the groups of the HTTP APIs alike (their members described with ``consumer``
protocol subscriptions and assignments, as a Kafka consumer would show them). Authorized operations are
not computed: DescribeGroups answers Kafka's "not requested" value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.groups.consumer_protocol import encode_assignment, encode_subscription
from tierlog.service.groups.shards import Shard
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.groups.common import Operation, Refused, coordinating_shard, shards_of
from tierlog.service.kafka.handlers.groups.membership import has_http_members
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import CLUSTER_NAME, ResourceType
from tierlog.wire.errors import UnknownGroupError

__all__: list[str] = []

DESCRIBE_GROUPS_KEY = 15
LIST_GROUPS_KEY = 16
DELETE_GROUPS_KEY = 42
CONSUMER = "consumer"
CLASSIC = "classic"  # the group types of KIP-848's ListGroups v5
NOT_REQUESTED = -(2**31)  # authorized operations not computed


def _summary(shard: Shard, group_id: str) -> tuple[str, str]:
    """``(state, protocol type)`` of a group this shard knows."""
    modern = shard.consumer.describe(group_id)
    if modern is not None:
        return modern.state, CONSUMER
    described = shard.classic.describe(group_id)
    if described is not None:
        return described[0].value, described[1]
    try:
        return shard.coordinator.describe(group_id).state, CONSUMER
    except UnknownGroupError:
        return "Dead", ""


@api(LIST_GROUPS_KEY, "ListGroups", 0, 5)
async def list_groups(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    try:
        shards = shards_of(request)
    except Refused as err:
        return {"throttle_time": 0, "error_code": err.code, "groups": []}
    # Describe on the cluster lists every group; otherwise only those the principal may describe
    everything = request.granted(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    listed = []
    for shard in shards.loaded().values():
        if shard.stale:
            continue
        known = {*shard.coordinator.group_ids(), *shard.classic.group_ids(), *shard.consumer.group_ids()}
        for group_id in sorted(known):
            if not everything and not request.granted(Operation.DESCRIBE, ResourceType.GROUP, group_id):
                continue
            state, protocol_type = _summary(shard, group_id)
            group_type = CONSUMER if shard.consumer.active(group_id) else CLASSIC
            if (states and state.lower() not in states) or (types and group_type not in types):
                continue
            listed.append(
                {
                    "group_id": group_id,
                    "protocol_type": protocol_type,
                    "group_state": state,
                    "group_type": group_type,
                }
            )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": listed}


def _describe(shard: Shard, group_id: str) -> dict[str, Any]:
    base = {"error_code": ErrorCode.none, "group_id": group_id, "authorized_operations": NOT_REQUESTED}
    if shard.consumer.active(group_id):  # Kafka's answer; clients describe it with ConsumerGroupDescribe
        return {
            **base,
            "error_code": ErrorCode.group_id_not_found,
            "error_message": f"Group {group_id} is not a classic group.",
            "group_state": "",
            "members": [],
        }
    described = shard.classic.describe(group_id)
    if described is not None:
        state, protocol_type, protocol, members = described
        return {
            **base,
            "group_state": state.value,
            "protocol_type": protocol_type,
            "protocol_data": protocol,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata,
                    "member_assignment": m.assignment,
                }
                for m in members
            ],
        }
    try:
        group = shard.coordinator.describe(group_id)
    except UnknownGroupError:
        return {**base, "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": []}
    return {
        **base,
        "group_state": group.state,
        "protocol_type": CONSUMER if group.members else "",
        "protocol_data": group.protocol if group.members else "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": None,
                "client_id": m.client_id,
                "client_host": "",
                "member_metadata": encode_subscription(m.topics),
                "member_assignment": encode_assignment(m.assignment),
            }
            for m in group.members
        ],
    }


@api(DESCRIBE_GROUPS_KEY, "DescribeGroups", 0, 5)
async def describe_groups(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    groups = []
    for group_id in body.groups:
        try:
            shard = await coordinating_shard(request, group_id, Operation.DESCRIBE)
        except Refused as err:
            groups.append({"error_code": err.code, "group_id": group_id, "group_state": "", "members": []})
            continue
        groups.append(_describe(shard, group_id))
    return {"throttle_time": 0, "groups": groups}


async def _delete(request: KafkaRequest, group_id: str) -> int:
    try:
        shard = await coordinating_shard(request, group_id, Operation.DELETE)
    except Refused as err:
        return err.code
    if shard.kafka_active(group_id) or has_http_members(shard, group_id):
        return ErrorCode.non_empty_group.value
    if group_id not in shard.coordinator.group_ids():
        return ErrorCode.group_id_not_found.value
    committed = list(shard.coordinator.committed(group_id))
    if committed:
        await shard.store.delete(group_id, committed)
    shard.coordinator.forget(group_id)
    shard.classic.forget(group_id)
    return ErrorCode.none.value


@api(DELETE_GROUPS_KEY, "DeleteGroups", 0, 2)
async def delete_groups(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    results = [{"group_id": g, "error_code": await _delete(request, g)} for g in body.groups_names]
    return {"throttle_time": 0, "results": results}
