"""Spark benchmark: rows/s and MB/s of ``spark.read.format("tierlog")`` over N GiB of archived segments,
against Spark reading the same records stored as Parquet and as JSON lines, with ``local[2]``.

The archive is written by the real log engine (``PartitionLog``, 64 MiB segments, 2 partitions) and laid
out as the broker's uploader lays it out (segment objects + a ``copy_finished`` manifest) in a local
directory, and optionally uploaded to a ``moto_server`` bucket. The same records go to the same directory
as Parquet (pyarrow, snappy, one file per partition, row groups of 128k rows) and as JSON lines (key and
value base64-encoded, since JSON has no bytes). Every scan runs one aggregate that touches the record
contents (``count``, ``sum(length(key))``, ``sum(length(value))``, ``max(offset)``, ``max(timestamp)``),
best of ``--runs`` rounds after a warm-up round (a round scans every source once, so the load of a
shared machine changing during the benchmark affects all sources alike). MB/s is the bytes each format
occupies in the store over the scan time.

    .venv/bin/python infra/bench/spark_bench.py [--gib 1] [--codec none] [--s3] \
        [--output docs/benchmarks-spark.md] [--results runs.jsonl] [--plot docs/benchmarks-spark.png]
    .venv/bin/python infra/bench/spark_bench.py --quick       # 0.05 GiB, one run: a smoke test

The table gives each source's speed relative to Parquet and to JSON lines in the same run (their time
over its time: 0.5x Parquet means half as fast as Parquet). ``--results`` appends the run to a JSON-lines
file and ``--plot`` draws every run in that file (rows/s per source) with matplotlib.

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from tierlog.tiering.codec import Compression, Record, build_batch  # noqa: E402
from tierlog.tiering.log import LogConfig, PartitionLog  # noqa: E402
from tierlog.tiering.remote import manifest as mf  # noqa: E402
from tierlog.tiering.remote import packed_indexes  # noqa: E402
from tierlog.tiering.remote.layout import segment_keys  # noqa: E402

PARTITIONS = 2
RECORDS_PER_BATCH = 200
QUERY = (
    "count(*) AS n",
    "sum(length(key)) AS kb",
    "sum(length(value)) AS vb",
    "max(offset) AS mo",
    "max(timestamp) AS mt",
)
T0 = 1_700_000_000_000


def make_values(value_bytes: int, seed: int) -> list[bytes]:
    """A pool of 4096 values of random words (text-like; each record also gets its offset in front, so
    no two values are equal and Parquet cannot dictionary-encode them away).
    """
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randrange(3, 9)).hex().encode() for _ in range(2000)]
    pool = []
    for _ in range(4096):
        value = b" ".join(rng.choice(words) for _ in range(value_bytes // 8 + 1))
        pool.append(value[:value_bytes])
    return pool


def write_archive(root: Path, gib: float, value_bytes: int, codec: Compression) -> dict[str, Any]:
    """Write the tierlog archive, Parquet and JSON lines of the same records under ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = int(gib * 2**30)
    per_partition = target // PARTITIONS
    values = make_values(value_bytes, 1)
    remote, logs = root / "remote", root / "logs"
    (root / "parquet").mkdir(parents=True)
    (root / "json").mkdir(parents=True)
    total_rows = 0
    for partition in range(PARTITIONS):
        log = PartitionLog.open(
            logs / f"bench-{partition}",
            LogConfig(segment_bytes=64 * 2**20, flush_messages=2**62),
            topic="bench",
            partition=partition,
        )
        columns: dict[str, list[Any]] = {k: [] for k in ("key", "value", "offset", "timestamp")}
        writer = pq.ParquetWriter(
            root / "parquet" / f"part-{partition}.parquet",
            pa.schema(
                [
                    ("key", pa.binary()),
                    ("value", pa.binary()),
                    ("topic", pa.string()),
                    ("partition", pa.int32()),
                    ("offset", pa.int64()),
                    ("timestamp", pa.timestamp("ms", tz="UTC")),
                    ("timestampType", pa.int32()),
                ]
            ),
            compression="snappy",
        )
        with open(root / "json" / f"part-{partition}.json", "w", encoding="ascii") as jsonl:
            offset = 0
            while (
                log.segments()[-1].size_bytes + sum(s.size_bytes for s in log.sealed_segments())
                < per_partition
            ):
                records = [
                    Record(
                        f"key-{(offset + i) % 1000}".encode(),
                        b"%d " % (offset + i) + values[(offset * 7 + i * 13) % len(values)],
                        (),
                        T0 + (offset + i) * 10,
                    )
                    for i in range(RECORDS_PER_BATCH)
                ]
                log.append(build_batch(records, compression=codec))
                for i, r in enumerate(records):
                    columns["key"].append(r.key)
                    columns["value"].append(r.value)
                    columns["offset"].append(offset + i)
                    columns["timestamp"].append(r.timestamp)
                    jsonl.write(
                        json.dumps(
                            {
                                "key": base64.b64encode(r.key or b"").decode(),
                                "value": base64.b64encode(r.value or b"").decode(),
                                "topic": "bench",
                                "partition": partition,
                                "offset": offset + i,
                                "timestamp": r.timestamp,
                                "timestampType": 0,
                            }
                        )
                        + "\n"
                    )
                offset += RECORDS_PER_BATCH
                if len(columns["offset"]) >= 128 * 1024:
                    _flush_parquet(writer, columns, partition)
            _flush_parquet(writer, columns, partition)
        writer.close()
        log.roll()
        _archive_local(remote, "bench", partition, log)
        total_rows += offset
        log.close()
    shutil.rmtree(logs)
    return {"rows": total_rows, "remote": remote, "parquet": root / "parquet", "json": root / "json"}


def _flush_parquet(writer: Any, columns: dict[str, list[Any]], partition: int) -> None:
    import pyarrow as pa

    n = len(columns["offset"])
    if not n:
        return
    batch = pa.table(
        {
            "key": pa.array(columns["key"], pa.binary()),
            "value": pa.array(columns["value"], pa.binary()),
            "topic": pa.array(["bench"] * n, pa.string()),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(columns["offset"], pa.int64()),
            "timestamp": pa.array(columns["timestamp"], pa.timestamp("ms", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
        }
    )
    writer.write_table(batch, row_group_size=128 * 1024)
    for values in columns.values():
        values.clear()


def _archive_local(remote: Path, topic: str, partition: int, log: PartitionLog) -> None:
    """Copy sealed segments into the bucket layout the uploader writes (the ``.log`` and one packed
    ``.indexes`` object per segment) and write one manifest version listing them."""
    segments = []
    for info in log.sealed_segments():
        segment_uuid = uuid.uuid4()
        keys = segment_keys(topic, partition, info.base_offset, segment_uuid)
        offset_index, time_index = info.index_path.read_bytes(), info.timeindex_path.read_bytes()
        log_target, indexes_target = remote / keys["log"], remote / keys["indexes"]
        log_target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(info.log_path, log_target)
        indexes_target.write_bytes(packed_indexes.pack(offset_index, time_index))
        segments.append(
            mf.RemoteSegment(
                info.base_offset,
                info.next_offset - 1,
                info.max_timestamp,
                info.size_bytes,
                segment_uuid,
                mf.SegmentState.COPY_FINISHED,
                int(time.time() * 1000),
                indexes=(len(offset_index), len(time_index)),
            )
        )
    manifest = mf.Manifest(topic, partition, 1, 0, tuple(segments))
    key = remote / topic / str(partition) / "manifest" / f"{1:020d}.json"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(mf.encode(manifest))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    exe = Path(sys.executable).parent / "moto_server"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    log = open(workdir / "moto.log", "wb")  # noqa: SIM115 - kept open for the server's life
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def upload_to_moto(remote: Path, endpoint: str) -> str:
    """Upload the local archive to a new bucket on moto; returns its ``s3://`` URI."""
    from tierlog.tiering.remote.s3 import S3ObjectStore

    bucket = f"bench-{uuid.uuid4().hex[:8]}"

    files = sorted(p for p in remote.rglob("*") if p.is_file() and ".tierlog" not in str(p))

    async def go() -> None:
        store = S3ObjectStore(
            bucket, endpoint_url=endpoint, part_size=16 * 2**20, multipart_threshold=32 * 2**20
        )
        try:
            client = await store._get_client()
            await client.create_bucket(Bucket=bucket)
            for path in files:
                await store.put_file(f"archive/{path.relative_to(remote).as_posix()}", path)
        finally:
            await store.close()

    asyncio.run(go())
    return f"s3://{bucket}/archive"


def timed_scan(df: Any) -> tuple[float, Any]:
    """Wall time of one aggregate scan, and the aggregate row."""
    start = time.perf_counter()
    row = df.selectExpr(*QUERY).collect()[0]
    return time.perf_counter() - start, row


def timed_rounds(scans: list[tuple[str, Any, int]], runs: int, rows: int) -> list[tuple[str, float, int]]:
    """Best time per source over ``runs`` rounds after a warm-up round. Each round scans every source
    once, so a change in the machine's load during the benchmark hits every source alike.
    """
    best = {name: float("inf") for name, _, _ in scans}
    for round_number in range(runs + 1):
        for name, df, _ in scans:
            seconds, row = timed_scan(df)
            assert row["n"] == rows, (name, row["n"], rows)
            if round_number:
                best[name] = min(best[name], seconds)
            print(f"round {round_number}, {name}: {seconds:.2f}s", flush=True)
    return [(name, best[name], size) for name, _, size in scans]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--gib", type=float, default=1.0, help="archive size (uncompressed codec: ~log bytes)"
    )
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--codec", default="none", choices=[c.kafka_name for c in Compression])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--s3", action="store_true", help="also read the archive from a moto_server bucket")
    parser.add_argument("--output", type=Path, help="append the result table to this Markdown file")
    parser.add_argument("--results", type=Path, help="append this run's figures to a JSON-lines file")
    parser.add_argument("--plot", type=Path, help="plot every run in --results to this PNG")
    parser.add_argument("--quick", action="store_true", help="0.05 GiB and one run (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.gib, args.runs = 0.05, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for k, v in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(k, v)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    moto = None
    try:
        started = time.perf_counter()
        data = write_archive(work, args.gib, args.value_bytes, Compression.from_name(args.codec))
        print(f"wrote {data['rows']} rows in {time.perf_counter() - started:.0f}s under {work}", flush=True)
        from pyspark.sql import SparkSession

        from tierlog.client.spark.source import register

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        tierlog = {"uri": str(data["remote"]), "topic": "bench"}
        scans: list[tuple[str, Any, int]] = [
            (
                "tierlog, local directory",
                spark.read.format("tierlog").options(**tierlog).load(),
                dir_bytes(data["remote"]),
            ),
            (
                "Parquet (snappy), local directory",
                spark.read.parquet(str(data["parquet"])),
                dir_bytes(data["parquet"]),
            ),
            (
                "JSON lines, local directory",
                spark.read.json(str(data["json"]), schema=JSON_SCHEMA),
                dir_bytes(data["json"]),
            ),
        ]
        if args.s3:
            moto, endpoint = start_moto(work)
            uri = upload_to_moto(data["remote"], endpoint)
            s3 = {"uri": uri, "topic": "bench", "s3.endpoint.url": endpoint}
            scans.insert(
                1,
                (
                    "tierlog, S3 (moto_server)",
                    spark.read.format("tierlog").options(**s3).load(),
                    dir_bytes(data["remote"]),
                ),
            )
        results = timed_rounds(scans, args.runs, data["rows"])
        table = render(results, data["rows"], args)
        print(table)
        if args.output:
            with open(args.output, "a", encoding="utf-8") as out:
                out.write(table + "\n")
        if args.results:
            record = {
                "label": f"{args.gib:g} GiB, codec {args.codec}",
                "rows": data["rows"],
                "load": round(os.getloadavg()[0], 1),
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "sources": [{"name": n, "seconds": round(t, 3), "bytes": b} for n, t, b in results],
            }
            with open(args.results, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
            if args.plot:
                plot(args.results, args.plot)
        spark.stop()
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


JSON_SCHEMA = (
    "key string, value string, topic string, partition int, offset long, timestamp long, timestampType int"
)


def _ratio(seconds: float, results: list[tuple[str, float, int]], prefix: str) -> str:
    """How fast a source is relative to the one named ``prefix...``: its time over this one's."""
    other = next((t for name, t, _ in results if name.startswith(prefix)), None)
    return "" if other is None else f"{other / seconds:.2f}x"


def render(results: list[tuple[str, float, int]], rows: int, args: argparse.Namespace) -> str:
    lines = [
        f"### {args.gib:g} GiB, {rows} records of ~{args.value_bytes} B, codec {args.codec}, local[2]",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| source | seconds | rows/s | MB/s (stored bytes) | stored MB | speed vs Parquet | speed vs JSON |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds, size in results:
        parquet, jsonl = _ratio(seconds, results, "Parquet"), _ratio(seconds, results, "JSON")
        lines.append(
            f"| {name} | {seconds:.2f} | {rows / seconds:,.0f} | {size / 1e6 / seconds:,.1f} | "
            f"{size / 1e6:,.0f} | {parquet} | {jsonl} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: Path, png: Path) -> None:
    """Grouped bars of rows/s: one group per run in ``results``, one bar per source."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    names = list(dict.fromkeys(s["name"] for run in runs for s in run["sources"]))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, run in enumerate(runs):
            for source in run["sources"]:
                if source["name"] == name:
                    xs.append(j + i * width)
                    ys.append(run["rows"] / source["seconds"] / 1e6)
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(runs))])
    ax.set_xticklabels([f"{r['label']}\n(load {r['load']})" for r in runs])
    ax.set_ylabel("million rows/s (local[2], higher is better)")
    ax.set_title("Spark scan of the same records: tierlog archive vs Parquet vs JSON lines")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
