"""Batch reads of an S3 archive (a real moto_server bucket) with a real local SparkSession.

The archive is written by the real log engine and uploaded in the uploader's order (see ``archive.py``);
every request Spark sends goes through a counting proxy, so "fewer objects read" is measured at the store.
Its topics keep their indexes in the packed ``.indexes`` object the uploader writes; the topics of
:data:`TWINS` also exist in the older layout (separate ``.index`` and ``.timeindex`` objects) with the
same records in the same segments, and the tests that seek with the indexes run over both.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.archive import (
    INDEX_LAYOUTS,
    ArchivedPartition,
    IndexLayout,
    Produced,
    open_partition,
)
from tests.integration.spark.conftest import Bucket
from tests.integration.spark.data import (
    START_MS,
    STEP_MS,
    Row,
    checksum,
    collect,
    expected_rows,
    make_records,
)
from tests.integration.spark.proxy import CountingProxy
from tierlog.tiering.codec import Compression
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.packed_indexes import segment_index_refs

pytestmark = pytest.mark.integration

CODECS = [c.kafka_name for c in Compression]
PARTITIONS = 2
RECORDS = 160
TWINS = ("gzip", "lz4")  # codecs whose topic also exists in the older index layout
_INDEX_SUFFIXES = (".index", ".timeindex", ".indexes")


def topic_of(codec: str, layout: IndexLayout = "packed") -> str:
    """``c-<codec>``, or ``s-<codec>`` for the twin in the older (separate objects) layout."""
    return f"{'c' if layout == 'packed' else 's'}-{codec}"


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
        return self.path(key)

    def path(self, key: str) -> str:
        """The request path of an object key (relative to the prefix) as the proxy records it."""
        return f"/{self.bucket.name}/{self.bucket.prefix}/{key}"

    def index_gets(
        self, topic: str, partition: int, segments: list[mf.RemoteSegment], *, times: bool
    ) -> set[tuple[str, str | None]]:
        """``(path, Range header)`` of the index reads a seek into ``segments`` makes: the offset index
        (and with ``times`` the time index) of each, a ranged GET of the ``.indexes`` object or a GET of
        the whole older object; none for an empty one. Both indexes of a packed object, neither empty,
        come in one ranged GET."""
        gets: set[tuple[str, str | None]] = set()
        for segment in segments:
            offset, time = segment_index_refs(topic, partition, segment)
            if times and segment.indexes is not None and not offset.empty and not time.empty:
                assert time.end is not None
                gets.add((self.path(offset.object_key), f"bytes={offset.start}-{time.end - 1}"))
                continue
            for ref in (offset, time) if times else (offset,):
                if not ref.empty:
                    gets.add(
                        (
                            self.path(ref.object_key),
                            None if ref.end is None else f"bytes={ref.start}-{ref.end - 1}",
                        )
                    )
        return gets


def index_gets(proxy: CountingProxy) -> set[tuple[str, str | None]]:
    """``(path, Range header)`` of every GET of an index object the proxy saw."""
    return {(s.path, s.range) for suffix in _INDEX_SUFFIXES for s in proxy.gets(suffix)}


def _segment_of(segments: list[mf.RemoteSegment], offset: int) -> mf.RemoteSegment:
    return next(s for s in segments if s.contains(offset))


@pytest.fixture(scope="module")
def archive(session_bucket: Bucket, logs_root: Path) -> Archive:
    """Topics ``c-<codec>`` with 2 partitions of 160 records each, in 4 KiB segments, on moto, and their
    :data:`TWINS` ``s-<codec>`` in the older index layout."""

    async def fill() -> dict[tuple[str, int], ArchivedPartition]:
        store = session_bucket.store()
        manifests = session_bucket.manifests(store)
        parts = {}
        try:
            for seed, codec in enumerate(CODECS):
                layouts = INDEX_LAYOUTS if codec in TWINS else ("packed",)
                for layout, partition in itertools.product(layouts, range(PARTITIONS)):
                    topic = topic_of(codec, layout)
                    part = open_partition(
                        logs_root / "read", topic, partition, segment_bytes=4096, layout=layout
                    )
                    part.append(
                        make_records(RECORDS, seed=seed * 10 + partition),
                        compression=Compression[codec.upper()],
                    )
                    await part.upload_sealed(store, manifests)
                    part.log.close()
                    parts[(topic, partition)] = part
        finally:
            await store.close()
        for codec, partition in itertools.product(TWINS, range(PARTITIONS)):
            packed, separate = (parts[(topic_of(codec, layout), partition)] for layout in INDEX_LAYOUTS)
            # the twins differ in their index layout only
            assert [(s.base_offset, s.last_offset) for s in packed.uploaded] == [
                (s.base_offset, s.last_offset) for s in separate.uploaded
            ]
            assert all(s.indexes is not None for s in packed.uploaded)
            assert all(s.indexes is None for s in separate.uploaded)
        return parts

    return Archive(session_bucket, asyncio.run(fill()))


def twin_rows(
    archive: Archive, codec: str, layout: IndexLayout, keep: Callable[[Produced], bool]
) -> list[Row]:
    """The expected rows of ``codec``'s topic in ``layout``: the packed topic's records that ``keep``
    selects, under the twin's name (both topics hold the same records)."""
    topic = topic_of(codec, layout)
    return [
        (topic, *row[1:]) for row in expected_rows(r for r in archive.produced(topic_of(codec)) if keep(r))
    ]


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


@pytest.mark.parametrize("layout", INDEX_LAYOUTS)
def test_offset_bounds_give_exact_rows_and_read_only_overlapping_ones(
    spark: Any, archive: Archive, layout: IndexLayout
) -> None:
    topic = topic_of("gzip", layout)
    segments = archive.segments(topic, 0)
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
    assert got == twin_rows(archive, "gzip", layout, lambda r: r.partition == 0 and lo <= r.offset < hi)
    overlapping = _overlapping(segments, lo, hi)
    fetched = {s.path for s in proxy.gets(".log")}
    assert fetched == {archive.log_path(topic, 0, s) for s in overlapping}
    assert len(fetched) == 2 < len(segments)
    # The edge segments were entered through their offset index (a ranged read of the packed object,
    # or the whole older .index), never the time index; the .log through ranged reads.
    assert index_gets(proxy) == archive.index_gets(topic, 0, overlapping, times=False)
    assert all(s.range is not None for s in proxy.gets(".log"))


@pytest.mark.parametrize("layout", INDEX_LAYOUTS)
def test_timestamp_bounds_return_exact_rows_and_read_fewer_segments(
    spark: Any, archive: Archive, layout: IndexLayout
) -> None:
    topic = topic_of("lz4", layout)
    start_ms, end_ms = START_MS + 37 * STEP_MS + 1, START_MS + 101 * STEP_MS  # rows 38 .. 100
    proxy = archive.bucket.proxy
    proxy.reset()
    got = collect(
        read(spark, archive.bucket, topic=topic, startingTimestamp=str(start_ms), endingTimestamp=str(end_ms))
    )
    assert got == twin_rows(archive, "lz4", layout, lambda r: start_ms <= r.timestamp < end_ms)
    assert {r[2] for r in got} == set(range(38, 101))
    expected_indexes: set[tuple[str, str | None]] = set()
    for partition in range(PARTITIONS):
        segments = archive.segments(topic, partition)
        paths = {archive.log_path(topic, partition, s) for s in segments}
        fetched = {s.path for s in proxy.gets(".log")} & paths
        assert fetched == {archive.log_path(topic, partition, s) for s in _overlapping(segments, 38, 101)}
        assert len(fetched) < len(segments)
        # the two edge segments (first records at or after each bound) seek with both indexes
        edges = [_segment_of(segments, 38), _segment_of(segments, 101)]
        expected_indexes |= archive.index_gets(topic, partition, edges, times=True)
    assert index_gets(proxy) == expected_indexes


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


def test_a_topic_not_in_the_archive_fails_the_query_naming_the_topics_found(
    spark: Any, archive: Archive
) -> None:
    with pytest.raises(Exception, match=r"topic 'c-nope' is not in the archive at .*topics found: .*c-none"):
        read(spark, archive.bucket, topic="c-nope").collect()
