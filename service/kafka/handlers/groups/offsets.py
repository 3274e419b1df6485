"""OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47): a group's committed offsets, in the same store
as the HTTP APIs' (a commit through one door is read through the other).

A commit from a member is checked against the Kafka-protocol group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS while the leader's assignment is awaited); a simple commit
(generation -1, no member id) is allowed while the group has no members, through either door. In a
KIP-848 consumer group the generation is the member epoch (v9+; UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH,
UNSUPPORTED_VERSION below v9), and a v9 OffsetFetch naming a member is checked the same way. Leader
epochs are not stored: OffsetFetch answers -1 for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.groups.assignors import TopicPartition
from tierlog.service.groups.classic import GroupError
from tierlog.service.groups.shards import Shard
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.groups.common import Operation, Refused, code_of, coordinating_shard
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import ResourceType
from tierlog.wire.errors import TierlogError

__all__: list[str] = []

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
OFFSET_DELETE_KEY = 47
MAX_METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes default
BATCHED_FETCH = 8  # OffsetFetch v8+: many groups per request
MEMBER_EPOCHS = 9  # OffsetCommit v9+: KIP-848 members commit with their member epoch


def _check_member(request: KafkaRequest, shard: Shard, group_id: str, body: Any) -> bool:
    """Whether an OffsetCommit comes from a member (else it is a simple commit). Raises GroupError."""
    generation = body.generation_id_or_member_epoch
    if shard.consumer.active(group_id):
        asked = frozenset((t.name, p.partition_index) for t in body.topics for p in t.partitions)
        member = shard.consumer.check_commit(group_id, body.member_id, generation, asked)
        if member and request.version < MEMBER_EPOCHS:
            raise GroupError(
                ErrorCode.unsupported_version.value,
                "OffsetCommit version 9 or above must be used by members using the consumer group protocol",
            )
        return member
    return shard.classic.check_commit(
        group_id, body.member_id, generation, getattr(body, "group_instance_id", None)
    )


def _partition_counts(request: KafkaRequest) -> dict[str, int]:
    return {name: len(parts) for name, parts in request.broker.cluster_view().partitions.items()}


def _topics_answer(codes: Mapping[TopicPartition, int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]


@api(OFFSET_COMMIT_KEY, "OffsetCommit", 2, 9)
async def offset_commit(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    group_id: str = body.group_id
    asked = [(t.name, p) for t in body.topics for p in t.partitions]
    codes: dict[TopicPartition, int] = {}
    try:
        shard = await coordinating_shard(request, group_id, Operation.READ)
        member = _check_member(request, shard, group_id, body)
        counts = _partition_counts(request)
        readable: dict[str, bool] = {}
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        for topic, p in asked:
            tp = (topic, p.partition_index)
            metadata = p.committed_metadata or ""
            if not readable.setdefault(topic, request.allowed(Operation.READ, ResourceType.TOPIC, topic)):
                codes[tp] = ErrorCode.topic_authorization_failed.value
            elif not 0 <= p.partition_index < counts.get(topic, 0):
                codes[tp] = ErrorCode.unknown_topic_or_partition.value
            elif len(metadata) > MAX_METADATA_CHARS:
                codes[tp] = ErrorCode.offset_metadata_too_large.value
            else:
                offsets[tp] = (max(p.committed_offset, 0), metadata)
                codes[tp] = ErrorCode.none.value
        if offsets:
            if member:
                await shard.store.commit(group_id, offsets, request.broker.clock.now_ms())
            else:  # a simple commit: the coordinator refuses it while HTTP members are in the group
                await shard.coordinator.commit(group_id, offsets)
    except (Refused, GroupError, TierlogError) as err:
        code = code_of(err)
        codes = {(topic, p.partition_index): code for topic, p in asked}
    return {"throttle_time": 0, "topics": _topics_answer(codes)}


def _fetch_group(shard: Shard, group_id: str, topics: Any) -> list[dict[str, Any]]:
    committed = shard.coordinator.committed(group_id)
    if topics is None:
        wanted = sorted(committed)
    else:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted:
        found = committed.get((topic, partition))
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": -1 if found is None else found.offset,
                "committed_leader_epoch": -1,
                "metadata": "" if found is None else found.metadata,
                "error_code": ErrorCode.none,
            }
        )
    return [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]


async def _one_group(
    request: KafkaRequest, group_id: str, topics: Any, member: tuple[str | None, int] = (None, -1)
) -> dict[str, Any]:
    try:
        shard = await coordinating_shard(request, group_id, Operation.DESCRIBE)
        member_id, member_epoch = member
        if member_id is not None and shard.consumer.active(group_id):
            shard.consumer.check_commit(group_id, member_id, member_epoch)
    except (Refused, GroupError) as err:
        failed = [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": err.code,
                    }
                    for p in t.partition_indexes
                ],
            }
            for t in topics or ()
        ]
        return {"group_id": group_id, "error_code": err.code, "topics": failed}
    answered = _fetch_group(shard, group_id, topics)
    described: dict[str, bool] = {}
    for topic in answered:
        name = topic["name"]
        if not described.setdefault(name, request.granted(Operation.DESCRIBE, ResourceType.TOPIC, name)):
            for partition in topic["partitions"]:
                partition.update(
                    committed_offset=-1, metadata="", error_code=ErrorCode.topic_authorization_failed
                )
    if topics is None:  # all of the group's topics: those the principal may not describe are left out
        answered = [t for t in answered if described[t["name"]]]
    return {"group_id": group_id, "error_code": ErrorCode.none, "topics": answered}


@api(OFFSET_FETCH_KEY, "OffsetFetch", 1, 9)
async def offset_fetch(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    if request.version >= BATCHED_FETCH:
        groups = [
            await _one_group(
                request, g.group_id, g.topics, (getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            )
            for g in body.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    found = await _one_group(request, body.group_id, body.topics)
    return {"throttle_time": 0, "error_code": found["error_code"], "topics": found["topics"]}


def _subscribed(shard: Shard, group_id: str) -> set[str] | None:
    """Topics the group's active members subscribe to; None: every topic (unknown subscriptions)."""
    if shard.consumer.active(group_id):
        return shard.consumer.subscribed_topics(group_id)
    if shard.classic.active(group_id):
        return shard.classic.subscribed_topics(group_id)
    topics: set[str] = set()
    try:
        members = shard.coordinator.describe(group_id).members
    except TierlogError:
        return topics
    for member in members:
        if member.pattern is not None:
            return None
        topics.update(member.topics)
    return topics


@api(OFFSET_DELETE_KEY, "OffsetDelete", 0, 0)
async def offset_delete(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    group_id: str = body.group_id
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        shard = await coordinating_shard(request, group_id, Operation.DELETE)
    except Refused as err:
        return {"throttle_time": 0, "error_code": err.code, "topics": []}
    if group_id not in shard.coordinator.group_ids() and not shard.kafka_active(group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_id_not_found, "topics": []}
    subscribed = _subscribed(shard, group_id)
    counts = _partition_counts(request)
    codes: dict[TopicPartition, int] = {}
    deletable: list[TopicPartition] = []
    for topic, partition in asked:
        if not request.allowed(Operation.READ, ResourceType.TOPIC, topic):
            codes[(topic, partition)] = ErrorCode.topic_authorization_failed.value
        elif not 0 <= partition < counts.get(topic, 0):
            codes[(topic, partition)] = ErrorCode.unknown_topic_or_partition.value
        elif subscribed is None or topic in subscribed:
            codes[(topic, partition)] = ErrorCode.group_subscribed_to_topic.value
        else:
            codes[(topic, partition)] = ErrorCode.none.value
            deletable.append((topic, partition))
    if deletable:
        await shard.store.delete(group_id, deletable)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "topics": _topics_answer(codes)}
