"""The remote read path against real uploaded segments, on a local directory and on a real moto_server.

The reference model is the list of produced records, and the local PartitionLog that wrote the segments:
a remote read must return exactly the bytes a local read of the same offset and ``max_bytes`` returns.
"""

from __future__ import annotations

import asyncio
import random

from tests.integration.remote_read.helpers import Partition, Produced, decode, replay, total_chunks
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.manifest import readable_segments
from tierlog.tiering.remote.reader import RemoteReader

CHUNK = 2048


async def test_replay_returns_every_record_in_order(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None and len(uploaded.segments) >= 5
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20)
    try:
        records, reads = await replay(reader, uploaded.manifest, max_bytes=3000)
        assert records == uploaded.records
        assert reads >= len(uploaded.segments)
        # a replay from the middle of a batch starts with that batch and skips nothing after it
        middle = uploaded.records[len(uploaded.records) // 2].offset + 1
        tail, _ = await replay(reader, uploaded.manifest, start=middle, max_bytes=700)
        assert tail == uploaded.records[middle:]
    finally:
        await reader.close()


async def test_every_offset_reads_like_the_local_log(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20)
    rng = random.Random(3)
    by_offset = {r.offset: r for r in uploaded.records}
    try:
        for offset in range(uploaded.end_offset):
            max_bytes = rng.choice([0, 1, 61, 500, 1500, 4000, 1 << 20])
            result = await reader.read(uploaded.manifest, offset, max_bytes)
            local = await asyncio.to_thread(uploaded.log.read, offset, max_bytes)
            assert result.data == local.data, f"offset {offset}, max_bytes {max_bytes}"
            batches = list(iter_batches(result.data))
            assert batches, "at least one batch"
            assert len(batches) == 1 or len(result.data) <= max_bytes
            first = batches[0][1]
            assert first.base_offset <= offset <= first.last_offset  # the batch holding the offset
            assert result.next_offset == batches[-1][1].next_offset
            segment = next(s for s in readable_segments(uploaded.manifest) if s.contains(offset))
            assert result.segment_uuid == segment.segment_uuid
            assert result.next_offset <= segment.last_offset + 1  # never past the segment
            records = decode(result.data)
            assert records == [by_offset[r.offset] for r in records]
    finally:
        await reader.close()


async def test_offset_for_timestamp_matches_the_local_log(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    timestamps = sorted({r.timestamp for r in uploaded.records})
    probes = [0, timestamps[0] - 1, *timestamps[::7], timestamps[-1], timestamps[-1] + 1, 2**62]
    try:
        for timestamp in probes:
            expected = await asyncio.to_thread(uploaded.log.offset_for_timestamp, timestamp)
            assert await reader.offset_for_timestamp(uploaded.manifest, timestamp) == expected, timestamp
        assert await reader.offset_for_timestamp(uploaded.manifest, timestamps[-1] + 1) is None
    finally:
        await reader.close()


async def test_sequential_replay_costs_one_get_per_chunk_then_none(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20, readahead_chunks=0)
    try:
        records, _ = await replay(reader, uploaded.manifest, max_bytes=1000)
        assert records == uploaded.records
        chunks = total_chunks(uploaded, CHUNK)
        assert read_store.requests("get_range") == chunks
        # each read starts where the last ended, or at a segment's first offset: no index is needed
        assert read_store.requests("get") == 0
        stats = reader.stats()
        assert stats["cache_misses"] == chunks
        assert stats["remote_requests"] == chunks and stats["index_loads"] == 0
        assert stats["sequential_reads"] == stats["reads"] - 1
        assert stats["remote_bytes"] == read_store.snapshot()["ops"]["get_range"]["bytes"]
        read_store.reset()
        again, _ = await replay(reader, uploaded.manifest, max_bytes=1000)
        assert again == uploaded.records
        assert read_store.requests("get_range") == 0 and read_store.requests("get") == 0
        assert reader.stats()["cache_misses"] == chunks
        # a read elsewhere (a consumer that seeks) loads that segment's offset index once: one ranged GET
        # of its packed .indexes object (the chunks are cached)
        middle = uploaded.records[len(uploaded.records) // 2 + 1].offset
        first = await reader.read(uploaded.manifest, middle, 100)
        await reader.read(uploaded.manifest, middle + 1, 100)
        assert read_store.requests("get_range") == 1 and read_store.requests("get") == 0
        assert reader.stats()["index_loads"] == 1 and first.data
    finally:
        await reader.close()


async def test_read_ahead_makes_sequential_reads_hits(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20, readahead_chunks=2)
    try:
        records, _ = await replay(reader, uploaded.manifest, max_bytes=1000, after_read=reader.wait_readahead)
        assert records == uploaded.records
        stats = reader.stats()
        chunks = total_chunks(uploaded, CHUNK)
        # only the first read's chunks (before the reads are known to be sequential) are waited for
        assert stats["cache_misses"] <= 2
        assert stats["readahead_hits"] >= chunks - 2
        assert stats["readahead_fetches"] == stats["readahead_hits"] + stats["readahead_unused"]
        assert read_store.requests("get_range") == chunks  # read-ahead fetched nothing twice
        assert read_store.requests("get") == 0  # a sequential replay needs no index
        assert stats["readahead_errors"] == 0
    finally:
        await reader.close()


async def test_two_consumers_of_one_partition_each_get_read_ahead(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20, readahead_chunks=2)
    middle = uploaded.records[len(uploaded.records) // 2].offset
    positions, ends = [0, middle], [middle, uploaded.end_offset]
    got: list[list[Produced]] = [[], []]
    reads = 0
    try:
        while any(p < e for p, e in zip(positions, ends, strict=True)):
            for i in (0, 1):  # interleaved, as two consumer groups replaying at different positions
                if positions[i] >= ends[i]:
                    continue
                result = await reader.read(uploaded.manifest, positions[i], 700)
                got[i].extend(r for r in decode(result.data) if positions[i] <= r.offset < ends[i])
                positions[i] = result.next_offset
                reads += 1
                await reader.wait_readahead()
        assert got[0] + got[1] == uploaded.records
        stats = reader.stats()
        assert stats["sequential_reads"] == reads - 2  # every read but each stream's first
        assert stats["cache_misses"] <= 4  # the first chunks of each stream only
        assert stats["readahead_hits"] >= total_chunks(uploaded, CHUNK) - 4
    finally:
        await reader.close()


async def test_small_cache_stays_within_its_bound(read_store: InstrumentedStore, uploaded: Partition) -> None:
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=3 * CHUNK, readahead_chunks=1)
    try:
        records, _ = await replay(reader, uploaded.manifest, max_bytes=1500)
        assert records == uploaded.records
        stats = reader.stats()
        assert stats["cache_bytes"] <= 3 * CHUNK
        assert stats["cache_evictions"] > 0
        await reader.wait_readahead()
        assert reader.stats()["cache_bytes"] <= 3 * CHUNK
    finally:
        await reader.close()
