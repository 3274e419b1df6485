"""The local log engine: segments, indexes and the partition log, in Kafka's on-disk layout.

Synchronous and thread-safe per partition; the broker calls it through ``asyncio.to_thread``.
See ``docs/design/0001-partition-log-api.md`` and ``docs/format-segments.md``.
"""

from tierlog.tiering.log.clock import Clock, ManualClock, SystemClock
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.leader_epoch import EpochEntry, LeaderEpochCache
from tierlog.tiering.log.partition_log import PartitionLog
from tierlog.tiering.log.types import AppendInfo, FileSlice, ProducerInfo, ReadResult, SegmentInfo

__all__ = [
    "PartitionLog",
    "LogConfig",
    "AppendInfo",
    "ProducerInfo",
    "ReadResult",
    "FileSlice",
    "SegmentInfo",
    "EpochEntry",
    "LeaderEpochCache",
    "Clock",
    "SystemClock",
    "ManualClock",
]
