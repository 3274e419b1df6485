"""AsyncConsumer with manual assignment against a real broker: positions, seeks, resets, commits."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.broker import RunningBroker
from tierlog.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    IllegalStateError,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    OffsetOutOfRangeError,
    TopicPartition,
    UnknownTopicError,
)

TP0 = TopicPartition("events", 0)
TP1 = TopicPartition("events", 1)


@pytest.fixture
async def events(broker: RunningBroker) -> RunningBroker:
    """Topic ``events``: 2 partitions of 50 records; record i of a partition has timestamp 1000 * (i + 1)."""
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("events", 2)
    async with AsyncProducer(broker.url, linger_ms=5, batch_size=512) as producer:
        for partition in (0, 1):
            for i in range(50):
                await producer.send(
                    "events", b"%d-%d" % (partition, i), partition=partition, timestamp=1000 * (i + 1)
                )
    return broker


async def poll_n(consumer: AsyncConsumer, count: int, *, within: float = 10.0) -> list[ConsumerRecord]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    records: list[ConsumerRecord] = []
    while len(records) < count and loop.time() < deadline:
        records += await consumer.poll(timeout=deadline - loop.time(), max_records=count - len(records))
    assert len(records) == count, f"polled {len(records)} of {count}"
    return records


async def test_poll_returns_each_partition_in_order_and_respects_max_poll_records(
    events: RunningBroker,
) -> None:
    async with AsyncConsumer(
        bootstrap_servers=events.url, auto_offset_reset="earliest", max_poll_records=7
    ) as c:
        c.assign([TP0, TP1])
        assert c.assignment() == {TP0, TP1}
        first = await c.poll(timeout=5)
        assert 0 < len(first) <= 7
        records = first + await poll_n(c, 100 - len(first))
    for tp in (TP0, TP1):
        offsets = [r.offset for r in records if r.partition == tp.partition]
        assert offsets == list(range(50))
    assert records[0].topic == "events" and records[0].timestamp_type == 0


async def test_seek_position_and_seek_to_ends(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url, auto_offset_reset="latest") as consumer:
        consumer.assign([TP0])
        assert await consumer.position(TP0) == 50
        consumer.seek(TP0, 45)
        assert await consumer.position(TP0) == 45
        assert [r.offset for r in await poll_n(consumer, 5)] == [45, 46, 47, 48, 49]
        assert await consumer.position(TP0) == 50
        consumer.seek_to_beginning(TP0)
        assert [r.value for r in await poll_n(consumer, 2)] == [b"0-0", b"0-1"]
        consumer.seek_to_end()
        assert await consumer.position(TP0) == 50
        assert await consumer.poll(timeout=0.05) == []
        with pytest.raises(IllegalStateError):
            consumer.seek(TP1, 0)


async def test_offsets_for_times_and_watermarks(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url) as consumer:
        found = await consumer.offsets_for_times({TP0: 1, TP1: 10_000_000})
        first = found[TP0]
        assert first is not None and first.offset == 0 and first.timestamp >= 1000
        assert found[TP1] is None
        middle = (await consumer.offsets_for_times({TP0: 30_500}))[TP0]
        assert isinstance(middle, OffsetAndTimestamp)
        assert middle.offset <= 30 and middle.timestamp >= 30_500
        assert await consumer.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
        assert await consumer.end_offsets([TP0, TP1]) == {TP0: 50, TP1: 50}
        assert await consumer.partitions_for_topic("events") == {0, 1}
        with pytest.raises(UnknownTopicError):
            await consumer.partitions_for_topic("nothing-here")


async def test_out_of_range_resets_by_policy(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 1000)
        assert (await poll_n(consumer, 1))[0].offset == 0
    async with AsyncConsumer(bootstrap_servers=events.url, auto_offset_reset="none") as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 1000)
        with pytest.raises(OffsetOutOfRangeError) as caught:
            await consumer.poll(timeout=5)
        assert (caught.value.log_start_offset, caught.value.log_end_offset) == (0, 50)
    async with AsyncConsumer(
        bootstrap_servers=events.url, auto_offset_reset="none", group_id="fresh"
    ) as consumer:
        consumer.assign([TP1])
        with pytest.raises(NoOffsetForPartitionError):
            await consumer.position(TP1)


async def test_long_poll_wakes_on_a_new_record(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url, fetch_max_wait_ms=10_000) as consumer:
        consumer.assign([TP1])
        assert await consumer.position(TP1) == 50
        polling = asyncio.create_task(consumer.poll(timeout=20))
        async with AsyncProducer(events.url) as producer:
            await producer.send_and_wait("events", b"late", partition=1)
        records = await polling
    assert [(r.offset, r.value) for r in records] == [(50, b"late")]


async def test_manual_commits_without_group_membership(events: RunningBroker) -> None:
    results: list[tuple[dict[TopicPartition, OffsetAndMetadata], Exception | None]] = []
    async with AsyncConsumer(
        bootstrap_servers=events.url,
        group_id="manual",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        consumer.assign([TP0, TP1])
        assert await consumer.committed(TP0) is None
        await poll_n(consumer, 30)
        positions = {tp: await consumer.position(tp) for tp in (TP0, TP1)}
        await consumer.commit()
        assert {tp: await consumer.committed(tp) for tp in (TP0, TP1)} == positions
        committed = await consumer.commit_async({TP0: 3}, callback=lambda o, e: results.append((o, e)))
        assert committed == {TP0: OffsetAndMetadata(3, "")}
        assert results == [({TP0: OffsetAndMetadata(3, "")}, None)]
        await consumer.commit({TP1: OffsetAndMetadata(7, "checkpoint")})
        assert await consumer.committed(TP1) == 7
    async with AsyncConsumer(bootstrap_servers=events.url, group_id="manual") as consumer:
        consumer.assign([TP0, TP1])
        assert (await poll_n(consumer, 1))[0].offset in (3, 7)
        assert await consumer.position(TP0) >= 3


async def test_pause_holds_records_back(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TP0, TP1])
        consumer.pause(TP0)
        records = await poll_n(consumer, 50)
        assert {r.partition for r in records} == {1}
        consumer.resume(TP0)
        assert {r.partition for r in await poll_n(consumer, 50)} == {0}


async def test_deserializers_apply_to_polled_records(events: RunningBroker) -> None:
    async with AsyncConsumer(
        bootstrap_servers=events.url,
        auto_offset_reset="earliest",
        key_deserializer=lambda k: "no key" if k is None else k.decode(),
        value_deserializer=lambda v: (v or b"").decode().split("-"),
    ) as consumer:
        consumer.assign([TP0])
        record = (await poll_n(consumer, 1))[0]
        assert (record.key, record.value) == ("no key", ["0", "0"])


async def test_mixing_subscribe_and_assign_is_refused(events: RunningBroker) -> None:
    async with AsyncConsumer(bootstrap_servers=events.url, group_id="g") as consumer:
        consumer.assign([TP0])
        with pytest.raises(IllegalStateError):
            consumer.subscribe(["events"])
    async with AsyncConsumer(bootstrap_servers=events.url) as consumer:
        with pytest.raises(IllegalStateError):
            consumer.subscribe(["events"])
        with pytest.raises(IllegalStateError):
            await consumer.commit()
