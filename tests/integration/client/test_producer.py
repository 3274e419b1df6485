"""AsyncProducer against a real broker: placement, ordering, batching, codecs, acks, callbacks, errors."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.client.helpers import raw_batches, read_topic, rest_produce_keyed
from tierlog.client import (
    AsyncAdmin,
    AsyncProducer,
    ClientClosedError,
    RecordMetadata,
    RecordTooLargeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from tierlog.client.types import LOG_APPEND_TIME
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.partitioner import partition_for_key


async def test_keyed_records_land_where_the_broker_puts_the_same_keys(broker: RunningBroker) -> None:
    keys = [f"user-{i}".encode() for i in range(60)]
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("keyed", 6)
    async with AsyncProducer(broker.url, linger_ms=2) as producer:
        futures = [await producer.send("keyed", b"client", key=k) for k in keys]
        ours = [(await f).partition for f in futures]
    theirs = await rest_produce_keyed(broker.url, "keyed", keys)
    assert ours == theirs
    assert ours == [partition_for_key(k, 6) for k in keys]
    assert len(set(ours)) > 1


async def test_records_of_a_partition_keep_their_send_order(broker: RunningBroker) -> None:
    async with AsyncProducer(
        broker.url, linger_ms=1, batch_size=512, max_in_flight_requests_per_connection=3
    ) as p:
        futures = [await p.send("ordered", f"{i}".encode(), key=f"k{i % 3}".encode()) for i in range(600)]
        metadata = [await f for f in futures]
    by_partition: dict[int, list[int]] = {}
    for m in metadata:
        by_partition.setdefault(m.partition, []).append(m.offset)
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())
    records = await read_topic(broker.url, "ordered", 600)
    for partition in by_partition:
        values = [int(r.value or b"") for r in records if r.partition == partition]
        keys = {r.key for r in records if r.partition == partition}
        assert values == sorted(values)
        assert all(
            int(v) % 3 == int((k or b"k0")[1:])
            for v, k in zip(values, [r.key for r in records if r.partition == partition], strict=True)
        )
        assert keys


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_each_codec_round_trips_and_is_stored_compressed(broker: RunningBroker, codec: str) -> None:
    topic = f"codec-{codec}"
    values = [(f"value {i} " * 20).encode() for i in range(200)]
    async with AsyncProducer(
        broker.url, compression_type=codec, linger_ms=20, batch_size=1 << 20
    ) as producer:
        futures = [
            await producer.send(topic, v, key=b"same", headers=[("n", str(i).encode()), ("nil", None)])
            for i, v in enumerate(values)
        ]
        partition = (await futures[-1]).partition
    records = await read_topic(broker.url, topic, len(values))
    assert [r.value for r in records] == values
    assert records[7].headers == (("n", b"7"), ("nil", None))
    headers = await raw_batches(broker.url, topic, partition)
    assert {h.compression for h in headers} == {int(Compression.from_name(codec))}
    assert len(headers) < len(values)


async def test_linger_gathers_records_into_one_batch(broker: RunningBroker) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("linger", 1)
    async with AsyncProducer(broker.url, linger_ms=60_000, batch_size=1 << 20) as producer:
        futures = [await producer.send("linger", b"x%d" % i) for i in range(50)]
        assert not any(f.done() for f in futures)
        await producer.flush()
        assert all(f.done() for f in futures)
    assert [f.result().offset for f in futures] == list(range(50))
    assert [h.records_count for h in await raw_batches(broker.url, "linger", 0)] == [50]


async def test_batch_size_splits_batches(broker: RunningBroker) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("small-batches", 1)
    async with AsyncProducer(broker.url, linger_ms=50, batch_size=1024) as producer:
        for _ in range(40):
            await producer.send("small-batches", b"v" * 100)
    headers = await raw_batches(broker.url, "small-batches", 0)
    assert sum(h.records_count for h in headers) == 40
    assert len(headers) >= 4
    assert max(h.size for h in headers) <= 1024 + 200


@pytest.mark.parametrize("acks", [0, 1, -1, "all"])
async def test_acks_settings_deliver(broker: RunningBroker, acks: int | str) -> None:
    topic = f"acks-{str(acks).replace('-', 'm')}"
    async with AsyncProducer(broker.url, acks=acks) as producer:
        metadata = [await producer.send_and_wait(topic, b"v%d" % i, partition=0) for i in range(5)]
    if acks == 0:
        assert [m.offset for m in metadata] == [-1] * 5
    else:
        assert [m.offset for m in metadata] == [0, 1, 2, 3, 4]
    assert [r.value for r in await read_topic(broker.url, topic, 5)] == [b"v%d" % i for i in range(5)]


async def test_callbacks_fire_once_with_metadata_or_error(broker: RunningBroker) -> None:
    seen: list[tuple[RecordMetadata | None, Exception | None]] = []
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("tiny", 1, {"max.message.bytes": "1024"})
    async with AsyncProducer(broker.url) as producer:
        ok = await producer.send("tiny", b"small", callback=lambda m, e: seen.append((m, e)))
        assert (await ok).offset == 0
        too_big = await producer.send("tiny", b"x" * 5000, callback=lambda m, e: seen.append((m, e)))
        with pytest.raises(RecordTooLargeError) as caught:
            await too_big
    assert caught.value.code == 41301
    assert seen[0] == (RecordMetadata("tiny", 0, 0, seen[0][0].timestamp if seen[0][0] else -1), None)
    assert seen[1][0] is None and isinstance(seen[1][1], RecordTooLargeError)
    assert len(seen) == 2


async def test_timestamps_and_log_append_time(broker: RunningBroker) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
    async with AsyncProducer(broker.url) as producer:
        created = await producer.send_and_wait("plain", b"v", partition=0, timestamp=1_600_000_000_000)
        appended = await producer.send_and_wait("appended", b"v", timestamp=1_600_000_000_000)
    assert created.timestamp == 1_600_000_000_000
    assert appended.timestamp > 1_600_000_000_000
    (record,) = await read_topic(broker.url, "appended", 1)
    assert (record.timestamp, record.timestamp_type) == (appended.timestamp, LOG_APPEND_TIME)


async def test_unknown_topic_and_partition_are_typed_errors(broker: RunningBroker) -> None:
    async with AsyncProducer(broker.url, allow_auto_create_topics=False) as producer:
        with pytest.raises(UnknownTopicError):
            await producer.send("missing", b"v")
    async with AsyncProducer(broker.url) as producer:
        assert await producer.partitions_for("created-on-demand") == {0, 1, 2}
        with pytest.raises(UnknownPartitionError):
            await producer.send("created-on-demand", b"v", partition=3)
        with pytest.raises(TypeError):
            await producer.send("created-on-demand", 42)
    with pytest.raises(ClientClosedError):
        await producer.send("created-on-demand", b"late")


async def test_serializers_and_str_values(broker: RunningBroker) -> None:
    async with AsyncProducer(broker.url, value_serializer=lambda v: repr(v).encode()) as producer:
        await producer.send_and_wait("serialized", {"a": 1}, key="k", partition=0)
    (record,) = await read_topic(broker.url, "serialized", 1)
    assert (record.key, record.value) == (b"k", b"{'a': 1}")


async def test_keyless_records_stick_to_a_partition_per_batch(broker: RunningBroker) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("sticky", 4)
    async with AsyncProducer(broker.url, linger_ms=10_000, batch_size=1 << 20) as producer:
        first = [await producer.send("sticky", b"a") for _ in range(20)]
        await producer.flush()
        second = [await producer.send("sticky", b"b") for _ in range(20)]
        await producer.flush()
    first_partitions = {f.result().partition for f in first}
    second_partitions = {f.result().partition for f in second}
    assert len(first_partitions) == 1 and len(second_partitions) == 1
    assert first_partitions != second_partitions


async def test_close_sends_what_is_queued(broker: RunningBroker) -> None:
    producer = AsyncProducer(broker.url, linger_ms=60_000)
    futures = [await producer.send("closing", b"v", partition=0) for _ in range(10)]
    await producer.close()
    await producer.close()
    assert [f.result().offset for f in futures] == list(range(10))
    await asyncio.sleep(0)


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
async def test_the_send_lane_and_the_python_path_store_the_same_records(
    broker: RunningBroker, implementation: str
) -> None:
    """Keyless records of bytes take the compiled send lane (client/_sendlane.c), everything else the
    Python path; mixed, on small batches that seal and roll to the next sticky partition, every record is
    stored once, in send order per partition, where its handle says, with its timestamp."""
    if implementation == "compiled" and _accel.available is None:
        pytest.skip("the compiled codec is not built (no C compiler at install, or TIERLOG_PURE_CODEC)")
    topic = f"lane-{implementation}"
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic(topic, 3)
    called: list[RecordMetadata | None] = []
    with _accel.use(implementation):
        async with AsyncProducer(broker.url, linger_ms=50, batch_size=2048) as producer:
            futures, armed = [], 0
            for i in range(300):
                value = b"%04d" % i + b"." * 96
                if i % 10 == 3:
                    futures.append(await producer.send(topic, value, key=b"k%d" % (i % 4)))
                elif i % 10 == 6:
                    futures.append(await producer.send(topic, value.decode(), partition=i % 3))
                elif i % 10 == 9:
                    futures.append(await producer.send(topic, value, callback=lambda m, e: called.append(m)))
                else:
                    armed += producer._lane is not None and topic in producer._lane.batches
                    futures.append(await producer.send(topic, value))
            # the compiled lane took most keyless records: its topic was armed when they came
            assert (producer._lane is not None, armed > 150) == ((implementation == "compiled",) * 2)
            metadata = [await f for f in futures]
    assert len(called) == 30 and all(m is not None for m in called)
    records = await read_topic(broker.url, topic, 300)
    stored = {(r.partition, r.offset): (r.value, r.timestamp) for r in records}
    for i, m in enumerate(metadata):
        assert stored[m.partition, m.offset] == (b"%04d" % i + b"." * 96, m.timestamp)
    for p in range(3):
        values = [r.value for r in sorted(records, key=lambda r: r.offset) if r.partition == p]
        assert values == sorted(values)
    keyless = {m.partition for i, m in enumerate(metadata) if i % 10 not in (3, 6)}
    assert len(keyless) > 1  # the sticky partition rolled over as batches sealed
