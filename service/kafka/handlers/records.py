"""DeleteRecords (key 21): move partitions' log start offsets up, as Kafka's ``deleteRecords`` does.

Each partition is served by its leader (another broker's answers NOT_LEADER_OR_FOLLOWER, so the admin
client re-routes) with :meth:`Partition.delete_records_before`: the records before the offset are no
longer read and the segments wholly below it are deleted at once. The offset -1 means the high
watermark; an offset past the high watermark (or another negative one) answers OFFSET_OUT_OF_RANGE.
``low_watermark`` is the leader's new log start offset: followers move theirs on their next fetch, so
the answer does not wait for them (Kafka's answer waits until every replica has; ours may come before a
follower caught up, which matters only if it takes over in between). The ACL is Kafka's: DELETE on the
topic. Internal topics are refused (INVALID_TOPIC_EXCEPTION), as Kafka refuses them; a partition whose
remote tier holds data answers INVALID_REQUEST (docs/kafka-protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.fetching.partitions import leader_partition
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.wire.errors import TierlogError

__all__ = ["DELETE_RECORDS_KEY"]

DELETE_RECORDS_KEY = 21
_NO_WATERMARK = -1


def _partition(index: int, code: int | ErrorCode, low_watermark: int = _NO_WATERMARK) -> dict[str, Any]:
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": code}


async def _delete(request: KafkaRequest, topic: str, index: int, offset: int) -> dict[str, Any]:
    if topic.startswith("__"):
        return _partition(index, ErrorCode.invalid_topic_exception)
    try:
        partition = leader_partition(request.broker, topic, index, -1)
        return _partition(index, ErrorCode.none, await partition.delete_records_before(offset))
    except TierlogError as err:
        return _partition(index, err.kafka_error().code)


@api(DELETE_RECORDS_KEY, "DeleteRecords", 0, 2)
async def delete_records(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    topics = []
    for topic in body.topics:
        if not request.allowed(Operation.DELETE, ResourceType.TOPIC, topic.name):
            refused = ErrorCode.topic_authorization_failed
            partitions = [_partition(p.partition_index, refused) for p in topic.partitions]
        else:
            partitions = [
                await _delete(request, topic.name, p.partition_index, p.offset) for p in topic.partitions
            ]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
