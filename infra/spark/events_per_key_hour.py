"""Example Spark job: events per key per hour from a tierlog archive, written as Parquet.

Runs against a broker's local-directory tier or an S3 bucket, with no broker::

    .venv/bin/python infra/spark/events_per_key_hour.py --uri ./data/remote --topic events --out /tmp/per-hour
    AWS_ENDPOINT_URL=http://127.0.0.1:9000 .venv/bin/python infra/spark/events_per_key_hour.py \\
        --uri s3://tierlog/archive --topic events --out /tmp/per-hour

``--demo N`` first archives N generated records (three keys, one record a minute) under ``--uri`` with
the log engine, in the layout the broker's uploader writes, so the job can be tried on its own.
Under spark-submit, pass ``--master`` through spark-submit instead and leave ``--master`` out here.
tierlog must be installed in the Python that runs this and in the executors' (``PYSPARK_PYTHON``, which
this script sets to its own interpreter unless it is set); see docs/spark.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def events_per_key_hour(df: Any) -> Any:
    """``(key, hour, events, first_offset, last_offset)`` per key and hour; null keys count as ``null``."""
    from pyspark.sql import functions as F

    return (
        df.withColumn("hour", F.date_trunc("hour", "timestamp"))
        .groupBy(F.col("key").cast("string").alias("key"), "hour")
        .agg(
            F.count("*").alias("events"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
        )
        .orderBy("hour", "key")
    )


def run(spark: Any, uri: str, topic: str, out: str, options: dict[str, str] | None = None) -> int:
    """Read ``topic`` from the archive at ``uri``, write the per-hour counts to ``out`` as Parquet,
    return the number of rows written. Registers the ``tierlog`` source (idempotent).
    """
    from tierlog.spark import register

    register(spark)
    df = (
        spark.read.format("tierlog")
        .option("uri", uri)
        .option("topic", topic)
        .options(**(options or {}))
        .load()
    )
    result = events_per_key_hour(df)
    result.write.mode("overwrite").parquet(out)
    return int(spark.read.parquet(out).count())


async def _demo_archive(uri: str, topic: str, count: int) -> None:
    """Archive ``count`` records of ``topic`` partition 0 under ``uri`` as the broker's uploader does."""
    from tierlog.tiering.codec import Compression, Record, build_batch
    from tierlog.tiering.log import LogConfig, PartitionLog
    from tierlog.tiering.remote import manifest as mf
    from tierlog.tiering.remote import packed_indexes
    from tierlog.tiering.remote.factory import open_object_store
    from tierlog.tiering.remote.layout import segment_keys
    from tierlog.tiering.remote.manifest_store import ManifestStore

    start = 1_700_000_000_000
    store = open_object_store(uri)
    manifests = ManifestStore(store)
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp) / f"{topic}-0", LogConfig(segment_bytes=1 << 20), topic=topic)
        try:
            base = (await manifests.load(topic, 0)).segments
            if base:
                raise SystemExit(f"{uri} already holds {topic}: pick another topic for the demo")
            for i in range(0, count, 100):
                records = [
                    Record(f"user-{n % 3}".encode(), f"event {n}".encode(), (), start + n * 60_000)
                    for n in range(i, min(i + 100, count))
                ]
                log.append(build_batch(records, compression=Compression.ZSTD))
            log.roll()
            for info in log.sealed_segments():
                # one packed .indexes object per segment, its index sizes in the manifest entry
                offset_index = await asyncio.to_thread(info.index_path.read_bytes)
                time_index = await asyncio.to_thread(info.timeindex_path.read_bytes)
                segment = mf.RemoteSegment(
                    info.base_offset,
                    info.next_offset - 1,
                    info.max_timestamp,
                    info.size_bytes,
                    uuid.uuid4(),
                    mf.SegmentState.COPY_STARTED,
                    int(time.time() * 1000),
                    indexes=(len(offset_index), len(time_index)),
                )
                await manifests.update(topic, 0, functools.partial(mf.add_segment, segment=segment))
                keys = segment_keys(topic, 0, info.base_offset, segment.segment_uuid)
                await store.put_file(keys["log"], info.log_path)
                await store.put(keys["indexes"], packed_indexes.pack(offset_index, time_index))
                finished = functools.partial(
                    mf.transition, segment_uuid=segment.segment_uuid, state=mf.SegmentState.COPY_FINISHED
                )
                await manifests.update(topic, 0, finished)
        finally:
            log.close()
            await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--uri", required=True, help="archive: s3://bucket/prefix, file:///dir or a directory"
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="output directory (Parquet)")
    parser.add_argument("--master", default="local[2]", help="Spark master when not under spark-submit")
    parser.add_argument("--demo", type=int, default=0, metavar="N", help="first archive N demo records")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="source option")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.demo:
        asyncio.run(_demo_archive(args.uri, args.topic, args.demo))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("tierlog-events-per-key-hour")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    options = dict(item.split("=", 1) for item in args.option)
    rows = run(spark, args.uri, args.topic, args.out, options)
    print(f"wrote {rows} (key, hour) rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
