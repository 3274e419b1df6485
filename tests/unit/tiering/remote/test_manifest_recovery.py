"""Recovery of a damaged newest manifest against a local store: the newest valid version is found, the
segments it lacks are re-derived from objects whose batches all pass their CRC, and a gap or a damaged
object stops the chain instead of being papered over."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, segment_keys
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_recovery import derive_segment, recover_manifest
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.packed_indexes import pack


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    store = LocalObjectStore(tmp_path / "bucket", fsync=False)
    yield store
    await store.close()


def segment_bytes(base: int, count: int) -> bytes:
    """``count`` records in batches of 5 from offset ``base``, as a local segment file holds them."""
    out = bytearray()
    for start in range(base, base + count, 5):
        batch = bytearray(
            build_batch([Record(b"k", b"v%d" % n, timestamp=1000 + n) for n in range(start, start + 5)])
        )
        batch[0:8] = start.to_bytes(8, "big")  # the base offset is outside the CRC
        out += batch
    return bytes(out)


OFFSET_INDEX = b"\x00\x00\x00\x00\x00\x00\x00\x00"  # one 8-byte entry: relative offset 0 at 0
TIME_INDEX = b"\x00\x00\x00\x00\x00\x00\x03\xe8\x00\x00\x00\x00"  # one 12-byte entry


async def put_segment(
    store: LocalObjectStore,
    base: int,
    count: int,
    *,
    log: bytes | None = None,
    packed: bool = True,
    indexes: bytes | None = None,
) -> uuid.UUID:
    """A segment's objects as an upload writes them: ``.log`` and ``.indexes`` (``indexes``: other bytes
    for it), or with ``packed=False`` the older ``.log``, ``.index`` and ``.timeindex``."""
    chosen = uuid.uuid4()
    keys = segment_keys("t", 0, base, chosen)
    await store.put(keys["log"], segment_bytes(base, count) if log is None else log)
    if packed:
        await store.put(keys["indexes"], pack(OFFSET_INDEX, TIME_INDEX) if indexes is None else indexes)
    else:
        await store.put(keys["index"], OFFSET_INDEX)
        await store.put(keys["timeindex"], TIME_INDEX)
    return chosen


PACKED = (len(OFFSET_INDEX), len(TIME_INDEX))  # the index sizes of put_segment's packed objects


def entry(
    base: int, last: int, chosen: uuid.UUID, size: int, indexes: tuple[int, int] | None = PACKED
) -> mf.RemoteSegment:
    return mf.RemoteSegment(
        base, last, 1000 + last, size, chosen, mf.SegmentState.COPY_STARTED, 5, indexes=indexes
    )


async def test_load_verified_skips_damaged_versions(local: LocalObjectStore) -> None:
    store = ManifestStore(local)
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 3))
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 4))
    await local.put(manifest_key("t", 0, 3), b"\xff\xfe not json")
    manifest, newest, damaged = await store.load_verified("t", 0)
    assert (manifest.version, manifest.log_start_offset, newest) == (2, 4, 3)
    assert [version for version, _ in damaged] == [3]


async def test_load_verified_with_every_version_damaged_is_empty(local: LocalObjectStore) -> None:
    await local.put(manifest_key("t", 0, 1), b'{"format":1}')
    manifest, newest, damaged = await ManifestStore(local).load_verified("t", 0)
    assert manifest == mf.empty("t", 0) and newest == 1 and len(damaged) == 1


async def test_undamaged_manifest_needs_no_recovery(local: LocalObjectStore) -> None:
    store = ManifestStore(local)
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 1))
    assert await recover_manifest(local, store, "t", 0, now_ms=7) is None


async def test_recovery_rederives_the_uploaded_segments_the_fallback_lacks(local: LocalObjectStore) -> None:
    store = ManifestStore(local)
    first = await put_segment(local, 0, 10)
    size = len(segment_bytes(0, 10))
    await store.update("t", 0, lambda m: mf.add_segment(m, entry(0, 9, first, size)))
    await store.update("t", 0, lambda m: mf.transition(m, first, mf.SegmentState.COPY_FINISHED))
    second = await put_segment(local, 10, 10)
    await store.update("t", 0, lambda m: mf.add_segment(m, entry(10, 19, second, size)))  # version 3
    await put_segment(local, 10, 10)  # an abandoned duplicate upload of the same range
    third = await put_segment(local, 20, 5, packed=False)  # never listed at all; the older layout
    after_gap = await put_segment(local, 30, 5)
    await local.put(manifest_key("t", 0, 4), b"garbage")  # the version that finished ``second``

    recovery = await recover_manifest(local, store, "t", 0, now_ms=7)
    assert recovery is not None
    assert recovery.fallback_version == 3 and [v for v, _ in recovery.damaged] == [4]
    assert [(s.base_offset, s.last_offset) for s in recovery.derived] == [(10, 19), (20, 24)]
    readable = mf.readable_segments(recovery.manifest)
    assert [s.segment_uuid for s in readable] == [first, second, third]  # not the one after the gap
    assert after_gap not in {s.segment_uuid for s in recovery.manifest.segments}
    assert [s.indexes for s in recovery.derived] == [PACKED, None]
    committed = await store.commit(recovery.manifest, recovery.manifest)
    assert committed.version == 5
    assert await store.load("t", 0) == committed


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "wrong-base"])
async def test_a_damaged_segment_object_is_never_derived(local: LocalObjectStore, damage: str) -> None:
    data = bytearray(segment_bytes(0, 10))
    if damage == "flip":
        data[len(data) - 3] ^= 0xFF
    elif damage == "truncate":
        del data[-4:]
    elif damage == "empty":
        data.clear()
    chosen = await put_segment(local, 5 if damage == "wrong-base" else 0, 10, log=bytes(data))
    base = 5 if damage == "wrong-base" else 0
    assert await derive_segment(local, "t", 0, base, chosen, now_ms=1) is None


async def test_derive_reads_offsets_timestamps_and_size(local: LocalObjectStore) -> None:
    chosen = await put_segment(local, 40, 15)
    derived = await derive_segment(local, "t", 0, 40, chosen, now_ms=9)
    assert derived is not None and derived.indexes == PACKED
    assert (derived.base_offset, derived.last_offset, derived.max_timestamp) == (40, 54, 1054)
    assert derived.size_bytes == len(segment_bytes(40, 15)) and derived.created_ms == 9


async def test_the_objects_decide_the_layout_of_a_listed_entry(local: LocalObjectStore) -> None:
    # an older writer rewrote the manifest and dropped the copy_started entry's indexes field
    store = ManifestStore(local)
    chosen = await put_segment(local, 0, 10)
    size = len(segment_bytes(0, 10))
    await store.update("t", 0, lambda m: mf.add_segment(m, entry(0, 9, chosen, size, indexes=None)))
    await local.put(manifest_key("t", 0, 2), b"garbage")
    recovery = await recover_manifest(local, store, "t", 0, now_ms=7)
    assert recovery is not None
    assert [(s.segment_uuid, s.indexes, s.state) for s in recovery.derived] == [
        (chosen, PACKED, mf.SegmentState.COPY_FINISHED)
    ]


@pytest.mark.parametrize(
    "indexes",
    [b"", b"TLIX", pack(OFFSET_INDEX, TIME_INDEX)[:-1], b"XLIX" + pack(OFFSET_INDEX, TIME_INDEX)[4:]],
    ids=["empty", "short-header", "short-body", "bad-magic"],
)
async def test_a_segment_with_an_unsound_packed_index_object_is_derived_without_indexes(
    local: LocalObjectStore, indexes: bytes
) -> None:
    chosen = await put_segment(local, 0, 10, indexes=indexes)
    derived = await derive_segment(local, "t", 0, 0, chosen, now_ms=1)
    assert derived is not None and derived.indexes == (0, 0)  # no index: reads scan the segment
    store = ManifestStore(local)
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 0))
    await local.put(manifest_key("t", 0, 2), b"garbage")
    recovery = await recover_manifest(local, store, "t", 0, now_ms=7)
    assert recovery is not None and [(s.last_offset, s.indexes) for s in recovery.derived] == [(9, (0, 0))]


async def test_a_segment_missing_its_index_objects_is_never_derived(local: LocalObjectStore) -> None:
    chosen = await put_segment(local, 0, 10, packed=False)
    await local.delete(segment_keys("t", 0, 0, chosen)["timeindex"])
    store = ManifestStore(local)
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 0))
    await local.put(manifest_key("t", 0, 2), b"garbage")
    recovery = await recover_manifest(local, store, "t", 0, now_ms=7)
    assert recovery is not None and recovery.derived == ()
