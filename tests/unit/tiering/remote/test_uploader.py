"""The upload/deletion protocol and the per-partition RemoteLog on a real partition log and a real
local-directory store (with the project's fault-injecting wrapper for failures at each step)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.remote_log import RemoteLog, UploadEvent
from tierlog.tiering.remote.uploader import clean_unfinished, delete_segments, upload_segment, upload_segments
from tierlog.wire.errors import NotFoundError, UnavailableError

START = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def plog(tmp_path: Path, clock: ManualClock) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1024), clock=clock, topic="t")
    yield opened
    opened.close()


@pytest.fixture
async def faulty(tmp_path: Path) -> AsyncIterator[FaultInjectingStore]:
    store = FaultInjectingStore(LocalObjectStore(tmp_path / "remote", fsync=False))
    yield store
    await store.close()


def fill(plog: PartitionLog, count: int) -> None:
    for n in range(count):
        plog.append(build_batch([Record(b"k", bytes([n % 256]) * 50, timestamp=START + n)]))


async def test_upload_puts_the_log_and_packed_indexes_then_commits_copy_finished(
    tmp_path: Path, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    config = LogConfig(
        segment_bytes=1024, index_interval_bytes=1
    )  # an entry per batch: both indexes hold some
    plog = PartitionLog.open(tmp_path / "dense", config, clock=clock, topic="t")
    fill(plog, 40)
    info = plog.sealed_segments()[0]
    manifests = ManifestStore(faulty)
    result = await upload_segment(faulty, manifests, "t", 0, info, clock)
    assert result.segment.state is mf.SegmentState.COPY_FINISHED
    assert (result.segment.base_offset, result.segment.last_offset) == (
        info.base_offset,
        info.next_offset - 1,
    )
    keys = segment_keys("t", 0, info.base_offset, result.segment.segment_uuid)
    assert await faulty.get(keys["log"]) == info.log_path.read_bytes()
    offset_index, time_index = info.index_path.read_bytes(), info.timeindex_path.read_bytes()
    assert offset_index and time_index
    assert packed_indexes.unpack(await faulty.get(keys["indexes"])) == (offset_index, time_index)
    assert result.segment.indexes == (len(offset_index), len(time_index))
    assert result.bytes_uploaded == info.size_bytes + packed_indexes.HEADER_SIZE + len(
        offset_index + time_index
    )
    assert (await manifests.load("t", 0)) == result.manifest
    assert faulty.calls["put_file"] == 1
    for kind in ("index", "timeindex"):  # the older layout's objects are not written
        with pytest.raises(NotFoundError):
            await faulty.head(keys[kind])
    plog.close()


@pytest.mark.parametrize("after", [False, True], ids=["refused", "lost-response"])
async def test_a_failed_upload_is_never_readable_and_is_cleaned_without_leaks(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock, after: bool
) -> None:
    fill(plog, 40)
    info = plog.sealed_segments()[0]
    manifests = ManifestStore(faulty)
    faulty.fail_next("put_file", 1, after=after)  # with ``after`` the .log object is in the bucket
    with pytest.raises(UnavailableError):
        await upload_segment(faulty, manifests, "t", 0, info, clock)
    objects = [i.key async for i in faulty.list("t/0/") if "manifest" not in i.key]
    assert len(objects) == (1 if after else 0)
    manifest = await manifests.load("t", 0)
    assert mf.readable_segments(manifest) == ()
    assert [s.state for s in manifest.segments] == [mf.SegmentState.COPY_STARTED]
    assert (await check(faulty, manifests)).clean  # copy_started references its objects

    cleaned, count = await clean_unfinished(faulty, manifests, "t", 0)
    assert count == 1 and cleaned.segments == ()
    remaining = [info.key async for info in faulty.list("t/0/") if "manifest" not in info.key]
    assert remaining == []


async def test_delete_segments_raises_the_start_and_is_idempotent(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    fill(plog, 60)
    manifests = ManifestStore(faulty.inner)  # faults hit the segment objects only
    uploaded = [await upload_segment(faulty, manifests, "t", 0, i, clock) for i in plog.sealed_segments()]
    first = uploaded[0].segment
    faulty.fail_next("delete_many", 1)
    with pytest.raises(UnavailableError):
        await delete_segments(
            faulty, manifests, "t", 0, [first.segment_uuid], log_start_offset=first.last_offset + 1
        )
    interrupted = await manifests.load("t", 0)
    assert interrupted.segment(first.segment_uuid).state is mf.SegmentState.DELETE_STARTED
    assert interrupted.log_start_offset == first.last_offset + 1
    done = await delete_segments(faulty, manifests, "t", 0, [first.segment_uuid])
    again = await delete_segments(faulty, manifests, "t", 0, [first.segment_uuid])
    assert done == again
    assert mf.find_segment(done, first.segment_uuid) is None
    assert (await check(faulty, manifests)).clean


async def test_remote_log_sync_uploads_in_order_and_the_veto_follows_the_manifest(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    events: list[UploadEvent] = []
    remote = RemoteLog(faulty, ManifestStore(faulty), plog, "t", 0, clock, listener=events.append)
    await remote.open()
    fill(plog, 60)
    sealed = plog.sealed_segments()
    assert not remote.covers(sealed[0])
    faulty.fail_next("put_file", 1)
    with pytest.raises(UnavailableError):
        await remote.sync()
    assert remote.remote_next_offset is None and remote.failures == 1
    assert await remote.sync() == len(sealed)
    stored = await ManifestStore(faulty).load("t", 0)
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)  # the failed try is gone
    assert (await check(faulty, ManifestStore(faulty))).clean
    assert [s.base_offset for s in mf.readable_segments(remote.manifest)] == [s.base_offset for s in sealed]
    assert all(remote.covers(s) for s in sealed)
    assert not remote.covers(plog.segments()[-1])
    assert [e.kind for e in events] == ["failed", *["uploaded"] * len(sealed)]
    assert await remote.sync() == 0  # idempotent
    lag_bytes, _ = remote.lag(plog.segments())
    assert lag_bytes == plog.segments()[-1].size_bytes


async def test_remote_log_idle_roll_uses_the_injected_clock(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    remote = RemoteLog(faulty, ManifestStore(faulty), plog, "t", 0, clock)
    await remote.open()
    plog.append(build_batch([Record(b"k", b"v", timestamp=START)]))
    remote.note_append(0)
    assert await remote.sync(idle_roll_ms=5000) == 0
    clock.advance(4999)
    assert remote.lag(plog.segments())[1] == 4999
    assert await remote.sync(idle_roll_ms=5000) == 0
    clock.advance(1)
    assert await remote.sync(idle_roll_ms=5000) == 1
    assert remote.remote_next_offset == 1
    assert remote.lag(plog.segments()) == (0, 0)


async def test_open_starts_an_empty_local_log_after_the_remote_data(
    tmp_path: Path, faulty: FaultInjectingStore, clock: ManualClock, plog: PartitionLog
) -> None:
    fill(plog, 60)
    manifests = ManifestStore(faulty)
    for info in plog.sealed_segments():
        await upload_segment(faulty, manifests, "t", 0, info, clock)
    remote_next = plog.sealed_segments()[-1].next_offset
    with PartitionLog.open(tmp_path / "lost-disk", LogConfig(), clock=clock, topic="t") as fresh:
        remote = RemoteLog(faulty, manifests, fresh, "t", 0, clock)
        await remote.open(reset_local=False)
        assert fresh.log_end_offset == 0  # never without reset_local: hands off instead
        fresh.append(build_batch([Record(b"k", b"v", timestamp=START)]))
        fresh.roll()
        assert remote.diverged and not remote.covers(fresh.sealed_segments()[0])
        assert await remote.sync() == 0
        await remote.open()
        assert not remote.diverged
        assert (fresh.log_start_offset, fresh.log_end_offset) == (remote_next, remote_next)
        assert remote.remote_start_offset == 0


async def test_check_lists_unreferenced_objects_and_missing_ones(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    fill(plog, 40)
    manifests = ManifestStore(faulty)
    done = await upload_segment(faulty, manifests, "t", 0, plog.sealed_segments()[0], clock)
    stray = segment_keys("t", 0, 7, uuid.uuid4())["log"]
    await faulty.put(stray, b"x")
    await faulty.put("u/3/" + stray.split("/")[-1], b"y")  # a partition without any manifest
    keys = segment_keys("t", 0, done.segment.base_offset, done.segment.segment_uuid)
    await faulty.delete(keys["indexes"])
    report = await check(faulty, manifests)
    assert [info.key for info in report.leaks] == sorted([stray, "u/3/" + stray.split("/")[-1]])
    assert report.missing == [keys["indexes"]]
    assert not report.clean


async def test_idle_roll_judges_the_active_segment_not_an_older_backlog(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    remote = RemoteLog(faulty, ManifestStore(faulty), plog, "t", 0, clock)
    await remote.open()
    remote.note_append(0)
    fill(plog, 40)  # sealed segments waiting (say, through an outage) since START
    plog.roll()
    clock.advance(10_000)
    first = plog.log_end_offset
    remote.note_append(first)
    plog.append(build_batch([Record(b"k", b"young", timestamp=START)]))
    assert remote.lag(plog.segments())[1] == 10_000
    uploaded = await remote.sync(idle_roll_ms=5_000)
    assert uploaded == len(plog.sealed_segments())
    assert plog.segments()[-1].base_offset == first  # the young active segment was not rolled
    clock.advance(5_000)
    assert await remote.sync(idle_roll_ms=5_000) == 1
    assert remote.remote_next_offset == first + 1


async def test_upload_without_packing_writes_the_older_separate_index_objects(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    fill(plog, 40)
    infos = plog.sealed_segments()[:2]
    manifests = ManifestStore(faulty)
    result = await upload_segments(faulty, manifests, "t", 0, infos, clock, pack_indexes=False)
    assert result.error is None and [s.indexes for s in result.segments] == [None, None]
    for info, segment in zip(infos, result.segments, strict=True):
        keys = segment_keys("t", 0, info.base_offset, segment.segment_uuid)
        assert await faulty.get(keys["timeindex"]) == info.timeindex_path.read_bytes()
        assert await faulty.get(keys["index"]) == info.index_path.read_bytes()
        with pytest.raises(NotFoundError):
            await faulty.head(keys["indexes"])
    assert (await check(faulty, manifests)).clean
    await delete_segments(faulty, manifests, "t", 0, [s.segment_uuid for s in result.segments])
    assert [i.key async for i in faulty.list("t/0/") if "manifest" not in i.key] == []


async def test_an_older_writer_dropping_the_indexes_field_loses_nothing_and_leaks_nothing(
    plog: PartitionLog, faulty: FaultInjectingStore, clock: ManualClock
) -> None:
    # A release before the packed layout rewrites the manifest without the entries' ``indexes`` field.
    fill(plog, 40)
    infos = plog.sealed_segments()[:2]
    manifests = ManifestStore(faulty)
    result = await upload_segments(faulty, manifests, "t", 0, infos, clock)
    assert all(s.indexes is not None for s in result.segments)

    def drop_field(m: mf.Manifest) -> mf.Manifest:
        return dataclasses.replace(
            m, segments=tuple(dataclasses.replace(s, indexes=None) for s in m.segments)
        )

    await manifests.update("t", 0, drop_field)
    report = await check(faulty, manifests)
    assert report.clean and report.referenced == 4  # the .indexes objects are neither leaks nor missing
    await faulty.delete(
        segment_keys("t", 0, infos[0].base_offset, result.segments[0].segment_uuid)["indexes"]
    )
    report = await check(faulty, manifests)  # now the first segment lacks its index objects
    first = segment_keys("t", 0, infos[0].base_offset, result.segments[0].segment_uuid)
    assert report.missing == sorted([first["index"], first["timeindex"]]) and not report.leaks

    await delete_segments(faulty, manifests, "t", 0, [s.segment_uuid for s in result.segments])
    assert [i.key async for i in faulty.list("t/0/") if "manifest" not in i.key] == []
