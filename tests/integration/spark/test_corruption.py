"""Damaged and trimmed archives: a corrupt segment object fails the task naming the object (or is skipped
and counted with ``onCorruption=skip``); offsets below the manifest's log start are data loss.
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
from tests.integration.spark.data import collect, expected_rows, make_records
from tierlog.tiering.codec import Compression
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import segment_keys

pytestmark = pytest.mark.integration

TOPIC = "damaged"


@dataclass
class Damaged:
    bucket: Bucket
    part: ArchivedPartition
    bad_key: str  # relative to the prefix
    lost: range  # offsets behind the flipped byte, in the damaged segment


@pytest.fixture
def damaged(bucket: Bucket, tmp_path: Path) -> Damaged:
    """Four segments on moto; one byte flipped in the middle of the second one's ``.log``."""

    async def fill() -> Damaged:
        store = bucket.store()
        try:
            part = open_partition(tmp_path, TOPIC, 0, segment_bytes=4096)
            part.append(make_records(200, seed=7), compression=Compression.SNAPPY)
            segments = await part.upload_sealed(store, bucket.manifests(store))
            assert len(segments) >= 3
            victim = segments[1]
            key = segment_keys(TOPIC, 0, victim.base_offset, victim.segment_uuid)["log"]
            data = bytearray(await store.get(key))
            flip = len(data) // 2
            hit = max(h.base_offset for pos, h in iter_batches(data) if pos <= flip)
            data[flip] ^= 0xFF
            await store.put(key, bytes(data))
            part.log.close()
            return Damaged(bucket, part, key, range(hit, victim.last_offset + 1))
        finally:
            await store.close()

    return asyncio.run(fill())


def test_a_corrupt_object_fails_the_query_with_an_error_naming_it(spark: Any, damaged: Damaged) -> None:
    df = spark.read.format("tierlog").options(**damaged.bucket.options(topic=TOPIC)).load()
    with pytest.raises(Exception) as caught:
        df.count()
    message = str(caught.value)
    assert f"{damaged.bucket.uri}/{damaged.bad_key}" in message
    assert "CorruptSegmentError: corrupt segment object" in message


def test_skip_mode_drops_the_damaged_rest_of_the_object_and_counts_it(spark: Any, damaged: Damaged) -> None:
    df = (
        spark.read.format("tierlog")
        .options(**damaged.bucket.options(topic=TOPIC, onCorruption="skip"))
        .load()
    )
    got = collect(df)
    assert got == expected_rows(r for r in damaged.part.records if r.offset not in damaged.lost)
    assert len(damaged.lost) > 0
    if not hasattr(spark.tvf, "python_worker_logs"):
        pytest.skip("worker logs are a table from Spark 4.1 on: the count cannot be queried")
    logs = spark.tvf.python_worker_logs().where("logger = 'tierlog.spark'").collect()
    skipped = [row for row in logs if f"{damaged.bucket.uri}/{damaged.bad_key}" in row["msg"]]
    assert len(skipped) == 1 and skipped[0]["level"] == "WARNING"


def test_offsets_below_the_log_start_are_data_loss(spark: Any, bucket: Bucket, tmp_path: Path) -> None:
    async def fill() -> ArchivedPartition:
        store = bucket.store()
        try:
            part = open_partition(tmp_path, TOPIC, 0, segment_bytes=4096)
            part.append(make_records(120, seed=3))
            manifests = bucket.manifests(store)
            await part.upload_sealed(store, manifests)
            await manifests.update(TOPIC, 0, lambda m: mf.set_log_start_offset(m, 50))
            part.log.close()
            return part
        finally:
            await store.close()

    part = asyncio.run(fill())
    earliest = collect(spark.read.format("tierlog").options(**bucket.options(topic=TOPIC)).load())
    assert earliest == expected_rows(r for r in part.records if r.offset >= 50)
    below = json.dumps({TOPIC: {"0": 10}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        spark.read.format("tierlog").options(
            **bucket.options(topic=TOPIC, startingOffsets=below)
        ).load().count()
    lenient = bucket.options(topic=TOPIC, startingOffsets=below, failOnDataLoss="false")
    assert collect(spark.read.format("tierlog").options(**lenient).load()) == earliest
