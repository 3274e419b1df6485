"""One ``__consumer_offsets`` partition as a committed-offset store writes, compacts and replays it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from tierlog.service.groups.offsets import LogOffsetStore
from tierlog.service.topics.partition import Partition
from tierlog.tiering.codec.header import iter_batches
from tierlog.wire.errors import UnavailableError, UnknownTopicError

__all__ = ["PartitionOffsetLog", "restore_offsets", "REPLAY_CHUNK"]

REPLAY_CHUNK = 4 * 2**20


OFFSETS_COMMIT_TIMEOUT_MS = 5000  # Kafka's offsets.commit.timeout.ms


class PartitionOffsetLog:
    """A ``__consumer_offsets`` partition behind :class:`~tierlog.service.groups.offsets.OffsetLog`.

    ``partition`` is ``None`` until the partition is open here; every call then raises UnavailableError
    (503, retriable).
    """

    def __init__(self, partition: Partition | None = None) -> None:
        self.partition = partition

    def _open(self) -> Partition:
        if self.partition is None:
            raise UnavailableError("consumer groups are not ready: committed offsets are being restored")
        return self.partition

    async def append(self, batch: bytes) -> int:
        """Append a commit with acks=all (Kafka's ``offsets.commit.required.acks=-1``), answering once the
        in-sync replicas hold it, within ``offsets.commit.timeout.ms``' default of 5 s."""
        return (await self._open().append(batch, acks=-1, timeout_ms=OFFSETS_COMMIT_TIMEOUT_MS)).base_offset

    async def roll(self) -> None:
        await asyncio.to_thread(self._open().log.roll)

    async def drop_before(self, offset: int) -> None:
        await asyncio.to_thread(
            self._open().log.apply_retention,
            lambda segment: segment.next_offset > offset,
            retention_ms=-1,
            retention_bytes=0,
        )

    async def end_offset(self) -> int:
        return self._open().log_end_offset


async def restore_offsets(partition: Partition, store: LogOffsetStore) -> int:
    """Replay one ``__consumer_offsets`` partition into ``store``; returns the commit records applied.

    Raises:
        CorruptRecordError: a stored batch or commit record is corrupt.
        UnknownTopicError: the partition was closed meanwhile (leadership moved, or shutdown).
    """
    chunks: list[bytes] = []
    # Up to the log end, not the high watermark (Kafka's coordinator loads to the log end too): a newly
    # elected leader's high watermark trails its log end until its followers fetch again, and the commits
    # in between were acknowledged by the previous leader.
    offset = partition.local_log_start_offset
    while offset < partition.log_end_offset:
        if partition.closed:
            raise UnknownTopicError(f"{partition.label} was closed while its offsets were being restored")
        result = await asyncio.to_thread(partition.log.read, offset, REPLAY_CHUNK)
        if not result.data:
            break
        chunks.append(result.data)
        for _, header in iter_batches(result.data, verify=False):
            offset = header.next_offset

    def batches() -> Iterator[bytes]:
        yield from chunks

    return store.replay(batches())
