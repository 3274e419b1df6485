"""Structured Streaming over the archive: segments archived after a query started arrive as new
micro-batches; offsets are checkpointed by Spark; ``Trigger.AvailableNow`` stops at the archive's end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.archive import ArchivedPartition, open_partition
from tests.integration.spark.conftest import Bucket
from tests.integration.spark.data import START_MS, STEP_MS, collect, expected_rows, make_records

pytestmark = pytest.mark.integration

TOPIC = "stream"


def archive_more(bucket: Bucket, parts: list[ArchivedPartition], count: int, seed: int) -> None:
    """Append ``count`` records to every partition and upload the sealed segments (uploader order)."""

    async def go() -> None:
        store = bucket.store()
        try:
            for part in parts:
                first = len(part.records)
                records = make_records(count, seed=seed + part.partition, start_ms=START_MS + first * STEP_MS)
                part.append(records)
                await part.upload_sealed(store, bucket.manifests(store))
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[list[ArchivedPartition]]:
    opened = [open_partition(tmp_path / "logs", TOPIC, p, segment_bytes=4096) for p in range(2)]
    yield opened
    for part in opened:
        part.log.close()


def stream(spark: Any, bucket: Bucket, **options: str) -> Any:
    return spark.readStream.format("tierlog").options(**bucket.options(topic=TOPIC, **options)).load()


def test_a_running_query_picks_up_segments_archived_after_it_started(
    spark: Any, bucket: Bucket, parts: list[ArchivedPartition]
) -> None:
    archive_more(bucket, parts, 60, seed=1)
    query = (
        stream(spark, bucket, startingOffsets="earliest")
        .writeStream.format("memory")
        .queryName("tierlog_stream")
        .outputMode("append")
        .start()
    )
    try:
        query.processAllAvailable()
        first = collect(spark.table("tierlog_stream"))
        assert first == expected_rows(r for p in parts for r in p.records)

        archive_more(bucket, parts, 90, seed=2)
        query.processAllAvailable()
        second = collect(spark.table("tierlog_stream"))
        assert second == expected_rows(r for p in parts for r in p.records)
        assert len(second) == 2 * 150 > len(first)
        ends = json.loads(query.lastProgress["sources"][0]["endOffset"])
        assert ends == {TOPIC: {"0": 150, "1": 150}}
    finally:
        query.stop()


def test_available_now_resumes_from_the_checkpoint_exactly_once(
    spark: Any, bucket: Bucket, parts: list[ArchivedPartition], tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_once() -> Any:
        query = (
            stream(spark, bucket, startingOffsets="earliest", maxOffsetsPerTrigger="50")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return query

    archive_more(bucket, parts, 40, seed=3)
    first = run_once()
    assert collect(spark.read.parquet(str(out))) == expected_rows(r for p in parts for r in p.records)
    # 80 archived offsets at most 50 per micro-batch: the limit was honoured, in several batches.
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 80 and len(sizes) >= 2 and max(sizes) <= 50

    archive_more(bucket, parts, 40, seed=4)
    run_once()
    assert collect(spark.read.parquet(str(out))) == expected_rows(r for p in parts for r in p.records)
