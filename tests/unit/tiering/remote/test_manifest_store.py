"""Versioned manifest commits with put_if_absent: one winner per version, lost responses recognised,
stale writers refused even after old versions were collected, corrupt manifests never skipped."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.layout import manifest_key
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy
from tierlog.wire.errors import ConflictError, CorruptRecordError


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    store = LocalObjectStore(tmp_path / "bucket", fsync=False)
    yield store
    await store.close()


def add(manifest: mf.Manifest, segment: mf.RemoteSegment) -> mf.Manifest:
    return mf.add_segment(manifest, segment)


def segment(n: int) -> mf.RemoteSegment:
    return mf.RemoteSegment(
        n * 10, n * 10 + 9, 1000 + n, 100, uuid.UUID(int=n + 1), mf.SegmentState.COPY_STARTED, 5
    )


async def test_load_missing_is_empty_version_zero(local: LocalObjectStore) -> None:
    loaded = await ManifestStore(local).load("t", 0)
    assert loaded == mf.empty("t", 0)


async def test_concurrent_updates_all_land(local: LocalObjectStore) -> None:
    store = ManifestStore(local, keep_versions=3)
    await asyncio.gather(
        *(store.update("t", 1, functools.partial(add, segment=segment(n))) for n in range(6))
    )
    final = await store.load("t", 1)
    assert sorted(s.base_offset for s in final.segments) == [0, 10, 20, 30, 40, 50]
    assert final.version == 6
    assert await store.versions("t", 1) == [4, 5, 6]  # older versions collected


async def test_unchanged_update_writes_nothing(local: LocalObjectStore) -> None:
    store = ManifestStore(local)
    first = await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 5))
    again = await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 5))
    assert again == first and await store.versions("t", 0) == [1]


async def test_lost_response_is_recognised_as_own_write(local: LocalObjectStore) -> None:
    faults = FaultInjectingStore(local)

    async def no_sleep(delay: float) -> None:
        return None

    store = ManifestStore(RetryingStore(faults, RetryPolicy(max_attempts=3), sleep=no_sleep))
    faults.fail_next("put_if_absent", after=True)  # the write lands, its answer is lost
    committed = await store.commit(mf.empty("t", 0), mf.set_log_start_offset(mf.empty("t", 0), 42))
    assert committed.version == 1
    assert faults.calls["put_if_absent"] == 2
    assert (await store.load("t", 0)).log_start_offset == 42


async def test_stale_writer_is_refused_after_its_version_was_collected(local: LocalObjectStore) -> None:
    store = ManifestStore(local, keep_versions=2)
    stale_base = await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 1))  # version 1
    for offset in range(2, 6):
        await store.update("t", 0, functools.partial(mf.set_log_start_offset, offset=offset))  # up to v5
    assert 2 not in await store.versions("t", 0)  # collected: put_if_absent on version 2 would succeed
    with pytest.raises(ConflictError):
        await store.commit(stale_base, mf.set_log_start_offset(stale_base, 100))
    assert (await store.load("t", 0)).log_start_offset == 5


async def test_corrupt_newest_version_is_an_error_not_a_fallback(local: LocalObjectStore) -> None:
    store = ManifestStore(local)
    await store.update("t", 0, lambda m: mf.set_log_start_offset(m, 1))
    await local.put(manifest_key("t", 0, 2), b'{"format":1}')
    with pytest.raises(CorruptRecordError):
        await store.load("t", 0)


async def test_manifest_for_another_partition_is_corrupt(local: LocalObjectStore) -> None:
    other = mf.Manifest("other", 0, 1, 0)
    await local.put(manifest_key("t", 0, 1), mf.encode(other))
    with pytest.raises(CorruptRecordError):
        await ManifestStore(local).load("t", 0)
