"""The executor's Arrow path against the reference decoder: what ``scan_task`` yields (columns built from
``decode_columns`` buffers, bounds applied with ``pyarrow.compute``) is, row for row, what
``decode_batch`` gives for the same segment objects, for every codec, with null keys, values and header
values, LogAppendTime and control batches, and offset bounds that cut batches in the middle. The compiled
and the pure-Python decoder are both run. One Spark query checks the same through a real SparkSession.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.spark.archive import ArchivedPartition, open_partition
from tests.integration.spark.data import collect, make_records
from tierlog.client.spark.archive_reader import LocalArchive, load_manifest
from tierlog.client.spark.options import Bound, parse_options
from tierlog.client.spark.plan import plan_segments, resolve_range
from tierlog.client.spark.scan import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_NO_HEADERS,
    CorruptSegmentError,
    scan_task,
)
from tierlog.tiering.codec import Compression, Record, _accel, build_batch, iter_decoded_batches
from tierlog.tiering.codec.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    crc32c,
    iter_batches,
)
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore

CODECS = list(Compression)
COUNT = 240
T0 = 1_700_000_000_000

RefRow = tuple[int, bytes | None, bytes | None, int, int, list[dict[str, Any]] | None]


def _fill(part: ArchivedPartition, codec: Compression) -> None:
    """Batches of 1 to 9 records; every fourth batch LogAppendTime, a control batch after every fifth."""
    records = make_records(COUNT, seed=codec.value)
    i = n = 0
    while i < COUNT:
        size = 1 + (n * 5) % 9
        chunk = records[i : i + size]
        part.log.append(build_batch(chunk, compression=codec, log_append_time=n % 4 == 3, now_ms=T0))
        if n % 5 == 4:
            part.log.append(build_batch([Record(None, b"\x00\x00\x00\x00", (), T0)], is_control=True))
        i, n = i + size, n + 1


@pytest.fixture(scope="module")
def archived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Topics ``a-<codec>``, one partition each, in 2 KiB segments, in a local-directory archive."""
    root = tmp_path_factory.mktemp("arrow")
    store = LocalObjectStore(root / "remote", fsync=False)
    parts = []
    for codec in CODECS:
        part = open_partition(root / "logs", f"a-{codec.kafka_name}", 0, segment_bytes=2048)
        _fill(part, codec)
        asyncio.run(part.upload_sealed(store, ManifestStore(store)))
        assert len(part.uploaded) >= 3
        parts.append(part)
    yield root / "remote"
    for part in parts:
        part.log.close()


def reference(root: Path, topic: str, lo: int, hi: int) -> list[RefRow]:
    """Every record in ``[lo, hi)`` decoded from the segment objects by ``decode_batch``."""
    manifest = load_manifest(LocalArchive(parse_options({"uri": str(root), "topic": topic}).store), topic, 0)
    rows: list[RefRow] = []
    for segment in manifest.segments:
        key = segment_keys(topic, 0, segment.base_offset, segment.segment_uuid)["log"]
        with _accel.use("pure"):
            batches = list(iter_decoded_batches((root / key).read_bytes()))
        for _, batch in batches:
            if batch.header.is_control:
                continue
            kind = 1 if batch.header.log_append_time else 0
            for r in batch.records:
                if lo <= r.offset < hi:
                    headers = [{"key": k, "value": v} for k, v in r.headers] or None
                    rows.append((r.offset, r.key, r.value, r.timestamp, kind, headers))
    return rows


def scanned(root: Path, topic: str, lo: int, hi: int, **extra: str) -> list[pa.RecordBatch]:
    options = parse_options({"uri": str(root), "topic": topic, **extra})
    archive = LocalArchive(options.store)
    manifest = load_manifest(archive, topic, 0)
    wanted = resolve_range(manifest, Bound(lo), Bound(hi), fail_on_data_loss=True)
    tasks = plan_segments(manifest, wanted, max_bytes=options.max_bytes_per_partition)
    return [batch for task in tasks for batch in scan_task(archive, options, task)]


def as_rows(batches: list[pa.RecordBatch], topic: str) -> list[RefRow]:
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    table.validate(full=True)
    assert set(table.column("topic").to_pylist()) <= {topic}
    assert set(table.column("partition").to_pylist()) <= {0}
    millis = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        (r["offset"], r["key"], r["value"], ms // 1000, r["timestampType"], r["headers"])
        for r, ms in zip(table.to_pylist(), millis, strict=True)
    ]


@pytest.mark.parametrize("implementation", ["compiled", "pure"])
@pytest.mark.parametrize("codec", CODECS, ids=[c.kafka_name for c in CODECS])
@pytest.mark.parametrize(("lo", "hi", "rows"), [(0, 10**6, "10000"), (3, 201, "7"), (119, 121, "1")])
def test_arrow_rows_are_the_reference_decoders(
    archived: Path, codec: Compression, implementation: str, lo: int, hi: int, rows: str
) -> None:
    topic = f"a-{codec.kafka_name}"
    if implementation == "compiled" and _accel.available is None:
        pytest.skip("the compiled codec is not built here")
    with _accel.use(implementation):
        batches = scanned(archived, topic, lo, hi, maxRowsPerBatch=rows, maxBytesPerPartition="700")
    assert all(b.schema.equals(ARROW_SCHEMA) and b.num_rows <= int(rows) for b in batches)
    got, want = as_rows(batches, topic), reference(archived, topic, lo, hi)
    assert got == want
    assert want and (len(want) == COUNT or lo > 0)  # control batches hold offsets, not records
    kinds = {r[4] for r in want}
    assert len(want) < 5 or kinds == {0, 1}  # both timestamp types are in the run


def test_the_batches_mix_everything_the_arrow_path_must_handle(archived: Path) -> None:
    want = reference(archived, "a-zstd", 0, COUNT)
    assert [r for r in want if r[1] is None] and [r for r in want if r[2] is None]
    assert [r for r in want if r[5] is None] and [r for r in want if r[5]]
    assert [v for r in want for h in r[5] or () if (v := h["value"]) is None]


def test_without_headers_the_schema_drops_the_column(archived: Path) -> None:
    batches = scanned(archived, "a-lz4", 5, 50, includeHeaders="false")
    assert all(b.schema.equals(ARROW_SCHEMA_NO_HEADERS) for b in batches)
    offsets = pa.Table.from_batches(batches).column("offset").to_pylist()
    assert offsets == [r[0] for r in reference(archived, "a-lz4", 5, 50)]


def test_spark_reads_the_arrow_batches_with_mid_batch_bounds(spark: Any, archived: Path) -> None:
    topics = [f"a-{c.kafka_name}" for c in CODECS]
    bounds = {t: (3 + 7 * i, 190 - 11 * i) for i, t in enumerate(topics)}
    df = (
        spark.read.format("tierlog")
        .option("uri", str(archived))
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", json.dumps({t: {"0": lo} for t, (lo, _) in bounds.items()}))
        .option("endingOffsets", json.dumps({t: {"0": hi} for t, (_, hi) in bounds.items()}))
        .option("maxRowsPerBatch", "13")
        .load()
    )
    got = collect(df)
    want = sorted(
        (t, 0, r[0], r[1], r[2], r[3], tuple((h["key"], h["value"]) for h in r[5] or ()))
        for t, (lo, hi) in bounds.items()
        for r in reference(archived, t, lo, hi)
    )
    assert got == want


def test_a_sealed_batch_with_bad_records_keeps_the_records_before_it(archived: Path, tmp_path: Path) -> None:
    """CRC right, records wrong: the run that holds the batch is decoded batch by batch, so skip mode
    keeps every record before it, and fail mode names the batch's byte position.
    """
    root = tmp_path / "remote"
    shutil.copytree(archived, root)
    topic = "a-none"
    manifest = load_manifest(LocalArchive(parse_options({"uri": str(root), "topic": topic}).store), topic, 0)
    for segment in manifest.segments:  # a batch right after another data batch (one run)
        path = root / segment_keys(topic, 0, segment.base_offset, segment.segment_uuid)["log"]
        data = bytearray(path.read_bytes())
        batches = list(iter_batches(data))
        pairs = [(b, a) for a, b in itertools.pairwise(batches) if not (a[1].is_control or b[1].is_control)]
        if pairs:
            (pos, header), _ = pairs[-1]
            break
    else:
        pytest.fail("no two adjacent data batches")
    data[pos + HEADER_SIZE] = 0x7F  # the first record's length: far past the batch's end
    sealed = memoryview(data)[pos + ATTRIBUTES_OFFSET : pos + header.size]
    struct.pack_into(">I", data, pos + CRC_OFFSET, crc32c(sealed))  # the CRC still matches
    sealed.release()
    path.write_bytes(bytes(data))
    got = as_rows(scanned(root, topic, 0, COUNT, onCorruption="skip"), topic)
    want = reference(archived, topic, 0, COUNT)
    assert got == [r for r in want if not header.base_offset <= r[0] <= segment.last_offset]
    assert [r for r in got if segment.base_offset <= r[0] < header.base_offset]  # the run's good part
    with pytest.raises(CorruptSegmentError, match=f"the batch at byte {pos}"):
        scanned(root, topic, 0, COUNT)
