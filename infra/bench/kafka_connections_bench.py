"""Idle Kafka connections: how much broker memory each one holds (issue 30: 10,000 idle client connections
held with bounded memory).

One tierlog broker child process (``kafka_bench.Tierlog``, ``max.connections`` set above the count) is
opened ``--connections`` Kafka connections from this process, ``--batch`` at a time, each of which sends
an ApiVersions request (v0, as every client's first) and reads its answer, then stays open and silent. The
broker's resident memory (``VmRSS`` of ``/proc/<pid>/status``) and open descriptors are read before any
connection, once all are open, and after they are closed (once its ``tierlog_kafka_connections_open``
gauge reads 0); while all are held, one more connection times ``--probes`` ApiVersions round trips, to
show the held ones do not slow the broker's loop. Before/after figures are also taken after a first
warm-up wave of the same size, so what is measured is what connections hold, not what a first wave
leaves allocated in the allocator's arenas.

    .venv/bin/python infra/bench/kafka_connections_bench.py [--connections 10000] [--output FILE]

Not a test: it never fails on a figure. The client needs ``--connections`` + some descriptors of its
own: it raises its soft ``RLIMIT_NOFILE`` to the hard limit as the broker does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import kafka_bench

_API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, key 18, v0, correlation 1, no client id


@dataclass
class Snapshot:
    rss_kib: int
    descriptors: int


def snapshot(pid: int) -> Snapshot:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return Snapshot(rss, len(os.listdir(f"/proc/{pid}/fd")))


async def api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(_API_VERSIONS_V0)
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    if struct.unpack_from(">ih", frame) != (1, 0):
        raise RuntimeError("ApiVersions did not answer error 0")


async def open_one(bootstrap: str) -> asyncio.StreamWriter:
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    await api_versions(reader, writer)
    return writer


async def open_many(bootstrap: str, count: int, batch: int) -> list[asyncio.StreamWriter]:
    writers: list[asyncio.StreamWriter] = []
    while len(writers) < count:
        wave = min(batch, count - len(writers))
        writers += await asyncio.gather(*(open_one(bootstrap) for _ in range(wave)))
    return writers


async def close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)


def open_gauge(http_url: str) -> float:
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tierlog_kafka_connections_open")
    )


async def wait_closed_on_broker(http_url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(open_gauge, http_url) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the broker still counts open connections")
        await asyncio.sleep(0.2)  # polling a gauge, not asserting on time


async def probe(bootstrap: str, count: int) -> list[float]:
    host, port = bootstrap.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    out = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            await api_versions(reader, writer)
            out.append((time.perf_counter() - start) * 1000)
    finally:
        writer.close()
    return out


def _raise_own_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def measure(args: argparse.Namespace) -> str:
    _raise_own_limit()
    started = time.monotonic()
    count = args.connections
    settings = {"max.connections": str(count + 100)}
    with tempfile.TemporaryDirectory() as data_dir:
        async with kafka_bench.Tierlog(Path(data_dir), settings) as broker:
            fresh = snapshot(broker.pid)
            quiet = await probe(broker.bootstrap, args.probes)
            await close_all(await open_many(broker.bootstrap, count, args.batch))  # warm-up wave
            await wait_closed_on_broker(broker.http_url)
            before = snapshot(broker.pid)
            opening = time.perf_counter()
            writers = await open_many(broker.bootstrap, count, args.batch)
            opened_s = time.perf_counter() - opening
            held = snapshot(broker.pid)
            gauge = await asyncio.to_thread(open_gauge, broker.http_url)
            busy = await probe(broker.bootstrap, args.probes)
            await close_all(writers)
            await wait_closed_on_broker(broker.http_url)
            after = snapshot(broker.pid)
    per_connection = (held.rss_kib - fresh.rss_kib) * 1024 / count  # the allocator's growth included
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"`infra/bench/kafka_connections_bench.py --connections {count}`, {stamp}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs shared with other work, load average "
        f"{os.getloadavg()[0]:.1f} at the end; whole run {time.monotonic() - started:.0f} s.",
        "",
        "| broker state | RSS MiB | open descriptors |",
        "| --- | ---: | ---: |",
        f"| started, no client | {fresh.rss_kib / 1024:,.1f} | {fresh.descriptors:,} |",
        f"| after a warm-up wave of {count:,} connections, all closed | {before.rss_kib / 1024:,.1f} | "
        f"{before.descriptors:,} |",
        f"| {count:,} idle connections held (gauge: {gauge:,.0f}) | {held.rss_kib / 1024:,.1f} | "
        f"{held.descriptors:,} |",
        f"| all closed again | {after.rss_kib / 1024:,.1f} | {after.descriptors:,} |",
        "",
        f"Per idle connection: **{per_connection / 1024:.1f} KiB** of broker RSS "
        f"({(held.rss_kib - fresh.rss_kib) / 1024:,.1f} MiB for {count:,} over the fresh broker); the "
        f"second wave held {(held.rss_kib - before.rss_kib) / 1024:,.1f} MiB more than the closed first "
        f"one left (memory of closed connections is reused, not leaked). Opened (with ApiVersions) "
        f"in {opened_s:.1f} s, {count / opened_s:,.0f} connections/s.",
        f"ApiVersions round trip on one more connection: median {statistics.median(quiet):.3f} ms with no "
        f"other client, {statistics.median(busy):.3f} ms with the {count:,} held "
        f"({args.probes} each).",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000, help="idle connections to hold")
    parser.add_argument("--batch", type=int, default=200, help="connections opened at once")
    parser.add_argument("--probes", type=int, default=200, help="ApiVersions round trips timed")
    parser.add_argument("--output", help="write the markdown to this file")
    args = parser.parse_args(argv)
    text = asyncio.run(measure(args))
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
