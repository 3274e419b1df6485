"""Fill an archive the way the broker's uploader does, for tests that must not depend on a broker.

Records are appended to a real :class:`tierlog.tiering.log.PartitionLog` (so segments, ``.index`` and
``.timeindex`` are the log engine's own files), every sealed segment is uploaded under a fresh UUID in
the bucket layout of :mod:`tierlog.tiering.remote.layout`, and the manifest goes through the KIP-405 states
with :class:`ManifestStore` (``copy_started`` before the objects, ``copy_finished`` after), exactly the order
the uploader follows.

A partition's ``layout`` says how its indexes go up: ``"packed"`` (the default, what the uploader
writes) puts one ``.indexes`` object (:func:`tierlog.tiering.remote.packed_indexes.pack`) and records its
sizes in the manifest entry; ``"separate"`` puts the ``.index`` and ``.timeindex`` objects of uploads
before the packed layout, with no ``indexes`` in the entry.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from tierlog.tiering.codec import Compression, Record, build_batch
from tierlog.tiering.log import LogConfig, PartitionLog, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore

IndexLayout = Literal["packed", "separate"]
INDEX_LAYOUTS: tuple[IndexLayout, ...] = ("packed", "separate")


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
    layout: IndexLayout = "packed"

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
                new.append(
                    await upload_segment(
                        store, manifests, self.topic, self.partition, info, layout=self.layout
                    )
                )
        self.uploaded.extend(new)
        return new


def open_partition(
    root: Path, topic: str, partition: int, *, segment_bytes: int, layout: IndexLayout = "packed"
) -> ArchivedPartition:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256, flush_messages=2**62)
    log = PartitionLog.open(root / f"{topic}-{partition}", config, topic=topic, partition=partition)
    return ArchivedPartition(topic, partition, log, layout=layout)


def _read_indexes(info: SegmentInfo) -> tuple[bytes, bytes]:
    return info.index_path.read_bytes(), info.timeindex_path.read_bytes()


async def upload_segment(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    info: SegmentInfo,
    *,
    layout: IndexLayout = "packed",
) -> mf.RemoteSegment:
    """Upload one sealed segment with its indexes in ``layout`` and commit it to the manifest, in the
    uploader's order (the indexes only once the ``.log`` is stored)."""
    packed, sizes = None, None
    if layout == "packed":  # read before the first commit, as the uploader does: the entry holds the sizes
        offset_index, time_index = await asyncio.to_thread(_read_indexes, info)
        packed, sizes = packed_indexes.pack(offset_index, time_index), (len(offset_index), len(time_index))
    segment = mf.RemoteSegment(
        base_offset=info.base_offset,
        last_offset=info.next_offset - 1,
        max_timestamp=info.max_timestamp,
        size_bytes=info.size_bytes,
        segment_uuid=uuid.uuid4(),
        state=mf.SegmentState.COPY_STARTED,
        created_ms=int(time.time() * 1000),
        indexes=sizes,
    )
    await manifests.update(topic, partition, lambda m: mf.add_segment(m, segment))
    keys = segment_keys(topic, partition, info.base_offset, segment.segment_uuid)
    await store.put_file(keys["log"], info.log_path)
    if packed is not None:
        await store.put(keys["indexes"], packed)
    else:
        await store.put_file(keys["index"], info.index_path)
        await store.put_file(keys["timeindex"], info.timeindex_path)
    uid = segment.segment_uuid
    await manifests.update(topic, partition, lambda m: mf.transition(m, uid, mf.SegmentState.COPY_FINISHED))
    return replace(segment, state=mf.SegmentState.COPY_FINISHED)
