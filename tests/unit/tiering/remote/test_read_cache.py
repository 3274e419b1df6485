"""The chunk and index caches of the remote read path on a real local-directory store: aligned chunks,
LRU bounds, single-flight, read-ahead failures only counted, a torn object detected, close cancelling
fetches, index fallbacks.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest import RemoteSegment, SegmentState
from tierlog.tiering.remote.packed_indexes import IndexRef, index_refs, pack
from tierlog.tiering.remote.read_cache import ChunkCache
from tierlog.tiering.remote.read_errors import ReadStats, RemoteObjectCorruptError, RemoteObjectMissingError
from tierlog.tiering.remote.read_index_cache import IndexCache
from tierlog.wire.errors import UnavailableError

DATA = bytes(range(256)) * 40  # 10240 bytes: 10 chunks of 1024
KEY = "t/0/obj.log"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[InstrumentedStore]:
    inner = LocalObjectStore(tmp_path / "bucket", fsync=False)
    await inner.put(KEY, DATA)
    instrumented = InstrumentedStore(FaultInjectingStore(inner))
    yield instrumented
    await instrumented.close()


def faults(store: InstrumentedStore) -> FaultInjectingStore:
    assert isinstance(store.inner, FaultInjectingStore)
    return store.inner


def new_cache(store: InstrumentedStore, capacity: int = 1 << 20, max_prefetch: int = 8) -> ChunkCache:
    return ChunkCache(
        store, chunk_bytes=1024, capacity_bytes=capacity, max_prefetch=max_prefetch, stats=ReadStats()
    )


async def test_chunks_are_aligned_and_cached(store: InstrumentedStore) -> None:
    cache = new_cache(store)
    try:
        for index in range(10):
            assert await cache.chunk(KEY, index, len(DATA)) == DATA[index * 1024 : (index + 1) * 1024]
        assert store.requests("get_range") == 10
        for index in range(10):
            await cache.chunk(KEY, index, len(DATA))
        assert store.requests("get_range") == 10
        assert cache.cached_bytes == len(DATA)
    finally:
        await cache.close()


async def test_capacity_is_a_hard_bound(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=3000, max_prefetch=8, stats=stats)
    try:
        for index in range(10):
            await cache.chunk(KEY, index, len(DATA))
            assert cache.cached_bytes <= 3000
        assert stats.cache_evictions == 8 and cache.cached_chunks == 2
        await cache.chunk(KEY, 9, len(DATA))  # most recent: still there
        assert store.requests("get_range") == 10
        await cache.chunk(KEY, 0, len(DATA))  # evicted long ago: fetched again
        assert store.requests("get_range") == 11
    finally:
        await cache.close()


async def test_concurrent_readers_share_one_fetch(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=1 << 20, max_prefetch=8, stats=stats)
    try:
        results = await asyncio.gather(*(cache.chunk(KEY, 4, len(DATA)) for _ in range(20)))
        assert set(results) == {DATA[4096:5120]}
        assert store.requests("get_range") == 1
        assert stats.singleflight_joins == 19
    finally:
        await cache.close()


async def test_a_cancelled_reader_does_not_cancel_the_shared_fetch(store: InstrumentedStore) -> None:
    cache = new_cache(store)
    try:
        first = asyncio.create_task(cache.chunk(KEY, 2, len(DATA)))
        second = asyncio.create_task(cache.chunk(KEY, 2, len(DATA)))
        await asyncio.sleep(0)  # both are now waiting on the one fetch
        first.cancel()
        assert await second == DATA[2048:3072]
        assert first.cancelled()
        assert store.requests("get_range") == 1
    finally:
        await cache.close()


async def test_failed_read_ahead_is_counted_and_the_reader_fetches_again(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=1 << 20, max_prefetch=8, stats=stats)
    try:
        faults(store).fail_next("get_range", 1, lambda: UnavailableError("injected"))
        assert cache.prefetch(KEY, 5, len(DATA))
        joined = asyncio.create_task(cache.chunk(KEY, 5, len(DATA)))  # joins the doomed read-ahead
        assert await joined == DATA[5120:6144]
        assert stats.readahead_errors == 1 and stats.readahead_fetches == 1
        assert store.requests("get_range") == 2
        await cache.drain()
        # a successful read-ahead makes the next lookup a hit
        assert cache.prefetch(KEY, 6, len(DATA))
        assert not cache.prefetch(KEY, 6, len(DATA))  # already in flight
        await cache.drain()
        await cache.chunk(KEY, 6, len(DATA))
        assert stats.readahead_hits == 1 and stats.cache_hits == 1  # the failed one was no hit
    finally:
        await cache.close()


async def test_every_reader_of_a_failed_read_ahead_fetches_again(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=1 << 20, max_prefetch=8, stats=stats)
    inner = faults(store)
    original = inner.get_range
    entered, release = asyncio.Event(), asyncio.Event()

    async def read_ahead_fails(key: str, start: int, end: int | None = None) -> bytes:
        if not entered.is_set():
            entered.set()
            await release.wait()
            raise UnavailableError("injected")
        return await original(key, start, end)

    inner.get_range = read_ahead_fails  # type: ignore[method-assign]
    try:
        assert cache.prefetch(KEY, 5, len(DATA))
        await entered.wait()
        readers = [asyncio.create_task(cache.chunk(KEY, 5, len(DATA))) for _ in range(3)]
        await asyncio.sleep(0)  # one loop turn: each reader joins the running read-ahead
        assert stats.singleflight_joins == 3 and stats.readahead_hits == 1  # one hit, however many join
        release.set()
        assert await asyncio.gather(*readers) == [DATA[5120:6144]] * 3
        assert stats.readahead_errors == 1
        assert store.requests("get_range") == 2  # the failed read-ahead, then one shared fetch
    finally:
        await cache.close()


async def test_read_ahead_is_bounded(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=1 << 20, max_prefetch=2, stats=stats)
    try:
        started = [cache.prefetch(KEY, i, len(DATA)) for i in range(5)]
        assert started == [True, True, False, False, False]
        assert stats.readahead_skipped == 3
        assert not cache.prefetch(KEY, 10, len(DATA))  # past the end of the object
        await cache.drain()
        assert store.requests("get_range") == 2
    finally:
        await cache.close()


async def test_torn_and_missing_objects(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = ChunkCache(store, chunk_bytes=1024, capacity_bytes=1 << 20, max_prefetch=8, stats=stats)
    try:
        with pytest.raises(RemoteObjectCorruptError) as torn:
            await cache.chunk(KEY, 10, len(DATA) + 100)  # the manifest claims 100 more bytes
        assert torn.value.key == KEY and "torn" in str(torn.value)
        with pytest.raises(RemoteObjectMissingError) as missing:
            await cache.chunk("t/0/gone.log", 0, 500)
        assert missing.value.key == "t/0/gone.log"
        assert not cache.is_present("t/0/gone.log", 0)  # failures are not cached
        assert stats.missing_errors == 1 and stats.remote_errors == 1
    finally:
        await cache.close()


async def test_close_cancels_fetches_in_flight(store: InstrumentedStore) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()
    inner = faults(store)

    cancelled = []

    async def stuck() -> bytes:
        entered.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return b""

    original = inner.get_range

    async def gated(key: str, start: int, end: int | None = None) -> bytes:
        if start >= 3072:
            return await stuck()
        return await original(key, start, end)

    inner.get_range = gated  # type: ignore[method-assign]
    cache = new_cache(store)
    assert cache.prefetch(KEY, 3, len(DATA))
    await entered.wait()
    assert cache.is_present(KEY, 3)
    await cache.close()
    assert not cache.is_present(KEY, 3)
    assert cancelled == [True]  # the fetch was cancelled and awaited, not left running


def index_segment() -> RemoteSegment:
    return RemoteSegment(
        base_offset=100,
        last_offset=199,
        max_timestamp=5,
        size_bytes=10_000,
        segment_uuid=uuid.UUID(int=7),
        state=SegmentState.COPY_FINISHED,
        created_ms=0,
    )


async def test_index_cache_loads_once_and_falls_back_without_caching_a_transient_failure(
    store: InstrumentedStore,
) -> None:
    key = IndexRef("t/0/seg.index", "t/0/seg.index")
    await store.put(key.object_key, struct.pack(">ii", 10, 1000) + struct.pack(">ii", 40, 4000))
    store.reset()
    stats = ReadStats()
    cache = IndexCache(store, max_entries=8, max_bytes=1 << 20, stats=stats)
    try:
        faults(store).fail_next("get", 1, lambda: UnavailableError("injected"))
        degraded = await cache.offset_index(key, index_segment())
        assert degraded.missing and degraded.lookup(150) == (100, 0)  # scan from the start this time
        indexes = await asyncio.gather(*(cache.offset_index(key, index_segment()) for _ in range(5)))
        assert all(i is indexes[0] for i in indexes) and not indexes[0].missing
        assert indexes[0].lookup(150) == (140, 4000)
        assert store.requests("get") == 2  # the failed attempt, then one shared load
        await cache.offset_index(key, index_segment())
        assert store.requests("get") == 2 and stats.index_hits == 1 and stats.index_loads == 1
    finally:
        await cache.close()


async def test_index_cache_caches_a_missing_index_and_stays_bounded(store: InstrumentedStore) -> None:
    stats = ReadStats()
    cache = IndexCache(store, max_entries=2, max_bytes=1 << 20, stats=stats)
    try:
        for _ in range(3):
            assert (
                await cache.offset_index(IndexRef("t/0/absent.index", "t/0/absent.index"), index_segment())
            ).missing
        assert stats.index_missing == 1  # looked up once, then the stand-in is cached
        for n in range(4):
            absent = f"t/0/absent-{n}.timeindex"
            await cache.time_index(IndexRef(absent, absent), index_segment())
        assert len(cache) == 2
    finally:
        await cache.close()


async def test_index_cache_reads_each_index_of_a_packed_object_by_range(store: InstrumentedStore) -> None:
    offsets = struct.pack(">ii", 10, 1000) + struct.pack(">ii", 40, 4000)
    times = struct.pack(">qi", 3, 20) + struct.pack(">qi", 5, 60)
    segment = index_segment()
    offset_ref, time_ref = index_refs("t", 0, segment.base_offset, segment.segment_uuid, (16, 24))
    await store.put(offset_ref.object_key, pack(offsets, times))
    store.reset()
    stats = ReadStats()
    cache = IndexCache(store, max_entries=8, max_bytes=1 << 20, stats=stats)
    try:
        offset_index = await cache.offset_index(offset_ref, segment)
        assert not offset_index.missing and offset_index.lookup(150) == (140, 4000)
        time_index = await cache.time_index(time_ref, segment)
        assert not time_index.missing and (time_index.lookup(4), time_index.lookup(5)) == (120, 160)
        assert store.requests("get_range") == 2 and store.requests("get") == 0  # one range each
        assert stats.remote_bytes == len(offsets) + len(times) and stats.index_loads == 2
        await cache.offset_index(offset_ref, segment)
        assert store.requests("get_range") == 2 and stats.index_hits == 1
    finally:
        await cache.close()


async def test_index_cache_needs_no_request_for_an_empty_packed_index(store: InstrumentedStore) -> None:
    segment = index_segment()
    offset_ref, time_ref = index_refs("t", 0, segment.base_offset, segment.segment_uuid, (0, 0))
    await store.put(offset_ref.object_key, pack(b"", b""))
    store.reset()
    cache = IndexCache(store, max_entries=8, max_bytes=1 << 20, stats=ReadStats())
    try:
        offset_index = await cache.offset_index(offset_ref, segment)
        assert not offset_index.missing and offset_index.lookup(150) == (100, 0)  # no entry: the start
        assert not (await cache.time_index(time_ref, segment)).missing
        assert store.requests("get_range") == 0 and store.requests("get") == 0
    finally:
        await cache.close()


async def test_index_cache_falls_back_when_a_packed_range_is_short(store: InstrumentedStore) -> None:
    segment = index_segment()
    offset_ref, _ = index_refs("t", 0, segment.base_offset, segment.segment_uuid, (16, 24))
    await store.put(offset_ref.object_key, pack(struct.pack(">ii", 10, 1000), b""))  # shorter than listed
    stats = ReadStats()
    cache = IndexCache(store, max_entries=8, max_bytes=1 << 20, stats=stats)
    try:
        assert (await cache.offset_index(offset_ref, segment)).missing
        assert stats.index_invalid == 1
    finally:
        await cache.close()
