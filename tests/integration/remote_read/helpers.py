"""Test helpers of the remote read path: real partition logs written with :class:`PartitionLog`, uploaded to
a store the way the uploader lays them out (``put_file`` of the sealed ``.log`` and a packed ``.indexes``
object, or the older separate ``.index``/``.timeindex`` objects, under :func:`layout.segment_key`, then a
manifest committed with :class:`ManifestStore`), and the list of produced records as the reference model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, PartitionLog, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.layout import SegmentKind, segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.reader import RemoteReader

CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True)
class Produced:
    """One record as a consumer must see it."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass
class Partition:
    """A partition written locally, uploaded, with its reference model."""

    topic: str
    partition: int
    log: PartitionLog
    records: list[Produced]
    segments: list[SegmentInfo] = field(default_factory=list)
    manifest: mf.Manifest | None = None

    @property
    def end_offset(self) -> int:
        return self.records[-1].offset + 1

    def keys(self, segment: mf.RemoteSegment) -> dict[SegmentKind, str]:
        return segment_keys(self.topic, self.partition, segment.base_offset, segment.segment_uuid)


def write_log(
    path: Path,
    *,
    topic: str = "orders",
    partition: int = 0,
    batches: int = 120,
    seed: int = 7,
    segment_bytes: int = 8192,
    index_interval_bytes: int = 512,
    max_records: int = 12,
    max_value: int = 120,
    big_batch_at: int | None = None,
    big_value: int = 0,
) -> Partition:
    """Append ``batches`` batches (1..max_records records, codecs in turn, timestamps mostly increasing
    with some out-of-order records) to a new PartitionLog, then roll so every segment is sealed.
    Blocking: call it through ``asyncio.to_thread`` from async tests.
    """
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    log = PartitionLog.open(path, config, topic=topic, partition=partition)
    produced: list[Produced] = []
    for n in range(batches):
        count = rng.randint(1, max_records)
        records = []
        for i in range(count):
            size = big_value if n == big_batch_at else rng.randint(0, max_value)
            value = (
                rng.randbytes(size)
                if n == big_batch_at
                else bytes(rng.choice(b"abcdefgh") for _ in range(size))
            )
            key = None if rng.random() < 0.2 else f"k{rng.randint(0, 50)}".encode()
            timestamp = BASE_TS + n * 100 + i * 3 - (40 if rng.random() < 0.1 else 0)
            records.append(Record(key=key, value=value, timestamp=timestamp))
        batch = build_batch(records, compression=CODECS[n % len(CODECS)])
        info = log.append(batch)
        produced.extend(
            Produced(info.base_offset + i, r.key, r.value, r.timestamp) for i, r in enumerate(records)
        )
    log.roll()
    return Partition(topic, partition, log, produced)


async def upload(store: ObjectStore, part: Partition, *, packed: bool = True) -> mf.Manifest:
    """Upload every sealed segment of ``part`` and commit copy_started -> copy_finished for each, its
    indexes packed in one ``.indexes`` object, or with ``packed=False`` as separate objects."""
    manifests = ManifestStore(store)
    part.segments = await asyncio.to_thread(part.log.sealed_segments)
    manifest = mf.empty(part.topic, part.partition)
    for info in part.segments:
        offset_index, time_index = info.index_path.read_bytes(), info.timeindex_path.read_bytes()
        segment = mf.RemoteSegment(
            base_offset=info.base_offset,
            last_offset=info.next_offset - 1,
            max_timestamp=info.max_timestamp,
            size_bytes=info.size_bytes,
            segment_uuid=uuid.uuid4(),
            state=mf.SegmentState.COPY_STARTED,
            created_ms=BASE_TS,
            indexes=(len(offset_index), len(time_index)) if packed else None,
        )
        keys = segment_keys(part.topic, part.partition, segment.base_offset, segment.segment_uuid)
        await manifests.update(part.topic, part.partition, functools.partial(mf.add_segment, segment=segment))
        await store.put_file(keys["log"], info.log_path)
        if packed:
            await store.put(keys["indexes"], packed_indexes.pack(offset_index, time_index))
        else:
            await store.put_file(keys["index"], info.index_path)
            await store.put_file(keys["timeindex"], info.timeindex_path)
        finished = functools.partial(
            mf.transition, segment_uuid=segment.segment_uuid, state=mf.SegmentState.COPY_FINISHED
        )
        manifest = await manifests.update(part.topic, part.partition, finished)
    part.manifest = manifest
    return manifest


async def delete_indexes(store: ObjectStore, part: Partition, segment: mf.RemoteSegment) -> None:
    """Delete both indexes of ``segment`` in its layout."""
    keys = part.keys(segment)
    await store.delete_many([keys["indexes"]] if segment.indexes else [keys["index"], keys["timeindex"]])


async def put_offset_index(
    store: ObjectStore, part: Partition, segment: mf.RemoteSegment, data: bytes
) -> str:
    """Replace the offset index of ``segment`` with ``data`` in its layout; returns the key written. A
    packed segment's manifest entry is rewritten with the new size (``part.manifest`` follows), so the
    reader judges the entries themselves, not a length mismatch."""
    keys = part.keys(segment)
    if segment.indexes is None:
        await store.put(keys["index"], data)
        return keys["index"]
    _, time_index = packed_indexes.unpack(await store.get(keys["indexes"]))
    await store.put(keys["indexes"], packed_indexes.pack(data, time_index))
    resized = dataclasses.replace(segment, indexes=(len(data), len(time_index)))

    def change(m: mf.Manifest) -> mf.Manifest:
        return dataclasses.replace(
            m, segments=tuple(resized if s.segment_uuid == segment.segment_uuid else s for s in m.segments)
        )

    part.manifest = await ManifestStore(store).update(part.topic, part.partition, change)
    return keys["indexes"]


def decode(data: bytes) -> list[Produced]:
    """The records in ``data`` (whole batches) as a consumer sees them."""
    return [Produced(r.offset, r.key, r.value, r.timestamp) for _, r in iter_records(data)]


async def replay(
    reader: RemoteReader,
    manifest: mf.Manifest,
    *,
    start: int = 0,
    max_bytes: int = 4096,
    after_read: Callable[[], Awaitable[None]] | None = None,
) -> tuple[list[Produced], int]:
    """Read sequentially from ``start`` to the remote end: ``(records at or after start, reads)``."""
    end = max(s.last_offset for s in mf.readable_segments(manifest)) + 1
    out: list[Produced] = []
    offset, reads = start, 0
    while offset < end:
        result = await reader.read(manifest, offset, max_bytes)
        assert result.next_offset > offset
        out.extend(r for r in decode(result.data) if r.offset >= offset)
        offset = result.next_offset
        reads += 1
        if after_read is not None:
            await after_read()
    return out, reads


def total_chunks(part: Partition, chunk_bytes: int) -> int:
    """How many chunks of ``chunk_bytes`` cover all of the partition's ``.log`` objects."""
    return sum(-(-info.size_bytes // chunk_bytes) for info in part.segments)
