"""Fill an archive the way the broker's uploader does, for tests that must not depend on a broker.

Records are appended to a real :class:`tierlog.tiering.log.PartitionLog` (so segments, ``.index`` and
``.timeindex`` are the log engine's own files), every sealed segment is uploaded under a fresh UUID in
the bucket layout of :mod:`tierlog.tiering.remote.layout`, and the manifest goes through the KIP-405 states
with :class:`ManifestStore` (``copy_started`` before the objects, ``copy_finished`` after), exactly the order
the uploader follows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.tiering.codec import Compression, Record, build_batch
from tierlog.tiering.log import LogConfig, PartitionLog, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.store import ObjectStore


@dataclass(frozen=True)
class Produced:
    """One record as produced, with the offset and timestamp the log gave it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class ArchivedPartition:
    """A partition log on disk whose sealed segments can be archived, and what it holds."""

    topic: str
    partition: int
    log: PartitionLog
    records: list[Produced] = field(default_factory=list)
    uploaded: list[mf.RemoteSegment] = field(default_factory=list)

    def append(
        self, records: Sequence[Record], *, compression: Compression = Compression.NONE, per_batch: int = 5
    ) -> None:
        """Append ``records`` in batches of ``per_batch`` with the log assigning offsets."""
        for i in range(0, len(records), per_batch):
            chunk = records[i : i + per_batch]
            info = self.log.append(build_batch(chunk, compression=compression))
            for offset, record in zip(range(info.base_offset, info.last_offset + 1), chunk, strict=True):
                self.records.append(
                    Produced(
                        self.topic,
                        self.partition,
                        offset,
                        record.key,
                        record.value,
                        record.timestamp,
                        tuple(record.headers),
                    )
                )

    async def upload_sealed(self, store: ObjectStore, manifests: ManifestStore) -> list[mf.RemoteSegment]:
        """Roll the active segment, then upload every sealed segment not uploaded yet, in offset order."""
        self.log.roll()
        done = {s.base_offset for s in self.uploaded}
        new = []
        for info in self.log.sealed_segments():
            if info.base_offset not in done:
                new.append(await upload_segment(store, manifests, self.topic, self.partition, info))
        self.uploaded.extend(new)
        return new


def open_partition(root: Path, topic: str, partition: int, *, segment_bytes: int) -> ArchivedPartition:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256, flush_messages=2**62)
    log = PartitionLog.open(root / f"{topic}-{partition}", config, topic=topic, partition=partition)
    return ArchivedPartition(topic, partition, log)


async def upload_segment(
    store: ObjectStore, manifests: ManifestStore, topic: str, partition: int, info: SegmentInfo
) -> mf.RemoteSegment:
    """Upload one sealed segment and commit it to the manifest, in the uploader's order."""
    segment = mf.RemoteSegment(
        base_offset=info.base_offset,
        last_offset=info.next_offset - 1,
        max_timestamp=info.max_timestamp,
        size_bytes=info.size_bytes,
        segment_uuid=uuid.uuid4(),
        state=mf.SegmentState.COPY_STARTED,
        created_ms=int(time.time() * 1000),
    )
    await manifests.update(topic, partition, lambda m: mf.add_segment(m, segment))
    keys = segment_keys(topic, partition, info.base_offset, segment.segment_uuid)
    await store.put_file(keys["log"], info.log_path)
    await store.put_file(keys["index"], info.index_path)
    await store.put_file(keys["timeindex"], info.timeindex_path)
    uid = segment.segment_uuid
    await manifests.update(topic, partition, lambda m: mf.transition(m, uid, mf.SegmentState.COPY_FINISHED))
    return mf.RemoteSegment(
        segment.base_offset,
        segment.last_offset,
        segment.max_timestamp,
        segment.size_bytes,
        uid,
        mf.SegmentState.COPY_FINISHED,
        segment.created_ms,
    )
