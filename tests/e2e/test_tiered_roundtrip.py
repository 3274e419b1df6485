"""End to end: a ``tierlog serve`` process tiers a topic to a real S3 server (moto_server), then the records
come back two ways, every one checked against what the Python client produced:

(a) through the broker, from offset 0, after local retention removed every segment from its disk, so each
    fetch is served from the bucket;
(b) with Spark reading the archive in the bucket, without the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.process import DEADLINE_S, BrokerProcess
from tests.integration.remote.servers import S3Server
from tests.integration.spark.data import Row, collect
from tierlog.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.s3 import S3ObjectStore

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 2
RECORDS = 600  # some 125 bytes each, incompressible: with 4 KiB segments, 7 to 11 segments per partition
PREFIX = "e2e"
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": "4096",
    "local.retention.bytes": "0",  # keep no uploaded segment on local disk
    "retention.ms": "-1",
}


@dataclass(frozen=True)
class Sent:
    """One produced record where the broker acknowledged it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def row(self) -> Row:
        return (TOPIC, self.partition, self.offset, self.key, self.value, self.timestamp, self.headers)


@dataclass
class Archive:
    """The scenario's state: the running broker, the bucket it tiers to, and what was produced."""

    broker: BrokerProcess
    moto: S3Server
    bucket: str
    sent: list[Sent]

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{PREFIX}"


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=DEADLINE_S) as response:
        return json.load(response)


def post_json(url: str, body: object) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=DEADLINE_S) as response:
        return json.load(response)


def produce(url: str) -> list[Sent]:
    """What a user's producer script does: keyed records with headers, then wait for every ack."""
    rng = random.Random(10)
    start = int(time.time() * 1000) - RECORDS
    records = [
        (
            f"customer-{n % 17}".encode(),
            f"order {n:05d} ".encode() + rng.randbytes(90),
            ("seq", str(n).encode()) if n % 4 else ("empty", None),
            start + n,
        )
        for n in range(RECORDS)
    ]
    with Producer(url, linger_ms=5, compression_type="zstd") as producer:
        futures = [
            producer.send(TOPIC, value, key=key, headers=[header], timestamp=ts)
            for key, value, header, ts in records
        ]
        acks = [f.get(DEADLINE_S) for f in futures]
    return [
        Sent(ack.partition, ack.offset, key, value, (header,), ts)
        for ack, (key, value, header, ts) in zip(acks, records, strict=True)
    ]


def wait_tiered(archive: Archive) -> None:
    """Poll the partitions' ``tiered_storage`` state until every record is in the bucket and none is left on
    the broker's disk (local log start = log end); AssertionError with the last state after DEADLINE_S."""
    cluster = get_json(f"{archive.broker.url}/v3/clusters")["data"][0]["cluster_id"]
    ends = {p: 1 + max(s.offset for s in archive.sent if s.partition == p) for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        states = {
            p: get_json(f"{archive.broker.url}/v3/clusters/{cluster}/topics/{TOPIC}/partitions/{p}")[
                "tiered_storage"
            ]
            for p in range(PARTITIONS)
        }
        done = {"remote_next_offset", "log_end_offset", "local_log_start_offset"}
        if all({s[name] for name in done} == {ends[p]} for p, s in states.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not tiered in {DEADLINE_S} s: {states}\n{archive.broker.log()[-3000:]}")
        time.sleep(0.1)  # polling the broker's state; the assertions come after the condition holds


async def manifests(archive: Archive) -> dict[int, mf.Manifest]:
    store = PrefixedStore(S3ObjectStore(archive.bucket, endpoint_url=archive.moto.endpoint_url), PREFIX)
    try:
        loaded = ManifestStore(store)
        return {p: await loaded.load(TOPIC, p) for p in range(PARTITIONS)}
    finally:
        await store.close()


@pytest.fixture(scope="module")
def archive(
    moto_server: S3Server, bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Archive]:
    """A broker process tiering to ``bucket`` (idle segments roll after 200 ms), with ``TOPIC`` produced and
    fully tiered. Stopped with SIGTERM afterwards, which must exit 0."""
    data = tmp_path_factory.mktemp("e2e-broker")
    broker = BrokerProcess(
        data,
        "--data-dir", str(data / "data"),
        "--remote-uri", f"s3://{bucket}/{PREFIX}",
        "--s3-endpoint-url", moto_server.endpoint_url,
        "--remote-upload-interval-ms", "50",
        "--remote-max-upload-interval-ms", "200",
        "--log-retention-check-interval-ms", "100",
    )  # fmt: skip
    try:
        cluster = get_json(f"{broker.url}/v3/clusters")["data"][0]["cluster_id"]
        configs = [{"name": k, "value": v} for k, v in TOPIC_CONFIGS.items()]
        body = {"topic_name": TOPIC, "partitions_count": PARTITIONS, "configs": configs}
        post_json(f"{broker.url}/v3/clusters/{cluster}/topics", body)
        archive = Archive(broker, moto_server, bucket, produce(broker.url))
        wait_tiered(archive)
        yield archive
        assert broker.stop() == 0, broker.log()[-3000:]
    finally:
        broker.kill()


def test_the_bucket_holds_every_offset_in_uploaded_segments(archive: Archive) -> None:
    assert {s.partition for s in archive.sent} == set(range(PARTITIONS))
    for partition, manifest in asyncio.run(manifests(archive)).items():
        segments = sorted(mf.readable_segments(manifest), key=lambda s: s.base_offset)
        assert len(segments) > 2  # small segments rolled
        assert segments[0].base_offset == 0
        assert all(a.last_offset + 1 == b.base_offset for a, b in itertools.pairwise(segments))
        assert segments[-1].last_offset == max(s.offset for s in archive.sent if s.partition == partition)


def test_a_consumer_reads_every_record_from_offset_0_served_from_the_bucket(archive: Archive) -> None:
    consumer = Consumer(bootstrap_servers=archive.broker.url, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            consumer.seek(TopicPartition(TOPIC, p), 0)
        received: list[ConsumerRecord] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(archive.sent) and time.monotonic() < deadline:
            received += consumer.poll(timeout=1.0)
    finally:
        consumer.close()
    got = sorted((r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in received)
    want = sorted((s.partition, s.offset, s.key, s.value, s.headers, s.timestamp) for s in archive.sent)
    assert len(got) == len(want)
    assert got == want
    with urllib.request.urlopen(f"{archive.broker.url}/metrics", timeout=DEADLINE_S) as response:
        metrics = response.read().decode()
    read_bytes = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tierlog_remote_read_bytes_total{") and f'topic="{TOPIC}"' in line
    ]
    assert read_bytes and sum(read_bytes) > 0  # the fetches went to the bucket


@pytest.mark.slow  # the first Spark test of a session starts the SparkSession (some 20 s)
def test_spark_reads_the_archive_in_the_bucket(archive: Archive, spark: Any) -> None:
    df = (
        spark.read.format("tierlog")
        .option("uri", archive.uri)
        .option("topic", TOPIC)
        .option("s3.endpoint.url", archive.moto.endpoint_url)
        .load()
    )
    rows = collect(df)
    assert len(rows) == len(archive.sent)
    assert rows == sorted(s.row() for s in archive.sent)
