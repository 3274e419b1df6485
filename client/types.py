"""The values a client hands back: record metadata, consumed records, topic partitions, offsets.

Names and fields follow kafka-python's so code written against it reads the same. Offsets and timestamps are
Kafka's: a committed offset is the offset of the next record to read; timestamps are ms since the epoch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "Headers",
    "TopicPartition",
    "RecordMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
]

CREATE_TIME = 0
LOG_APPEND_TIME = 1

Headers = tuple[tuple[str, bytes | None], ...]


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record was stored.

    ``offset`` is -1 with ``acks=0`` (the broker answers before it assigns offsets). ``timestamp`` is the
    record's create time, or the broker's append time for a LogAppendTime topic. A named tuple, as in
    kafka-python and aiokafka: immutable, and a third of the cost of a frozen dataclass to build (the
    producer builds one per acknowledged record).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One consumed record. ``timestamp_type`` is :data:`CREATE_TIME` (0) or :data:`LOG_APPEND_TIME` (1).

    ``key`` and ``value`` are ``bytes`` (or None), or what the consumer's deserializers made of them;
    ``headers`` a tuple of ``(key, value)`` pairs. A named tuple, as kafka-python's: immutable (make a
    changed copy with ``record._replace(value=...)``) and cheap to build. The compiled codec builds the
    consumer's records and takes them off the cyclic garbage collector's watch (they hold only strings,
    numbers, bytes and tuples); as slotted dataclasses with a headers list, the collector walked every
    record a consumer held on each pass, more than a third of a 100-byte consumer's time here.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Headers


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next offset to read) and the free-text metadata stored with it."""

    offset: int
    metadata: str


class OffsetAndTimestamp(NamedTuple):
    """The answer of ``offsets_for_times``: the first offset at or after a time, and that batch's time."""

    offset: int
    timestamp: int
