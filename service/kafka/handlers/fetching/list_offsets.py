"""ListOffsets (key 2), v1 to v10: an offset of each partition by a timestamp, with the native ``offsets``
route's semantics (committed records only).

Timestamps: -2 the log start offset (the remote tier's when it holds data), -1 the high watermark (the
last stable offset too: no transactions yet, so ``isolation_level`` changes nothing), -3 (v7+) the batch
holding the largest timestamp of the local log, -4 (v8+, KIP-1005) the local log start offset, -5 (v9+,
KIP-1005) the last offset uploaded to the remote tier (-1 when none is, or the topic is not tiered), or a
time in ms: the first committed batch whose max timestamp is at or after it (-1 when none is). v10's
``timeout`` is accepted; every lookup here answers without waiting on the remote tier's uploads.

Difference from Kafka: lookups by time (and -3) have batch granularity, as the native route's: the offset
is the base offset of the batch that holds the record and the timestamp that batch's max timestamp (Kafka
finds the record inside the batch). Clients that seek to it read a few records before the one asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.fetching.partitions import error_answer, leader_partition
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.topics.partition import Partition
from tierlog.wire.errors import TierlogError

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "LATEST_TIERED",
    "LIST_OFFSETS_KEY",
    "MAX_TIMESTAMP",
    "offset_for",
]

LIST_OFFSETS_KEY = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
# the version from which each special timestamp exists
SINCE = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
NOT_FOUND = (-1, -1)


async def offset_for(partition: Partition, timestamp: int) -> tuple[int, int]:
    """``(offset, timestamp)`` of ``partition`` for a ListOffsets ``timestamp`` (a special value above or a
    time in ms), ``(-1, -1)`` when there is none. Raises UnknownTopicError, and what the remote tier's
    index lookups raise (UnavailableError, CorruptRecordError)."""
    if timestamp == EARLIEST:
        return partition.log_start_offset, -1
    if timestamp == LATEST:
        return partition.high_watermark, -1
    if timestamp == EARLIEST_LOCAL:
        return partition.local_log_start_offset, -1
    if timestamp == LATEST_TIERED:
        remote = partition.remote
        uploaded = None if remote is None else remote.remote_log.remote_next_offset
        return (uploaded - 1 if uploaded else -1), -1
    if timestamp == MAX_TIMESTAMP:
        segments = await asyncio.to_thread(partition.log.segments)
        largest = max((s.max_timestamp for s in segments), default=-1)
        if largest < 0:
            return NOT_FOUND
        timestamp = largest
    found = await partition.offset_for_timestamp(timestamp)
    if found is None or found[0] >= partition.high_watermark:
        return NOT_FOUND  # none, or not committed yet: consumers cannot read it
    return found


async def _leader_epoch(partition: Partition, timestamp: int, offset: int) -> int:
    """The leader epoch that wrote ``offset`` (the current one for the latest offset); -1 when unknown."""
    if offset < 0:
        return -1
    if timestamp == LATEST:
        return partition.leader_epoch
    epoch = await asyncio.to_thread(partition.log.epochs.epoch_for, offset)
    return -1 if epoch is None else int(epoch)


@api(LIST_OFFSETS_KEY, "ListOffsets", 1, 10)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    version = request.version
    topics = []
    for topic in body.topics:
        partitions = []
        refusal = request.refusal(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            answer: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.none}
            if refusal is not None:
                answer.update(error_answer(refusal))
                partitions.append(answer)
                continue
            if p.timestamp < 0 and SINCE.get(p.timestamp, version + 1) > version:
                answer["error_code"] = ErrorCode.invalid_request
                partitions.append(answer)
                continue
            try:
                partition = leader_partition(
                    broker, topic.name, p.partition_index, getattr(p, "current_leader_epoch", -1)
                )
                offset, at = await offset_for(partition, p.timestamp)
                epoch = await _leader_epoch(partition, p.timestamp, offset)
                answer.update(offset=offset, timestamp=at, leader_epoch=epoch)
            except TierlogError as err:
                answer.update(error_answer(err))
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
