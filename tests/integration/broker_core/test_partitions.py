"""Partition behaviour through the broker: long polls woken by appends, acks=0, live configs, maintenance."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading

import pytest

from tests.integration.broker import START_MS
from tierlog.service.metrics import Metrics
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.service.web.keys import METRICS
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.log import ManualClock, ReadResult
from tierlog.wire.errors import CorruptRecordError, NotFoundError, OffsetOutOfRangeError

from .conftest import Node, StartNode, batch


def values(data: bytes) -> list[bytes | None]:
    return [record.value for _, record in iter_records(data)]


async def test_long_poll_wakes_on_append(node: Node) -> None:
    await node.create("poll", 1)
    partition = node.broker.topic("poll").partition(0)
    reader = asyncio.create_task(partition.read(0, 1 << 20, max_wait_ms=60_000))
    await asyncio.sleep(0)
    assert not reader.done()
    await partition.append(batch(b"first"))
    result = await reader
    assert values(result.data) == [b"first"]
    assert result.log_end_offset == 1


async def test_long_poll_waits_for_min_bytes(node: Node) -> None:
    await node.create("minb", 1)
    partition = node.broker.topic("minb").partition(0)
    one = batch(b"x")
    reader = asyncio.create_task(partition.read(0, 1 << 20, max_wait_ms=60_000, min_bytes=2 * len(one)))
    await partition.append(one)
    await asyncio.sleep(0)
    assert not reader.done()
    await partition.append(batch(b"y"))
    assert values((await reader).data) == [b"x", b"y"]


async def test_long_poll_times_out_empty(node: Node) -> None:
    await node.create("quiet", 1)
    partition = node.broker.topic("quiet").partition(0)
    result = await partition.read(0, 1024, max_wait_ms=20)
    assert result.data == b""
    slice_ = await partition.read_slice(0, 1024, max_wait_ms=20)
    assert slice_.size == 0
    slice_.close()


async def test_read_then_runs_its_work_off_the_loop_with_the_read(node: Node) -> None:
    """read_then's work runs once, in the log I/O thread, on the result it answers with; it is left to
    the caller when the poll ends short of min_bytes or the result is over then_up_to; what it raises
    reaches the caller and the partition reads on."""
    await node.create("then", 1)
    partition = node.broker.topic("then").partition(0)
    loop_thread = threading.get_ident()
    calls: list[tuple[int, bytes]] = []

    def then(result: ReadResult) -> int:
        calls.append((threading.get_ident(), result.data))
        return len(values(result.data))

    reader = asyncio.create_task(
        partition.read_then(0, 1 << 20, then, then_up_to=1 << 20, max_wait_ms=60_000)
    )
    await partition.append(batch(b"a", b"b"))
    result, answered = await reader
    assert answered == 2 and values(result.data) == [b"a", b"b"]
    assert len(calls) == 1 and calls[0][0] != loop_thread and calls[0][1] == result.data

    short, none = await partition.read_then(
        0, 1 << 20, then, then_up_to=1 << 20, max_wait_ms=20, min_bytes=1 << 20
    )
    assert none is None and values(short.data) == [b"a", b"b"] and len(calls) == 1
    large, left = await partition.read_then(0, 1 << 20, then, then_up_to=len(result.data) - 1)
    assert left is None and large.data == result.data and len(calls) == 1

    def fail(result: ReadResult) -> int:
        raise CorruptRecordError("bad bytes")

    with pytest.raises(CorruptRecordError, match="bad bytes"):
        await partition.read_then(0, 1 << 20, fail, then_up_to=1 << 20)
    assert values((await partition.read(0, 1 << 20)).data) == [b"a", b"b"]


async def test_shutdown_interrupts_long_polls(node: Node) -> None:
    await node.create("stopping", 2)
    readers = [
        asyncio.create_task(partition.read(0, 1024, max_wait_ms=600_000))
        for partition in node.broker.topic("stopping").partitions
    ]
    await asyncio.sleep(0)
    node.broker.interrupt_polls()
    results = await asyncio.gather(*readers)
    assert [r.data for r in results] == [b"", b""]
    partition = node.broker.topic("stopping").partition(0)
    assert (await partition.read(0, 1024, max_wait_ms=600_000)).data == b""


async def test_read_slice_and_offsets(node: Node) -> None:
    await node.create("slices", 1)
    partition = node.broker.topic("slices").partition(0)
    await partition.append(batch(b"a", b"b", timestamp=START_MS))
    await partition.append(batch(b"c", timestamp=START_MS + 10))
    with await partition.read_slice(0, 1 << 20) as region:
        assert values(region.read()) == [b"a", b"b", b"c"]
    assert await partition.offset_for_timestamp(START_MS + 5) == (2, START_MS + 10)
    assert await partition.offset_for_timestamp(START_MS + 50) is None
    with pytest.raises(OffsetOutOfRangeError):
        await partition.read(4, 1024)


async def test_corrupt_append_rejected(node: Node) -> None:
    await node.create("crc", 1)
    partition = node.broker.topic("crc").partition(0)
    broken = bytearray(batch(b"payload"))
    broken[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        await partition.append(bytes(broken))
    assert partition.log_end_offset == 0


async def test_background_appends_keep_order_and_drain(node: Node) -> None:
    await node.create("fire", 1)
    partition = node.broker.topic("fire").partition(0)
    for i in range(20):
        partition.append_in_background(batch(str(i).encode()))
    bad = bytearray(batch(b"bad"))
    bad[-1] ^= 1
    partition.append_in_background(bytes(bad))
    await node.broker.background.drain()
    assert values((await partition.read(0, 1 << 20)).data) == [str(i).encode() for i in range(20)]
    metrics: Metrics = node.app[METRICS]
    assert metrics.value("tierlog_background_append_errors_total", topic="fire", error_code="50002") == 1


async def test_delete_wakes_pollers_and_fails_calls(node: Node) -> None:
    await node.create("doomed", 1)
    partition = node.broker.topic("doomed").partition(0)
    reader = asyncio.create_task(partition.read(0, 1024, max_wait_ms=60_000))
    await asyncio.sleep(0)
    await node.broker.delete_topic("doomed")
    with pytest.raises(NotFoundError) as info:
        await reader
    assert info.value.code == 40401
    with pytest.raises(NotFoundError):
        await partition.append(batch(b"late"))
    with pytest.raises(NotFoundError):
        partition.append_in_background(batch(b"late"))


async def test_segment_bytes_applies_live(node: Node) -> None:
    await node.create("rolling", 1)
    partition = node.broker.topic("rolling").partition(0)
    await partition.append(batch(b"a" * 100))
    await partition.append(batch(b"b" * 100))
    assert len(partition.log.segments()) == 1
    await node.broker.alter_topic_configs("rolling", {"segment.bytes": "150"})
    for _ in range(3):
        await partition.append(batch(b"c" * 100))
    assert len(partition.log.segments()) >= 3


async def test_config_changes_publish_one_typed_snapshot(node: Node) -> None:
    await node.create("live", 1)
    topic = node.broker.topic("live")
    before = topic.config
    assert (before.max_message_bytes, before.compression_type) == (1048588, "producer")
    await node.broker.alter_topic_configs("live", {"max.message.bytes": "1000", "compression.type": "gzip"})
    after = topic.config
    assert (after.max_message_bytes, after.compression_type) == (1000, "gzip")
    assert (before.max_message_bytes, before.compression_type) == (1048588, "producer")
    assert topic.partition(0).config is after
    assert topic.configs()["max.message.bytes"] == "1000"
    rest = {"Content-Type": "application/vnd.kafka.binary.v2+json"}

    def produce(value: bytes) -> str:
        return json.dumps({"records": [{"value": base64.b64encode(value).decode()}]})

    too_big = await node.client.post("/topics/live", data=produce(os.urandom(2000)), headers=rest)
    assert too_big.status == 413 and (await too_big.json())["error_code"] == 41301
    fits = await node.client.post("/topics/live", data=produce(b"v" * 2000), headers=rest)
    assert fits.status == 200, await fits.text()
    stored = (await topic.partition(0).read(0, 1 << 20)).data
    assert [header.compression for _, header in iter_batches(stored)] == [Compression.GZIP]


async def test_retention_pass_with_injected_clock(node: Node, clock: ManualClock) -> None:
    await node.create("aging", 1, segment_bytes="150", retention_ms="60000")
    partition = node.broker.topic("aging").partition(0)
    for i in range(4):
        await partition.append(batch(b"v" * 100, timestamp=clock.now_ms() + i))
    maintenance = node.app[MAINTENANCE]
    assert await maintenance.retention_pass() == 0
    assert partition.log_start_offset == 0
    clock.advance(60_001 + 10)
    assert await maintenance.retention_pass() == 3
    assert partition.log_start_offset == 3
    assert partition.log_end_offset == 4
    metrics: Metrics = node.app[METRICS]
    assert metrics.value("tierlog_segments_deleted_total", topic="aging") == 3


async def test_flush_pass_rolls_by_segment_ms(node: Node, clock: ManualClock) -> None:
    await node.create("timed", 1, segment_ms="1000")
    partition = node.broker.topic("timed").partition(0)
    await partition.append(batch(b"x", timestamp=clock.now_ms()))
    maintenance = node.app[MAINTENANCE]
    await maintenance.flush_pass()
    assert partition.log.sealed_segments() == []
    clock.advance(1001)
    await maintenance.flush_pass()
    assert [s.base_offset for s in partition.log.sealed_segments()] == [0]


async def test_maintenance_loops_run(start_node: StartNode) -> None:
    node = await start_node(log_retention_check_interval_ms="1", log_flush_scheduler_interval_ms="1")
    maintenance = node.app[MAINTENANCE]
    await asyncio.wait_for(maintenance.wait_for_pass("retention", 2), 30)
    await asyncio.wait_for(maintenance.wait_for_pass("flush", 2), 30)
    assert maintenance.passes["retention"] >= 2
