"""Tiered-storage benchmark: remote reads and uploads against a real S3 server, next to raw S3 calls.

Starts its own moto_server on 127.0.0.1 (and LocalStack when an install is found, see
``tests/integration/remote/servers.py``), writes a partition log of 1 KiB records in ~64 KiB batches with
:class:`PartitionLog`, and measures on each server, with the raw figure beside ours:

* upload: raw multipart upload of the segment files (aiobotocore, the same part size and concurrency),
  ``put_file``, and the uploader (``RemoteLog.sync``: manifest commits, ``.log`` and the packed
  ``.indexes``; with 4 MiB segments also with the older separate index objects); then upload lag while
  a producer thread appends at 40% of the uploader's throughput;
* read: raw ranged GETs of ``chunk_bytes`` over the same ``.log`` objects (one stream, and
  ``1 + readahead_chunks`` streams, the depth read-ahead gives), then a sequential replay through
  :class:`RemoteReader` with 1 MiB fetches: cold cache without and with read-ahead, then warm.

S3 requests are counted at the HTTP level (botocore's ``before-send`` event), per GiB moved. Each round
runs the raw baseline next to ours; a phase reports its median run and the median of its per-round
ratios to the raw figure (the machine is shared: background load moves absolute figures a lot). Every read
is checked (whole batches, offsets in order), so a fast wrong answer cannot pass. Bounded: about 60-90 s
with both servers, ``--quick`` about 20 s.

    .venv/bin/python infra/bench/tiering_bench.py [--quick] [--mib 48] [--backends moto,localstack]
        [--write docs/benchmarks-tiering.md]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import botocore.config  # noqa: E402
from aiobotocore.config import AioConfig  # noqa: E402
from aiobotocore.session import get_session  # noqa: E402
from boto3.s3.transfer import TransferConfig  # noqa: E402

from tests.integration.remote.servers import (  # noqa: E402
    AWS_TEST_ENV,
    AWS_UNSET,
    S3Server,
    find_localstack_python,
    run_localstack,
    run_moto,
)
from tierlog.tiering.codec.batch import build_batch  # noqa: E402
from tierlog.tiering.codec.header import iter_batches  # noqa: E402
from tierlog.tiering.codec.records import Record  # noqa: E402
from tierlog.tiering.log import LogConfig, PartitionLog, SystemClock  # noqa: E402
from tierlog.tiering.remote import manifest as mf  # noqa: E402
from tierlog.tiering.remote.factory import open_object_store  # noqa: E402
from tierlog.tiering.remote.layout import segment_key  # noqa: E402
from tierlog.tiering.remote.manifest_store import ManifestStore  # noqa: E402
from tierlog.tiering.remote.object_store import ObjectStore  # noqa: E402
from tierlog.tiering.remote.reader import RemoteReader  # noqa: E402
from tierlog.tiering.remote.remote_log import RemoteLog  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
RECORD_BYTES = 1024
RECORDS_PER_BATCH = 64
FETCH_BYTES = MiB
CHUNK_BYTES = 4 * MiB
READAHEAD_CHUNKS: int = getattr(RemoteReader, "DEFAULT_READAHEAD_CHUNKS", 2)  # what the broker's reader uses
BOTO3_GET_STREAMS = (1, 3, 6)  # raw boto3 ranged-GET configurations; the best one is the replay's baseline
PART_BYTES = 8 * MiB
UPLOAD_CONCURRENCY = 4
SEGMENT_BYTES = 32 * MiB
SMALL_SEGMENT_BYTES = 4 * MiB
LAG_SEGMENT_BYTES = 16 * MiB
PRODUCE_SHARE = 0.4  # sustained produce at this share of the uploader's measured throughput
TIERED = "tiered"  # the prefix the uploader writes to (one topic per round)


@dataclass
class Row:
    """One measured phase."""

    name: str
    seconds: float
    nbytes: int
    requests: int
    baseline: str | None = None
    note: str = ""
    ratio: float | None = None  # to the baseline, set by summarise()

    @property
    def mib_per_s(self) -> float:
        return self.nbytes / MiB / self.seconds if self.seconds > 0 else 0.0

    @property
    def requests_per_gib(self) -> float:
        return self.requests * GiB / self.nbytes if self.nbytes else 0.0


class HttpCounter:
    """Counts S3 HTTP requests by operation through botocore's ``before-send`` event."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, **kwargs: Any) -> None:
        self.counts[str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]] += 1

    @contextlib.contextmanager
    def measure(self) -> Iterator[collections.Counter[str]]:
        """The requests made inside the ``with`` block, filled in when it ends."""
        before, delta = collections.Counter(self.counts), collections.Counter[str]()
        yield delta
        delta.update(self.counts - before)


@dataclass
class Backend:
    server: S3Server
    bucket: str
    counter: HttpCounter = field(default_factory=HttpCounter)

    def store(self, prefix: str) -> ObjectStore:
        return open_object_store(
            f"s3://{self.bucket}/{prefix}",
            endpoint_url=self.server.endpoint_url,
            part_size=PART_BYTES,
            multipart_threshold=PART_BYTES,
            upload_concurrency=UPLOAD_CONCURRENCY,
            event_handlers=[("before-send.s3", self.counter)],
        )

    def client(self) -> Any:
        """A plain aiobotocore client configured as :class:`S3ObjectStore` configures its own."""
        checksums = {
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
        config = AioConfig(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, **checksums)
        return get_session().create_client("s3", endpoint_url=self.server.endpoint_url, config=config)

    def boto3_client(self, pool: int = 10) -> Any:
        """A plain (threaded) boto3 client, configured as :meth:`client`, counting its requests too."""
        config = botocore.config.Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            max_pool_connections=pool,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = boto3.session.Session().client("s3", endpoint_url=self.server.endpoint_url, config=config)
        client.meta.events.register("before-send.s3", self.counter)
        return client


def batch_bytes(seed: int) -> bytes:
    value = (bytes(range(256)) * (RECORD_BYTES // 256 + 1))[seed % 256 : seed % 256 + RECORD_BYTES]
    records = [
        Record(b"key-%08d" % (seed + i), value, timestamp=1_700_000_000_000 + seed + i) for i in range(64)
    ]
    return build_batch(records, now_ms=1_700_000_000_000)


def write_log(path: Path, total: int, segment_bytes: int) -> PartitionLog:
    """A sealed log of about ``total`` bytes (blocking: run in a thread)."""
    log = PartitionLog.open(path, LogConfig(segment_bytes=segment_bytes), topic="bench", partition=0)
    written = n = 0
    while written < total:
        batch = batch_bytes(n)
        log.append(batch)
        written += len(batch)
        n += RECORDS_PER_BATCH
    log.roll()
    log.flush()  # as the broker's flusher would have by the time a segment is uploaded: not timed
    return log


async def multipart_one(client: Any, bucket: str, key: str, path: Path) -> int:
    """One plain multipart upload of ``path``; returns the requests it took."""
    size = (await asyncio.to_thread(path.stat)).st_size
    upload_id = (await client.create_multipart_upload(Bucket=bucket, Key=key))["UploadId"]
    parts = iter(range(1, -(-size // PART_BYTES) + 1))
    etags: dict[int, str] = {}
    fd = os.open(path, os.O_RDONLY)

    async def worker() -> None:
        for number in parts:
            offset = (number - 1) * PART_BYTES
            body = await asyncio.to_thread(os.pread, fd, min(PART_BYTES, size - offset), offset)
            resp = await client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
            )
            etags[number] = resp["ETag"]

    try:
        await asyncio.gather(*(worker() for _ in range(UPLOAD_CONCURRENCY)))
    finally:
        os.close(fd)
    await client.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]},
    )
    return 2 + len(etags)


async def raw_multipart(backend: Backend, files: list[Path], total: int, round_: int) -> Row:
    """The segment files by plain multipart upload: ``PART_BYTES`` parts, ``UPLOAD_CONCURRENCY`` at once."""
    async with backend.client() as client:
        await client.list_objects_v2(Bucket=backend.bucket, MaxKeys=1)  # connect before timing
        started = time.perf_counter()
        requests = 0
        for path in files:
            requests += await multipart_one(client, backend.bucket, f"raw{round_}/{path.name}", path)
        seconds = time.perf_counter() - started
    return Row("raw multipart upload", seconds, total, requests)


def boto3_upload_files(backend: Backend, files: list[Path], prefix: str) -> tuple[float, int]:
    """boto3's ``upload_file`` of every file (its threaded transfer manager, ``PART_BYTES`` parts,
    ``UPLOAD_CONCURRENCY`` threads): ``(seconds, requests)``. Blocking: run in a thread."""
    client = backend.boto3_client()
    transfer = TransferConfig(
        multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=UPLOAD_CONCURRENCY
    )
    client.list_objects_v2(Bucket=backend.bucket, MaxKeys=1)  # connect before timing
    with backend.counter.measure() as counted:
        started = time.perf_counter()
        for path in files:
            client.upload_file(str(path), backend.bucket, f"{prefix}/{path.name}", Config=transfer)
        seconds = time.perf_counter() - started
    client.close()
    return seconds, sum(counted.values())


async def boto3_upload(backend: Backend, files: list[Path], total: int, name: str, prefix: str) -> Row:
    seconds, requests = await asyncio.to_thread(boto3_upload_files, backend, files, prefix)
    return Row(name, seconds, total, requests)


def boto3_get_ranges(backend: Backend, ranges: list[tuple[str, int, int]], streams: int) -> tuple[float, int]:
    """Ranged GETs with ``streams`` threads sharing one boto3 client: ``(seconds, bytes)``. Blocking."""
    client = backend.boto3_client(pool=max(10, streams))
    client.list_objects_v2(Bucket=backend.bucket, MaxKeys=1)

    def get(item: tuple[str, int, int]) -> int:
        key, start, end = item
        data = client.get_object(Bucket=backend.bucket, Key=key, Range=f"bytes={start}-{end - 1}")[
            "Body"
        ].read()
        assert len(data) == end - start
        return len(data)

    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        started = time.perf_counter()
        total = sum(pool.map(get, ranges))
        seconds = time.perf_counter() - started
    client.close()
    return seconds, total


async def boto3_best_get(
    backend: Backend, objects: list[tuple[str, int]], label: str
) -> tuple[Row, list[Row]]:
    """boto3 ranged GETs of ``CHUNK_BYTES`` with each of ``BOTO3_GET_STREAMS`` threads; the fastest run is
    returned again as the "best" row (the baseline the replay must reach)."""
    ranges = chunk_ranges(objects)
    rows = []
    for streams in BOTO3_GET_STREAMS:
        seconds, nbytes = await asyncio.to_thread(boto3_get_ranges, backend, ranges, streams)
        name = f"raw boto3 ranged GET, {CHUNK_BYTES // MiB} MiB, {streams} threads{label}"
        rows.append(Row(name, seconds, nbytes, len(ranges)))
    best = min(rows, key=lambda r: r.seconds)
    note = best.name.split(", ")[2].removesuffix(label)
    return Row(
        f"raw boto3 ranged GET, best{label}", best.seconds, best.nbytes, best.requests, None, note
    ), rows


def chunk_ranges(objects: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    return [
        (key, start, min(start + CHUNK_BYTES, size))
        for key, size in objects
        for start in range(0, size, CHUNK_BYTES)
    ]


async def warm(store: ObjectStore) -> None:
    """One LIST, so the client exists (and is connected) before a timed phase."""
    async for _ in store.list("warm-up/"):
        pass


async def put_files(backend: Backend, files: list[Path], total: int, round_: int) -> Row:
    store = backend.store(f"putfile{round_}")
    try:
        await warm(store)
        with backend.counter.measure() as counted:
            started = time.perf_counter()
            for path in files:
                await store.put_file(path.name, path)
            seconds = time.perf_counter() - started
    finally:
        await store.close()
    return Row("put_file", seconds, total, sum(counted.values()), "raw multipart upload")


async def uploader(
    backend: Backend,
    log: PartitionLog,
    topic: str,
    name: str = "uploader (RemoteLog.sync)",
    baseline: str = "raw boto3 upload_file",
    *,
    pack_indexes: bool = True,
) -> tuple[Row, mf.Manifest]:
    """``RemoteLog.sync`` of every sealed segment: what the broker's uploader does (``pack_indexes``
    False: the older separate index objects, ``remote.upload.indexes.packed=false``)."""
    store = backend.store(TIERED)
    remote = RemoteLog(store, ManifestStore(store), log, topic, 0, SystemClock(), pack_indexes=pack_indexes)
    try:
        await warm(store)
        await remote.open(reset_local=False)
        with backend.counter.measure() as counted:
            started = time.perf_counter()
            await remote.sync()
            seconds = time.perf_counter() - started
    finally:
        await store.close()
    note = ", ".join(f"{op} {n}" for op, n in sorted(counted.items()))
    row = Row(name, seconds, remote.uploaded_bytes, sum(counted.values()), baseline, note)
    return row, remote.manifest


async def sustained(backend: Backend, directory: Path, rate: float, seconds: float) -> Row:
    """A producer thread appends at ``rate`` bytes/s for ``seconds`` while the uploader syncs in a loop;
    upload lag is sampled after every sync. The row's figure is the upload throughput achieved."""
    log = await asyncio.to_thread(
        PartitionLog.open, directory, LogConfig(segment_bytes=LAG_SEGMENT_BYTES), topic="lag", partition=0
    )
    store = backend.store("sustained")
    remote = RemoteLog(store, ManifestStore(store), log, "lag", 0, SystemClock())
    await remote.open(reset_local=False)
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        started, n = time.perf_counter(), 0
        while not stop.is_set() and time.perf_counter() - started < seconds:
            batch = batch_bytes(n)
            info = log.append(batch)
            loop.call_soon_threadsafe(remote.note_append, info.base_offset)
            produced[0] += len(batch)
            n += RECORDS_PER_BATCH
            ahead = produced[0] / rate - (time.perf_counter() - started)
            if ahead > 0:
                time.sleep(ahead)  # pacing the producer thread, not waiting for a result

    lags: list[tuple[int, int]] = []  # (bytes, ms) not yet uploaded, sampled after every sync
    with backend.counter.measure() as counted:
        started = time.perf_counter()
        producer = asyncio.create_task(asyncio.to_thread(produce))
        try:
            while not producer.done():
                await remote.sync()
                lags.append(remote.lag(await asyncio.to_thread(log.segments)))
                await asyncio.sleep(0.05)  # the uploader's polling interval
            produce_seconds = time.perf_counter() - started
            await asyncio.to_thread(log.roll)
            await remote.sync()
            drained = time.perf_counter() - started
        finally:
            stop.set()
            await producer
            await store.close()
            await asyncio.to_thread(log.close)
    lags = lags or [(0, 0)]
    max_bytes, max_ms = max(b for b, _ in lags), max(ms for _, ms in lags)
    mean_bytes = sum(b for b, _ in lags) / len(lags)
    note = (
        f"produce {produced[0] / MiB / produce_seconds:.0f} MiB/s for {produce_seconds:.0f} s "
        f"({LAG_SEGMENT_BYTES // MiB} MiB segments); "
        f"lag max {max_bytes / MiB:.1f} MiB / {max_ms / 1000:.1f} s, mean {mean_bytes / MiB:.1f} MiB; "
        f"all uploaded {drained - produce_seconds:.1f} s after the last append"
    )
    return Row("uploader under sustained produce", drained, remote.uploaded_bytes,
               sum(counted.values()), None, note)  # fmt: skip


def segment_objects(manifest: mf.Manifest) -> list[tuple[str, int]]:
    return [
        (f"{TIERED}/{segment_key(manifest.topic, 0, s.base_offset, s.segment_uuid)}", s.size_bytes)
        for s in mf.readable_segments(manifest)
    ]


async def raw_get(backend: Backend, objects: list[tuple[str, int]], streams: int, name: str = "") -> Row:
    """Ranged GETs of ``CHUNK_BYTES`` over every object, in order, ``streams`` in flight."""
    ranges = chunk_ranges(objects)
    pending = iter(ranges)
    total = [0]
    async with backend.client() as client:

        async def stream() -> None:
            for key, start, end in pending:
                resp = await client.get_object(
                    Bucket=backend.bucket, Key=key, Range=f"bytes={start}-{end - 1}"
                )
                async with resp["Body"] as body:
                    data = await body.read()
                assert len(data) == end - start
                total[0] += len(data)

        started = time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(streams)))
        seconds = time.perf_counter() - started
    name = name or f"raw ranged GET, {CHUNK_BYTES // MiB} MiB, {streams} stream{'s' if streams > 1 else ''}"
    return Row(name, seconds, total[0], len(ranges))


async def replay(reader: RemoteReader, manifest: mf.Manifest) -> tuple[int, int]:
    """Read every remote batch with 1 MiB fetches; ``(bytes, records)``. Checks order and framing."""
    end = mf.readable_segments(manifest)[-1].last_offset + 1
    offset, nbytes, records = 0, 0, 0
    while offset < end:
        result = await reader.read(manifest, offset, FETCH_BYTES)
        headers = [h for _, h in iter_batches(result.data, verify=False)]
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        nbytes += len(result.data)
        records += sum(h.records_count for h in headers)
        offset = result.next_offset
    return nbytes, records


async def reader_run(
    backend: Backend, manifests: list[mf.Manifest], readahead: int, runs: tuple[str, ...]
) -> list[tuple[str, float, int, int, dict[str, int]]]:
    """Replay ``manifests`` at once with a new reader, once per name in ``runs`` (the first cold):
    ``(run, seconds, bytes, requests, stats)`` each."""
    total = sum(s.size_bytes for m in manifests for s in mf.readable_segments(m))
    store = backend.store(TIERED)
    reader = RemoteReader(
        store, chunk_bytes=CHUNK_BYTES, readahead_chunks=readahead, cache_bytes=total + 64 * MiB
    )
    out = []
    try:
        await warm(store)
        for run in runs:
            with backend.counter.measure() as counted:
                started = time.perf_counter()
                done = await asyncio.gather(*(replay(reader, m) for m in manifests))
                seconds = time.perf_counter() - started
                await reader.wait_readahead()
            out.append((run, seconds, sum(n for n, _ in done), sum(counted.values()), reader.stats()))
    finally:
        await reader.close()
        await store.close()
    return out


async def reader_rows(backend: Backend, manifests: list[mf.Manifest], baselines: dict[str, str]) -> list[Row]:
    """Cold replays without and with read-ahead, a warm one, and all partitions replayed at once."""
    rows = []
    for readahead in (0, READAHEAD_CHUNKS):
        baseline = baselines["deep"] if readahead else baselines["single"]
        runs = ("cold", "warm") if readahead else ("cold",)
        for run, seconds, nbytes, requests, st in await reader_run(backend, manifests[:1], readahead, runs):
            note = "cache hits {cache_hits}, misses {cache_misses}, read-ahead hits {readahead_hits}".format(
                **st
            )
            name = f"RemoteReader {run} cache, read-ahead {readahead}"
            rows.append(
                Row(name, seconds, nbytes, requests, baseline, note if run == "cold" else "all cached")
            )
    [(_, seconds, nbytes, requests, _)] = await reader_run(backend, manifests, READAHEAD_CHUNKS, ("cold",))
    name = f"RemoteReader cold cache, read-ahead {READAHEAD_CHUNKS}, {len(manifests)} partitions at once"
    rows.append(Row(name, seconds, nbytes, requests, baselines["all"]))
    return rows


async def create_bucket(server: S3Server) -> str:
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    async with get_session().create_client("s3", endpoint_url=server.endpoint_url) as client:
        await client.create_bucket(Bucket=bucket)
    return bucket


def summarise(history: dict[str, list[Row]]) -> list[Row]:
    """One row per phase: the run with the median time, and the median over rounds of the ratio to the
    baseline measured in the same round (a burst of background load then slows both sides alike)."""
    out = []
    for runs in history.values():
        row = sorted(runs, key=lambda r: r.seconds)[(len(runs) - 1) // 2]
        if row.baseline is not None and row.baseline in history:
            pairs = zip(runs, history[row.baseline], strict=False)
            ratios = sorted(r.mib_per_s / b.mib_per_s for r, b in pairs if b.seconds)
            row.ratio = ratios[(len(ratios) - 1) // 2] if ratios else None
        elif row.name.startswith("raw"):
            row.ratio = 1.0
        out.append(row)
    return out


async def run_backend(
    server: S3Server,
    logs: tuple[PartitionLog, PartitionLog],
    workdir: Path,
    sustain_s: float,
    rounds: int,
    read_rounds: int,
) -> list[Row]:
    """Every phase against ``server``: uploads ``rounds`` times, reads ``read_rounds`` times, each round
    running the raw baselines right next to ours (see :func:`summarise`). ``logs``: the partition log in
    ``SEGMENT_BYTES`` segments and the same data in ``SMALL_SEGMENT_BYTES`` segments."""
    log, small_log = logs
    backend = Backend(server, await create_bucket(server))
    sealed = await asyncio.to_thread(log.sealed_segments)
    files, total = [info.log_path for info in sealed], sum(info.size_bytes for info in sealed)
    small_sealed = await asyncio.to_thread(small_log.sealed_segments)
    small_files = [info.log_path for info in small_sealed]
    small_total = sum(info.size_bytes for info in small_sealed)
    small = f", {SMALL_SEGMENT_BYTES // MiB} MiB segments"
    async with backend.client() as client:  # the server's first multipart upload is slow: not timed
        await multipart_one(client, backend.bucket, "warm-up/object", files[0])
    history: dict[str, list[Row]] = collections.defaultdict(list)
    manifests = []
    for round_ in range(rounds):
        raw = await raw_multipart(backend, files, total, round_)
        boto = await boto3_upload(backend, files, total, "raw boto3 upload_file", f"boto{round_}")
        put = await put_files(backend, files, total, round_)
        row, manifest = await uploader(backend, log, f"bench{round_}")
        small_boto = await boto3_upload(
            backend, small_files, small_total, f"raw boto3 upload_file{small}", f"smallboto{round_}"
        )
        small_row, _ = await uploader(
            backend, small_log, f"small{round_}", f"uploader (RemoteLog.sync){small}", small_boto.name
        )
        separate, _ = await uploader(
            backend,
            small_log,
            f"smallsep{round_}",
            f"uploader (RemoteLog.sync){small}, separate index objects",
            small_boto.name,
            pack_indexes=False,
        )
        for done in (raw, boto, put, row, small_boto, small_row, separate):
            history[done.name].append(done)
        manifests.append(manifest)
    upload_rate = summarise({row.name: history[row.name]})[0].mib_per_s * MiB
    lag = await sustained(backend, workdir / f"lag-{server.name}", upload_rate * PRODUCE_SHARE, sustain_s)
    objects = segment_objects(manifests[0])
    every_object = [o for m in manifests for o in segment_objects(m)]
    streams = 1 + READAHEAD_CHUNKS
    for _ in range(read_rounds):
        raw_single = await raw_get(backend, objects, 1)
        raw_deep = await raw_get(backend, objects, streams)
        best, boto_rows = await boto3_best_get(backend, objects, "")
        best_all, _ = await boto3_best_get(backend, every_object, f", {len(manifests)} partitions")
        baselines = {"single": raw_single.name, "deep": best.name, "all": best_all.name}
        measured = [raw_single, raw_deep, *boto_rows, best, best_all]
        for row in [*measured, *await reader_rows(backend, manifests, baselines)]:
            history[row.name].append(row)
    rows = summarise(history)
    rows.insert(6, lag)
    return rows


def results_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {"phase": r.name, "mib_per_s": r.mib_per_s, "ratio": r.ratio, "requests_per_gib": r.requests_per_gib}
        for r in rows
    ]


def plot(before: str, after: str, out: Path) -> None:
    """A bar chart of the ratios to the raw baseline of our rows (moto), before and after a change;
    ``before``/``after`` are comma-separated ``--results`` files whose ratios are averaged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def ratios(paths: str) -> dict[str, float]:
        seen: dict[str, list[float]] = collections.defaultdict(list)
        for path in paths.split(","):
            for r in json.loads(Path(path).read_text(encoding="utf-8"))["moto"]:
                if r["ratio"] is not None and not r["phase"].startswith("raw") and "warm" not in r["phase"]:
                    seen[re.sub(r"read-ahead [1-9]\d*", "read-ahead (default)", r["phase"])].append(
                        r["ratio"]
                    )
        return {phase: sum(v) / len(v) for phase, v in seen.items()}

    old, new = ratios(before), ratios(after)
    phases = [p for p in new if p in old]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ys = range(len(phases))
    ax.barh([y - 0.2 for y in ys], [old[p] for p in phases], height=0.4, label="before")
    ax.barh([y + 0.2 for y in ys], [new[p] for p in phases], height=0.4, label="after")
    ax.axvline(0.8, color="grey", linestyle="--", label="goal 0.8x")
    ax.set_yticks(list(ys), phases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("throughput / its raw baseline measured in the same round (moto)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def table(rows: list[Row]) -> str:
    lines = [
        "| phase | MiB/s | vs raw | S3 requests per GiB | notes |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.name} | {r.mib_per_s:.0f} | {ratio} | {r.requests_per_gib:.0f} | {r.note} |")
    return "\n".join(lines)


def opener(name: str, workdir: Path) -> Callable[[], contextlib.AbstractContextManager[S3Server]] | str:
    """What starts the named server, or why it cannot run here."""
    if name == "moto":
        return lambda: run_moto(workdir, atomic_puts=False)  # moto as it is: its PUTs not serialised
    python, reason = find_localstack_python()
    if python is None:
        return f"LocalStack skipped: {reason}"
    return lambda: run_localstack(python, workdir)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="32 MiB, moto only, 3 s of sustained produce")
    parser.add_argument("--mib", type=int, default=48, help="size of the partition log (default 48)")
    parser.add_argument("--backends", default="moto,localstack")
    parser.add_argument("--write", help="write the report (markdown) to this file")
    parser.add_argument("--results", help="write the rows as JSON to this file")
    parser.add_argument("--plot", nargs=3, metavar=("BEFORE", "AFTER", "PNG"), help="plot two --results")
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.plot[0], args.plot[1], Path(args.plot[2]))
        return 0
    mib = 32 if args.quick else args.mib
    names = ["moto"] if args.quick else args.backends.split(",")
    sustain_s = 3.0 if args.quick else 4.0
    rounds = 1 if args.quick else 2
    read_rounds = 2 if args.quick else 3
    started = time.perf_counter()
    sections: list[str] = []
    for k in AWS_UNSET:  # this process talks only to the servers it starts
        os.environ.pop(k, None)
    os.environ.update(AWS_TEST_ENV)
    with tempfile.TemporaryDirectory(prefix="tiering-bench-") as tmp:
        workdir = Path(tmp)
        log = write_log(workdir / "bench-0", mib * MiB, SEGMENT_BYTES)
        small_log = write_log(workdir / "bench-small", mib * MiB, SMALL_SEGMENT_BYTES)
        results: dict[str, Any] = {}
        try:
            for name in names:
                start = opener(name, workdir)
                if isinstance(start, str):
                    sections.append(f"### {name}\n\n{start}\n")
                    print(start, flush=True)
                    continue
                with start() as server:
                    rows = asyncio.run(
                        run_backend(server, (log, small_log), workdir, sustain_s, rounds, read_rounds)
                    )
                results[name] = results_json(rows)
                text = table(rows)
                print(f"\n{name} ({server.endpoint_url})\n{text}", flush=True)
                sections.append(f"### {name}\n\n{text}\n")
        finally:
            log.close()
            small_log.close()
    if args.results:
        Path(args.results).write_text(json.dumps(results, indent=1), encoding="utf-8")
    elapsed = time.perf_counter() - started
    header = (
        f"`infra/bench/tiering_bench.py{' --quick' if args.quick else ''}`: {mib} MiB partition log "
        f"({RECORD_BYTES} B records, {RECORDS_PER_BATCH} per batch, uncompressed), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work, server and benchmark on the same machine; "
        f"whole run {elapsed:.0f} s.\n"
    )
    report = header + "\n" + "\n".join(sections)
    if args.write:
        Path(args.write).write_text(report, encoding="utf-8")
    print(f"\ndone in {elapsed:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
