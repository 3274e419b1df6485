"""Questions the REST consumer layer asks of its :class:`~.instance.PartitionReader`: whether a partition
exists, its bounds, and the first record at or after a time. Used by
:class:`~tierlog.service.groups.consumers.ConsumerManager` for seeks, resets and commits.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from tierlog.service.groups.instance import PartitionReader, TopicPartition
from tierlog.tiering.codec.batch import iter_records
from tierlog.wire.errors import UnknownPartitionError, UnknownTopicError

__all__ = ["check_partition", "first_record_at_or_after", "log_bounds"]


def check_partition(counts: Mapping[str, int], topic: str, partition: int) -> None:
    """Raises UnknownTopicError (40401) or UnknownPartitionError (40402) unless ``counts`` (the reader's
    partition counts) has ``partition`` of ``topic``."""
    if topic not in counts:
        raise UnknownTopicError(f"Topic not found. ({topic})")
    if not 0 <= partition < counts[topic]:
        raise UnknownPartitionError(f"Partition not found. (partition {partition} of topic {topic})")


async def log_bounds(reader: PartitionReader, tp: TopicPartition) -> tuple[int, int]:
    """``(log start offset, high watermark)`` of ``tp``, local or led by another broker."""
    bounds = reader.log_bounds(*tp)
    return await bounds if inspect.isawaitable(bounds) else bounds


async def first_record_at_or_after(
    reader: PartitionReader, tp: TopicPartition, batch_offset: int, timestamp: int
) -> int:
    """The offset of the first record at or after ``timestamp`` in the batch at ``batch_offset`` (the
    log's time index finds batches; Kafka answers records); ``batch_offset`` when none is."""
    result = await reader.read(tp[0], tp[1], batch_offset, 1, 0, 1)
    for header, record in iter_records(result.data):
        if header.is_control or record.offset < batch_offset:
            continue
        if record.timestamp >= timestamp:
            return record.offset
    return batch_offset
