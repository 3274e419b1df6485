"""Corrupt, torn, missing and inconsistent remote objects: always a clear error naming the object, never
wrong data; a missing or invalid ``.index`` only makes reads slower.
"""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path

import pytest

from tests.integration.remote_read.helpers import (
    Partition,
    decode,
    delete_indexes,
    put_offset_index,
    replay,
    upload,
    write_log,
)
from tierlog.tiering.codec.header import ATTRIBUTES_OFFSET, HEADER_SIZE, iter_batches
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.reader import RemoteObjectCorruptError, RemoteObjectMissingError, RemoteReader
from tierlog.wire.errors import CorruptRecordError, NotFoundError, OffsetOutOfRangeError, UnavailableError

CHUNK = 2048


def third_segment(part: Partition) -> mf.RemoteSegment:
    assert part.manifest is not None
    return mf.readable_segments(part.manifest)[2]


async def read_shuffled(reader: RemoteReader, part: Partition, offsets: list[int]) -> None:
    """Read ``offsets`` in a random order (so reads are not sequential and need the index); each read
    must start with the record asked for and hold only produced records.
    """
    assert part.manifest is not None
    by_offset = {r.offset: r for r in part.records}
    random.Random(5).shuffle(offsets)
    for offset in offsets:
        result = await reader.read(part.manifest, offset, 300)
        records = [r for r in decode(result.data) if r.offset >= offset]
        assert records and records[0] == by_offset[offset]
        assert all(by_offset[r.offset] == r for r in records)


async def batch_positions(store: InstrumentedStore, key: str) -> list[tuple[int, int, int]]:
    """``(position, base_offset, last_offset)`` of every batch in a remote ``.log`` object."""
    data = await store.get(key)
    return [(pos, h.base_offset, h.last_offset) for pos, h in iter_batches(data)]


@pytest.mark.parametrize("where", ["attributes", "payload", "last byte", "magic"])
async def test_flipped_byte_is_a_corrupt_error_naming_the_key(
    read_store: InstrumentedStore, uploaded: Partition, where: str
) -> None:
    segment = third_segment(uploaded)
    key = uploaded.keys(segment)["log"]
    data = bytearray(await read_store.get(key))
    batches = await batch_positions(read_store, key)
    position, base, last = batches[len(batches) // 2]
    end = batches[len(batches) // 2 + 1][0]
    flip = {
        "attributes": position + ATTRIBUTES_OFFSET,
        "payload": position + HEADER_SIZE + 3,
        "last byte": end - 1,
        "magic": position + 16,
    }[where]
    data[flip] ^= 0x40
    await read_store.put(key, bytes(data))
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        for offset in (base, last):
            with pytest.raises(RemoteObjectCorruptError) as caught:
                await reader.read(uploaded.manifest, offset, 1 << 20)
            assert caught.value.key == key and key in str(caught.value)
            assert isinstance(caught.value, CorruptRecordError)
        # a read that ends before the bad batch is served; one that would include it fails whole
        first_of_segment = await reader.read(uploaded.manifest, segment.base_offset, 1)
        assert first_of_segment.next_offset <= base
        with pytest.raises(RemoteObjectCorruptError):
            await reader.read(uploaded.manifest, segment.base_offset, 1 << 20)
        assert reader.stats()["corrupt_errors"] >= 3
    finally:
        await reader.close()


async def test_deleted_log_object_is_a_clear_not_found(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    segment = third_segment(uploaded)
    key = uploaded.keys(segment)["log"]
    await read_store.delete(key)
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        with pytest.raises(RemoteObjectMissingError) as caught:
            await reader.read(uploaded.manifest, segment.base_offset + 1, 1000)
        assert isinstance(caught.value, NotFoundError)
        assert caught.value.key == key and "missing" in str(caught.value)
        # other segments still read
        first = mf.readable_segments(uploaded.manifest)[0]
        result = await reader.read(uploaded.manifest, first.base_offset, 1000)
        assert result.segment_uuid == first.segment_uuid
        # and the failure was not cached: once the object is back, the read works
        info = next(i for i in uploaded.segments if i.base_offset == segment.base_offset)
        await read_store.put_file(key, info.log_path)
        again = await reader.read(uploaded.manifest, segment.base_offset + 1, 1000)
        assert again.segment_uuid == segment.segment_uuid
    finally:
        await reader.close()


async def test_torn_log_object_is_a_corrupt_error(read_store: InstrumentedStore, uploaded: Partition) -> None:
    segment = third_segment(uploaded)
    key = uploaded.keys(segment)["log"]
    data = await read_store.get(key)
    await read_store.put(key, data[: len(data) - 10])
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        with pytest.raises(RemoteObjectCorruptError) as caught:
            await reader.read(uploaded.manifest, segment.last_offset, 1 << 20)
        assert caught.value.key == key and "torn" in str(caught.value)
    finally:
        await reader.close()


LAYOUTS = pytest.mark.parametrize("uploaded", ["packed", "separate"], indirect=True)


@LAYOUTS
async def test_missing_index_falls_back_to_a_scan(read_store: InstrumentedStore, uploaded: Partition) -> None:
    assert uploaded.manifest is not None
    for segment in mf.readable_segments(uploaded.manifest):
        await delete_indexes(read_store, uploaded, segment)
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        records, _ = await replay(reader, uploaded.manifest, max_bytes=900)
        assert records == uploaded.records
        await read_shuffled(reader, uploaded, [r.offset for r in uploaded.records])
        stats = reader.stats()
        assert stats["index_missing"] == len(uploaded.segments)  # each missing index looked up once
        assert stats["index_fallbacks"] > len(uploaded.records) // 2
        assert stats["index_loads"] == 0
        timestamp = uploaded.records[len(uploaded.records) // 2].timestamp
        expected = await asyncio.to_thread(uploaded.log.offset_for_timestamp, timestamp)
        assert await reader.offset_for_timestamp(uploaded.manifest, timestamp) == expected
    finally:
        await reader.close()


@LAYOUTS
async def test_invalid_index_falls_back_to_a_scan(read_store: InstrumentedStore, uploaded: Partition) -> None:
    segment = third_segment(uploaded)
    not_increasing = struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200)
    await put_offset_index(read_store, uploaded, segment, not_increasing)
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        await read_shuffled(
            reader, uploaded, [r.offset for r in uploaded.records if segment.contains(r.offset)]
        )
        stats = reader.stats()
        assert stats["index_invalid"] == 1 and stats["index_fallbacks"] > 0
    finally:
        await reader.close()


@LAYOUTS
async def test_index_disagreeing_with_the_log_is_a_corrupt_error_naming_the_index(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    segment = third_segment(uploaded)
    keys = uploaded.keys(segment)
    batches = await batch_positions(read_store, keys["log"])
    _, _, last = batches[3]
    # a well-formed entry whose position is one batch off
    wrong = struct.pack(">ii", last - segment.base_offset, batches[2][0])
    index_key = await put_offset_index(read_store, uploaded, segment, wrong)
    assert uploaded.manifest is not None
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        with pytest.raises(RemoteObjectCorruptError) as caught:
            await reader.read(uploaded.manifest, last + 1, 1000)
        assert caught.value.key == index_key
        # reads that the entry does not steer are unaffected
        result = await reader.read(uploaded.manifest, segment.base_offset, 100)
        assert result.segment_uuid == segment.segment_uuid
    finally:
        await reader.close()


async def test_offsets_outside_the_remote_tier_are_out_of_range(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    segments = mf.readable_segments(uploaded.manifest)
    raised = mf.set_log_start_offset(uploaded.manifest, segments[1].base_offset + 2)
    reader = RemoteReader(read_store, chunk_bytes=CHUNK)
    try:
        with pytest.raises(OffsetOutOfRangeError) as caught:
            await reader.read(uploaded.manifest, uploaded.end_offset, 1000)
        assert (caught.value.log_start_offset, caught.value.log_end_offset) == (0, uploaded.end_offset)
        with pytest.raises(OffsetOutOfRangeError) as caught:
            await reader.read(raised, segments[1].base_offset + 1, 1000)
        assert caught.value.log_start_offset == segments[1].base_offset + 2
        # a segment no longer copy_finished is not read
        deleting = mf.transition(uploaded.manifest, segments[-1].segment_uuid, mf.SegmentState.DELETE_STARTED)
        with pytest.raises(OffsetOutOfRangeError):
            await reader.read(deleting, segments[-1].base_offset, 1000)
        # an offset in a gap between readable segments reads from the next one
        gap = mf.transition(uploaded.manifest, segments[2].segment_uuid, mf.SegmentState.DELETE_STARTED)
        result = await reader.read(gap, segments[2].base_offset, 1000)
        assert result.segment_uuid == segments[3].segment_uuid
    finally:
        await reader.close()


async def test_batch_larger_than_a_chunk_is_fetched_whole(
    read_store: InstrumentedStore, tmp_path: Path
) -> None:
    part = await asyncio.to_thread(
        write_log, tmp_path / "big-0", topic="big", batches=30, big_batch_at=12, big_value=900
    )
    try:
        await upload(read_store, part)
        assert part.manifest is not None
        big = next(b for b in part.records if len(b.value or b"") == 900)
        reader = RemoteReader(read_store, chunk_bytes=1024, cache_bytes=1 << 20)
        try:
            result = await reader.read(part.manifest, big.offset, 1 << 20)
            batches = list(iter_batches(result.data))
            assert len(batches) == 1 and batches[0][1].size > 1024
            assert reader.stats()["oversized_reads"] == 1
            records, _ = await replay(reader, part.manifest, max_bytes=1 << 20)
            assert records == part.records
        finally:
            await reader.close()
    finally:
        await asyncio.to_thread(part.log.close)


async def test_failed_read_ahead_is_only_counted(read_store: InstrumentedStore, uploaded: Partition) -> None:
    assert uploaded.manifest is not None
    faults = FaultInjectingStore(read_store)
    reader = RemoteReader(faults, chunk_bytes=CHUNK, readahead_chunks=3)
    try:
        first = await reader.read(uploaded.manifest, 0, 500)
        faults.fail_next("get_range", 2, lambda: UnavailableError("injected"))
        # the sequential read starts its read-ahead first: the injected failures hit it
        records, _ = await replay(reader, uploaded.manifest, start=first.next_offset, max_bytes=500)
        assert records == uploaded.records[first.next_offset :]
        await reader.wait_readahead()
        stats = reader.stats()
        assert stats["readahead_errors"] == 2 and faults.pending("get_range") == 0
    finally:
        await reader.close()
