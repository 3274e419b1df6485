"""Batched uploads: several small sealed segments cost two manifest commits in all, and a failure in the
middle of a batch keeps the prefix before it, leaves nothing readable that is not stored, and is cleaned
without leaks (real partition log, real local-directory store, the project's fault-injecting wrapper)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.remote_log import RemoteLog, UploadEvent
from tierlog.tiering.remote.uploader import upload_segments
from tierlog.wire.errors import UnavailableError

START = 1_700_000_000_000


class FailingSegmentStore(FaultInjectingStore):
    """Refuses ``put_file`` of the ``.log`` object of the segment at ``base_offset`` (once)."""

    def __init__(self, inner: LocalObjectStore) -> None:
        super().__init__(inner)
        self.fail_base: int | None = None

    async def put_file(self, key: str, path: str | Path) -> None:
        name = key.rsplit("/", 1)[-1]
        if (
            self.fail_base is not None
            and name.startswith(f"{self.fail_base:020d}-")
            and name.endswith(".log")
        ):
            self.fail_base = None
            raise UnavailableError(f"injected failure of put_file {key}")
        await super().put_file(key, path)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def plog(tmp_path: Path, clock: ManualClock) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1024), clock=clock, topic="t")
    yield opened
    opened.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[FailingSegmentStore]:
    opened = FailingSegmentStore(LocalObjectStore(tmp_path / "remote", fsync=False))
    yield opened
    await opened.close()


def fill(plog: PartitionLog, count: int) -> None:
    for n in range(count):
        plog.append(build_batch([Record(b"k", bytes([n % 256]) * 50, timestamp=START + n)]))


async def newest_version(manifests: ManifestStore) -> int:
    versions = await manifests.versions("t", 0)
    return versions[-1] if versions else 0


async def test_a_batch_of_small_segments_costs_two_manifest_commits(
    plog: PartitionLog, store: FailingSegmentStore, clock: ManualClock
) -> None:
    events: list[UploadEvent] = []
    manifests = ManifestStore(store)
    remote = RemoteLog(store, manifests, plog, "t", 0, clock, listener=events.append)
    await remote.open()
    fill(plog, 120)
    sealed = plog.sealed_segments()
    assert len(sealed) >= 6
    before = await newest_version(manifests)
    commits = store.calls["put_if_absent"]

    assert await remote.sync() == len(sealed)

    assert await newest_version(manifests) == before + 2
    assert store.calls["put_if_absent"] - commits == 2
    stored = await manifests.load("t", 0)
    assert stored == remote.manifest
    assert [s.base_offset for s in mf.readable_segments(stored)] == [s.base_offset for s in sealed]
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)
    for info, segment in zip(sealed, mf.readable_segments(stored), strict=True):
        keys = segment_keys("t", 0, info.base_offset, segment.segment_uuid)
        assert await store.get(keys["log"]) == info.log_path.read_bytes()
    assert (await check(store, manifests)).clean
    assert [e.kind for e in events] == ["uploaded"] * len(sealed)  # one event per segment, as before
    assert remote.uploaded_segments == len(sealed)
    assert all(remote.covers(s) for s in sealed)


async def test_batches_are_bounded_by_bytes_and_count(
    plog: PartitionLog, store: FailingSegmentStore, clock: ManualClock
) -> None:
    manifests = ManifestStore(store)
    remote = RemoteLog(store, manifests, plog, "t", 0, clock, upload_batch_segments=2)
    await remote.open()
    fill(plog, 120)
    sealed = plog.sealed_segments()
    before = await newest_version(manifests)
    assert await remote.sync() == len(sealed)
    assert await newest_version(manifests) == before + 2 * -(-len(sealed) // 2)

    fill(plog, 60)
    one_each = RemoteLog(store, manifests, plog, "t", 0, clock, upload_batch_bytes=1)
    await one_each.open()
    more = len(plog.sealed_segments()) - len(sealed)
    before = await newest_version(manifests)
    assert await one_each.sync() == more
    assert await newest_version(manifests) == before + 2 * more
    assert (await check(store, manifests)).clean


async def test_a_failure_mid_batch_keeps_the_prefix_and_is_cleaned_without_leaks(
    plog: PartitionLog, store: FailingSegmentStore, clock: ManualClock
) -> None:
    manifests = ManifestStore(store)
    events: list[UploadEvent] = []
    remote = RemoteLog(store, manifests, plog, "t", 0, clock, listener=events.append)
    await remote.open()
    fill(plog, 120)
    sealed = plog.sealed_segments()
    store.fail_base = sealed[3].base_offset

    with pytest.raises(UnavailableError):
        await remote.sync()

    stored = await manifests.load("t", 0)
    assert stored == remote.manifest
    assert [s.base_offset for s in mf.readable_segments(stored)] == [s.base_offset for s in sealed[:3]]
    assert remote.remote_next_offset == sealed[2].next_offset
    assert [s.state for s in stored.segments if s.base_offset >= sealed[3].base_offset] == [
        mf.SegmentState.COPY_STARTED
    ] * (len(sealed) - 3)
    assert remote.covers(sealed[2]) and not remote.covers(sealed[3])
    assert (await check(store, manifests)).clean  # every object is findable from the manifest
    assert [e.kind for e in events] == ["uploaded"] * 3 + ["failed"]

    assert await remote.sync() == len(sealed) - 3  # cleans the copy_started entries, uploads them again
    stored = await manifests.load("t", 0)
    assert [s.base_offset for s in mf.readable_segments(stored)] == [s.base_offset for s in sealed]
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)
    report = await check(store, manifests)
    assert report.clean, report


async def test_upload_segments_returns_the_error_with_the_committed_prefix(
    plog: PartitionLog, store: FailingSegmentStore, clock: ManualClock
) -> None:
    manifests = ManifestStore(store)
    fill(plog, 60)
    sealed = plog.sealed_segments()[:3]
    store.fail_base = sealed[0].base_offset
    result = await upload_segments(store, manifests, "t", 0, sealed, clock)
    assert isinstance(result.error, UnavailableError)
    assert result.segments == () and mf.readable_segments(result.manifest) == ()
    assert [s.state for s in (await manifests.load("t", 0)).segments] == [mf.SegmentState.COPY_STARTED] * 3
    assert (await check(store, manifests)).clean
