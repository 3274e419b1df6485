"""The main end-to-end check: a real broker archives a topic to a moto bucket (or to its local-directory
tier) with its own uploader, and Spark reads the archive without the broker.

The broker runs on the test's event loop with a manual clock (an idle roll archives the tail); Spark
runs in a worker thread so the loop stays free. Records are produced over the native path with every
compression codec mixed in one topic, so each partition's segments hold batches of all five codecs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import Brokers, RunningBroker
from tests.integration.remote.servers import S3Server
from tests.integration.spark.archive import Produced
from tests.integration.spark.conftest import Bucket
from tests.integration.spark.data import checksum, collect, expected_rows, make_records
from tierlog.tiering.codec import Compression, build_batch
from tierlog.tiering.log import ManualClock

pytestmark = pytest.mark.integration

BATCHES = "application/vnd.tierlog.batches"
TOPIC = "orders"
PARTITIONS = 2
RECORDS = 150
WAIT_S = 60  # a deadline for the uploader to catch up, never a timing assertion


async def start_broker(brokers: Brokers, clock: ManualClock, **settings: str) -> RunningBroker:
    defaults = {
        "remote.max.upload.interval.ms": "60000",
        "log.retention.check.interval.ms": str(2**31 - 1),
    }
    return await brokers.start({**defaults, **settings}, clock=clock)


async def produce_and_archive(running: RunningBroker, clock: ManualClock) -> list[Produced]:
    """Produce to every partition with the codecs in turn, then let the uploader archive everything."""
    client, broker = running.client, running.broker
    await broker.create_topic(
        TOPIC,
        PARTITIONS,
        {"remote.storage.enable": "true", "segment.bytes": "4096", "index.interval.bytes": "512"},
    )
    produced: list[Produced] = []
    codecs = itertools.cycle(Compression)
    for partition in range(PARTITIONS):
        records = make_records(RECORDS, seed=100 + partition)
        for start in range(0, RECORDS, 6):
            chunk = records[start : start + 6]
            response = await client.post(
                f"/native/v1/topics/{TOPIC}/partitions/{partition}/batches",
                data=build_batch(chunk, compression=next(codecs)),
                headers={"Content-Type": BATCHES},
            )
            assert response.status == 200, await response.text()
            base = (await response.json())["base_offset"]
            produced.extend(
                Produced(TOPIC, partition, base + i, r.key, r.value, r.timestamp, tuple(r.headers))
                for i, r in enumerate(chunk)
            )
    clock.advance(60_001)  # idle roll: the active segments are sealed and archived too
    remote_tier = broker.remote

    def archived() -> bool:
        remote_tier.wake()
        parts = [remote_tier.remote_of(TOPIC, p) for p in range(PARTITIONS)]
        return all(p is not None and (p.remote_log.remote_next_offset or 0) >= RECORDS for p in parts)

    async with asyncio.timeout(WAIT_S):
        await remote_tier.wait_for(archived)
    return produced


async def test_spark_reads_what_a_broker_archived_to_s3(
    brokers: Brokers, clock: ManualClock, spark: Any, bucket: Bucket, moto_server: S3Server
) -> None:
    running = await start_broker(
        brokers, clock, **{"remote.uri": bucket.uri, "s3.endpoint.url": moto_server.endpoint_url}
    )
    produced = await produce_and_archive(running, clock)
    await running.stop()  # Spark needs no broker

    bucket.proxy.reset()
    df = spark.read.format("tierlog").options(**bucket.options(topic=TOPIC)).load()
    got = await asyncio.to_thread(collect, df)
    want = expected_rows(produced)
    assert len(got) == PARTITIONS * RECORDS
    assert checksum(got) == checksum(want)
    assert got == want
    logs = {s.path for s in bucket.proxy.gets(".log")}
    assert df.rdd.getNumPartitions() == len(logs) > PARTITIONS  # one task per archived segment

    # An offset range inside partition 1 reads only the segments that hold it.
    bucket.proxy.reset()
    bounded = (
        spark.read.format("tierlog")
        .options(
            **bucket.options(
                topic=TOPIC,
                startingOffsets=json.dumps({TOPIC: {"0": -1, "1": 40}}),
                endingOffsets=json.dumps({TOPIC: {"0": -1, "1": 60}}),
            )
        )
        .load()
    )
    got = await asyncio.to_thread(collect, bounded)
    assert got == expected_rows(p for p in produced if p.partition == 1 and 40 <= p.offset < 60)
    assert 0 < len(bucket.proxy.gets(".log")) < len(logs) // PARTITIONS


async def test_spark_reads_the_local_directory_tier(
    brokers: Brokers, clock: ManualClock, tmp_path: Path, spark: Any
) -> None:
    remote = tmp_path / "remote"
    running = await start_broker(brokers, clock, **{"remote.uri": str(remote)})
    produced = await produce_and_archive(running, clock)
    await running.stop()
    df = spark.read.format("tierlog").option("uri", remote.as_uri()).option("topic", TOPIC).load()
    got = await asyncio.to_thread(collect, df)
    assert got == expected_rows(produced)
