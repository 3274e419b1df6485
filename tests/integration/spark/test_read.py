"""Batch reads of an S3 archive (a real moto_server bucket) with a real local SparkSession.

The archive is written by the real log engine and uploaded in the uploader's order (see ``archive.py``);
every request Spark sends goes through a counting proxy, so "fewer objects read" is measured at the store.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.archive import ArchivedPartition, open_partition
from tests.integration.spark.conftest import Bucket
from tests.integration.spark.data import START_MS, STEP_MS, checksum, collect, expected_rows, make_records
from tierlog.tiering.codec import Compression
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import segment_keys

pytestmark = pytest.mark.integration

CODECS = [c.kafka_name for c in Compression]
PARTITIONS = 2
RECORDS = 160


@dataclass
class Archive:
    bucket: Bucket
    partitions: dict[tuple[str, int], ArchivedPartition]

    def produced(self, topic: str, partition: int | None = None) -> list[Any]:
        return [
            r
            for (t, p), part in self.partitions.items()
            if t == topic and (partition is None or p == partition)
            for r in part.records
        ]

    def segments(self, topic: str, partition: int) -> list[mf.RemoteSegment]:
        return self.partitions[(topic, partition)].uploaded

    def log_path(self, topic: str, partition: int, segment: mf.RemoteSegment, kind: str = "log") -> str:
        key = segment_keys(topic, partition, segment.base_offset, segment.segment_uuid)[kind]  # type: ignore[index]
        return f"/{self.bucket.name}/{self.bucket.prefix}/{key}"


@pytest.fixture(scope="module")
def archive(session_bucket: Bucket, logs_root: Path) -> Archive:
    """Topics ``c-<codec>`` with 2 partitions of 160 records each, in 4 KiB segments, on moto."""

    async def fill() -> dict[tuple[str, int], ArchivedPartition]:
        store = session_bucket.store()
        manifests = session_bucket.manifests(store)
        parts = {}
        try:
            for seed, codec in enumerate(CODECS):
                for partition in range(PARTITIONS):
                    topic = f"c-{codec}"
                    part = open_partition(logs_root / "read", topic, partition, segment_bytes=4096)
                    part.append(
                        make_records(RECORDS, seed=seed * 10 + partition),
                        compression=Compression[codec.upper()],
                    )
                    await part.upload_sealed(store, manifests)
                    part.log.close()
                    parts[(topic, partition)] = part
        finally:
            await store.close()
        return parts

    return Archive(session_bucket, asyncio.run(fill()))


def read(spark: Any, bucket: Bucket, **options: str) -> Any:
    return spark.read.format("tierlog").options(**bucket.options(**options)).load()


@pytest.fixture(scope="module")
def all_codecs(spark: Any, archive: Archive) -> list[Any]:
    """One scan of every codec topic (one Spark job keeps the suite fast)."""
    return collect(read(spark, archive.bucket, subscribe=",".join(f"c-{c}" for c in CODECS)))


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_what_was_produced(
    all_codecs: list[Any], archive: Archive, codec: str
) -> None:
    topic = f"c-{codec}"
    got = [row for row in all_codecs if row[0] == topic]
    want = expected_rows(archive.produced(topic))
    assert len(got) == PARTITIONS * RECORDS
    assert checksum(got) == checksum(want)
    assert got == want
    assert all(len(archive.segments(topic, p)) >= 3 for p in range(PARTITIONS))


def test_headers_null_keys_and_null_values_round_trip(all_codecs: list[Any]) -> None:
    null_keys = [r for r in all_codecs if r[3] is None]
    null_values = [r for r in all_codecs if r[4] is None]
    empty_values = [r for r in all_codecs if r[4] == b""]
    with_headers = [r for r in all_codecs if r[6]]
    assert null_keys and null_values and empty_values and with_headers
    assert all(r[6] == (("trace", f"t{(r[2])}".encode()), ("empty", None)) for r in with_headers)


def test_schema_is_the_kafka_sources(spark: Any, archive: Archive) -> None:
    df = read(spark, archive.bucket, topic="c-none")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    no_headers = read(spark, archive.bucket, topic="c-none", includeHeaders="false")
    assert "headers" not in no_headers.columns
    assert no_headers.selectExpr("count(*)", "max(offset)").first() == (PARTITIONS * RECORDS, RECORDS - 1)


def _overlapping(segments: list[mf.RemoteSegment], lo: int, hi: int) -> list[mf.RemoteSegment]:
    return [s for s in segments if s.last_offset >= lo and s.base_offset < hi]


def test_offset_bounds_give_exact_rows_and_read_only_overlapping_ones(spark: Any, archive: Archive) -> None:
    topic, segments = "c-gzip", archive.segments("c-gzip", 0)
    lo = segments[1].base_offset + 3  # inside the second segment
    hi = segments[2].base_offset + 2  # inside the third
    proxy = archive.bucket.proxy
    proxy.reset()
    df = read(
        spark,
        archive.bucket,
        topic=topic,
        startingOffsets=json.dumps({topic: {"0": lo, "1": -1}}),
        endingOffsets=json.dumps({topic: {"0": hi, "1": -1}}),
    )
    got = collect(df)
    assert got == expected_rows(r for r in archive.produced(topic, 0) if lo <= r.offset < hi)
    fetched = {s.path for s in proxy.gets(".log")}
    assert fetched == {archive.log_path(topic, 0, s) for s in _overlapping(segments, lo, hi)}
    assert len(fetched) == 2 < len(segments)
    # The edge segments were entered through their offset index: ranged reads, not whole objects.
    indexes = {s.path.removesuffix(".index") for s in proxy.gets(".index")}
    assert indexes == {path.removesuffix(".log") for path in fetched} and not proxy.gets(".timeindex")
    assert all(s.range is not None for s in proxy.gets(".log"))


def test_timestamp_bounds_return_exact_rows_and_read_fewer_segments(spark: Any, archive: Archive) -> None:
    topic = "c-lz4"
    start_ms, end_ms = START_MS + 37 * STEP_MS + 1, START_MS + 101 * STEP_MS  # rows 38 .. 100
    proxy = archive.bucket.proxy
    proxy.reset()
    got = collect(
        read(spark, archive.bucket, topic=topic, startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    )
    assert got == expected_rows(r for r in archive.produced(topic) if start_ms <= r.timestamp < end_ms)
    assert {r[2] for r in got} == set(range(38, 101))
    for partition in range(PARTITIONS):
        segments = archive.segments(topic, partition)
        paths = {archive.log_path(topic, partition, s) for s in segments}
        fetched = {s.path for s in proxy.gets(".log")} & paths
        assert fetched == {archive.log_path(topic, partition, s) for s in _overlapping(segments, 38, 101)}
        assert len(fetched) < len(segments)
    assert proxy.gets(".timeindex")


def test_partition_selection_reads_nothing_of_other_partitions(spark: Any, archive: Archive) -> None:
    topic = "c-snappy"
    proxy = archive.bucket.proxy
    proxy.reset()
    got = collect(read(spark, archive.bucket, assign=json.dumps({topic: [1]})))
    assert got == expected_rows(archive.produced(topic, 1))
    assert proxy.seen() and not [s for s in proxy.seen() if f"/{topic}/0/" in s.path]
    assert not [s for s in proxy.seen() if "/c-none/" in s.path]


def test_large_segments_split_into_byte_ranges_on_batch_boundaries(spark: Any, archive: Archive) -> None:
    topic = "c-zstd"
    df = read(spark, archive.bucket, topic=topic, maxBytesPerPartition="1000")
    segments = [s for p in range(PARTITIONS) for s in archive.segments(topic, p)]
    assert df.rdd.getNumPartitions() == sum(-(-s.size_bytes // 1000) for s in segments) > len(segments)
    assert collect(df) == expected_rows(archive.produced(topic))


def test_a_bad_option_fails_the_query_naming_it(spark: Any, archive: Archive) -> None:
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, archive.bucket, topic="c-none", startingOffsets="{not json").collect()
    with pytest.raises(Exception, match="uri"):
        spark.read.format("tierlog").option("topic", "c-none").load().collect()
