"""Several partitions read at once through one RemoteReader: no global lock across awaits, single-flight
GETs for readers of the same chunk, read-ahead owned and cancelled by ``close``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.integration.remote_read.helpers import Partition, replay, upload, write_log
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.reader import RemoteReader
from tierlog.wire.errors import InvalidRequestError

CHUNK = 2048


class GatedStore:
    """Passes everything to ``inner``, but ``get_range`` of keys containing ``gated`` waits for ``gate``."""

    def __init__(self, inner: ObjectStore, gated: str) -> None:
        self.inner = inner
        self.gated = gated
        self.gate = asyncio.Event()
        self.waiting = 0
        self.cancelled = 0
        self.entered = asyncio.Event()

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        if self.gated in key:
            self.waiting += 1
            self.entered.set()
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            finally:
                self.waiting -= 1
        return await self.inner.get_range(key, start, end)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def partitions(store: ObjectStore, tmp_path: Path, count: int) -> list[Partition]:
    parts = []
    for n in range(count):
        part = await asyncio.to_thread(
            write_log, tmp_path / f"t{n}-{n}", topic=f"t{n}", partition=n, batches=60, seed=n
        )
        await upload(store, part)
        parts.append(part)
    return parts


async def close_all(parts: list[Partition]) -> None:
    for part in parts:
        await asyncio.to_thread(part.log.close)


async def test_partitions_replay_concurrently(read_store: InstrumentedStore, tmp_path: Path) -> None:
    parts = await partitions(read_store, tmp_path, 3)
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, cache_bytes=1 << 20, readahead_chunks=2)
    try:
        results = await asyncio.gather(
            *(replay(reader, p.manifest, max_bytes=800) for p in parts if p.manifest is not None)
        )
        assert [records for records, _ in results] == [p.records for p in parts]
        assert reader.stats()["reads"] == sum(reads for _, reads in results)
    finally:
        await reader.close()
        await close_all(parts)


async def test_a_stalled_partition_does_not_block_the_others(
    read_store: InstrumentedStore, tmp_path: Path
) -> None:
    parts = await partitions(read_store, tmp_path, 2)
    slow, fast = parts
    assert slow.manifest is not None and fast.manifest is not None
    gated = GatedStore(read_store, f"{slow.topic}/{slow.partition}/")
    reader = RemoteReader(gated, chunk_bytes=CHUNK)
    try:
        stalled = asyncio.create_task(reader.read(slow.manifest, 0, 1000))
        await gated.entered.wait()
        records, _ = await replay(reader, fast.manifest, max_bytes=1000)
        assert records == fast.records
        assert not stalled.done()
        gated.gate.set()
        result = await stalled
        assert result.next_offset > 0
    finally:
        await reader.close()
        await close_all(parts)


async def test_readers_of_one_chunk_share_one_get(read_store: InstrumentedStore, uploaded: Partition) -> None:
    assert uploaded.manifest is not None
    offset = uploaded.records[len(uploaded.records) // 3].offset
    probe = RemoteReader(read_store, chunk_bytes=CHUNK, readahead_chunks=0)
    await probe.read(uploaded.manifest, offset, 3000)
    one_read = read_store.requests("get_range")  # its chunks and the offset index (a range of .indexes)
    await probe.close()
    assert one_read >= 2

    read_store.reset()
    reader = RemoteReader(read_store, chunk_bytes=CHUNK, readahead_chunks=0)
    try:
        results = await asyncio.gather(*(reader.read(uploaded.manifest, offset, 3000) for _ in range(10)))
        assert len({r.data for r in results}) == 1
        assert read_store.requests("get_range") == one_read  # each chunk and the index, loaded once
        assert read_store.requests("get") == 0
        assert reader.stats()["singleflight_joins"] >= 9
    finally:
        await reader.close()


async def test_close_cancels_and_awaits_read_ahead(
    read_store: InstrumentedStore, uploaded: Partition
) -> None:
    assert uploaded.manifest is not None
    first_key = uploaded.keys(uploaded.manifest.segments[0])["log"]
    second_key = uploaded.keys(uploaded.manifest.segments[1])["log"]
    gated = GatedStore(read_store, second_key)
    reader = RemoteReader(gated, chunk_bytes=CHUNK, readahead_chunks=8)
    first = await reader.read(uploaded.manifest, 0, 500)
    await reader.read(uploaded.manifest, first.next_offset, 500)  # sequential: read-ahead starts
    await gated.entered.wait()  # read-ahead reached the next segment and is stuck there
    assert gated.waiting > 0 and first_key != second_key
    stuck = gated.waiting
    await reader.close()
    assert gated.cancelled == stuck and gated.waiting == 0
    with pytest.raises(InvalidRequestError, match="closed"):
        await reader.read(uploaded.manifest, 0, 500)
