"""OffsetForLeaderEpoch (key 23), v2 to v4: where a leader epoch ends in this partition's log, so a client
that read records of that epoch can tell whether they were truncated after a leader change (KIP-320).

The answer is the replication ``epochs`` route's, from :meth:`Partition.epoch_end_offset`: the largest
epoch at or below the one asked and its end offset (the log end offset for the current epoch), ``-1, -1``
when the epoch is newer than every epoch the log knows, or it knows none. The client's
``current_leader_epoch`` fences it (FENCED_LEADER_EPOCH when older than the partition's,
UNKNOWN_LEADER_EPOCH when newer).

Difference from Kafka: a broker running alone leads every partition in epoch 0 without recording epochs in
its logs, and nothing it wrote can be truncated; there epoch 0 ends at the log end offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.fetching.partitions import error_answer, leader_partition
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.topics.partition import Partition
from tierlog.wire.errors import TierlogError

__all__ = ["OFFSET_FOR_LEADER_EPOCH_KEY", "epoch_end"]

OFFSET_FOR_LEADER_EPOCH_KEY = 23


async def epoch_end(partition: Partition, epoch: int) -> tuple[int, int]:
    """``(largest epoch <= epoch, its end offset)`` in ``partition``'s log, ``(-1, -1)`` when undefined.
    Raises UnknownTopicError (the topic was deleted)."""
    return await partition.epoch_end_offset(epoch)


@api(OFFSET_FOR_LEADER_EPOCH_KEY, "OffsetForLeaderEpoch", 2, 4)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    topics = []
    for topic in body.topics:
        partitions = []
        refusal = request.refusal(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        for p in topic.partitions:
            answer: dict[str, Any] = {"partition": p.partition, "error_code": ErrorCode.none}
            try:
                if refusal is not None:
                    raise refusal
                partition = leader_partition(broker, topic.topic, p.partition, p.current_leader_epoch)
                answer["leader_epoch"], answer["end_offset"] = await epoch_end(partition, p.leader_epoch)
            except TierlogError as err:
                answer.update(error_answer(err))
            partitions.append(answer)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
