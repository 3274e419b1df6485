"""One broker on its own: start-up, topic creation and produce latency of a single ``tierlog serve``.

Starts one broker as a child process on 127.0.0.1 with a fresh data directory (no ``metadata.uri``) and
measures:

* **start-up**: from spawning the process until ``GET /ready`` answers 200, on a fresh data directory
  and again on the same directory after a clean stop (it then holds the topics made below);
* **topic creation**: ``POST /v3/clusters/{id}/topics`` of a one-partition topic, from the request until
  the answer, and until a first ``acks=1`` produce to it succeeds (the partition is writable);
* **produce**: one single-record batch per ``POST /native/v1/topics/T/partitions/0/batches``, sequential
  over one keep-alive connection, with ``acks=1`` and ``acks=all``, after a warm-up.

Prints a Markdown table (medians, p50 and p99 in milliseconds):

    .venv/bin/python infra/bench/one_broker_bench.py [--starts 3] [--creates 20] [--produces 500] [-- ARGS]

``ARGS`` are passed to ``tierlog serve`` (e.g. ``--metadata-uri file:///tmp/m.json`` to compare).

Runs in well under a minute with the defaults. Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

START_DEADLINE_S = 60.0  # readiness bound on the child process; never a measured figure
BATCHES_TYPE = "application/vnd.tierlog.batches"
WARM_UP = 50


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    """The broker process with its log in a file; ``stop`` sends SIGTERM and waits, then SIGKILL."""

    proc: asyncio.subprocess.Process
    log: Path

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def start_broker(
    session: aiohttp.ClientSession, data: Path, log: Path, extra: list[str], pythonpath: str | None = None
) -> tuple[Child, str, float]:
    """Spawn ``tierlog serve`` on ``data``; returns it, its URL and the seconds until ``/ready`` was 200.
    ``pythonpath``: the source tree to run (another checkout, for a comparison); the child runs in the
    data directory's parent, so a tree in the working directory never shadows it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    argv = [
        sys.executable, "-m", "tierlog", "serve", "--port", str(port), "--advertised-url", url,
        "--data-dir", str(data), "--logging-level", "WARNING", *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    with open(log, "ab") as out:  # noqa: ASYNC230 - the benchmark's own log file, opened once per start
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=data.parent,
        )
    child = Child(proc, log)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"the broker exited {proc.returncode}:\n{read_log(log)}")
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url + "/ready") as answer:
                if answer.status == 200:
                    return child, url, time.perf_counter() - started
        await asyncio.sleep(0.005)
    await child.stop()
    raise RuntimeError(f"the broker was not ready in {START_DEADLINE_S} s:\n{read_log(log)}")


def read_log(log: Path) -> str:
    """The broker's log, for an error message (the benchmark is over by then)."""
    return log.read_text(errors="replace")


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as answer:
        body = await answer.json(content_type=None)
        if answer.status != 200:
            raise RuntimeError(f"GET {url}: {answer.status} {body}")
        return body


async def produce(session: aiohttp.ClientSession, url: str, topic: str, batch: bytes, acks: str) -> int:
    path = f"{url}/native/v1/topics/{topic}/partitions/0/batches?acks={acks}"
    async with session.post(path, data=batch, headers={"Content-Type": BATCHES_TYPE}) as answer:
        await answer.read()
        return answer.status


async def create_topic(
    session: aiohttp.ClientSession, url: str, cluster: str, topic: str, batch: bytes
) -> tuple[float, float]:
    """Seconds until the create answer, and until a first produce to the new topic succeeds."""
    started = time.perf_counter()
    body = {"topic_name": topic, "partitions_count": 1}
    async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as answer:
        text = await answer.read()
        if answer.status != 201:
            raise RuntimeError(f"create {topic}: {answer.status} {text!r}")
    answered = time.perf_counter() - started
    deadline = time.monotonic() + START_DEADLINE_S
    while await produce(session, url, topic, batch, "1") != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} not writable in {START_DEADLINE_S} s")
        await asyncio.sleep(0.001)
    return answered, time.perf_counter() - started


async def produce_latencies(
    session: aiohttp.ClientSession, url: str, topic: str, batch: bytes, acks: str, count: int
) -> list[float]:
    for _ in range(WARM_UP):
        await produce(session, url, topic, batch, acks)
    samples: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        status = await produce(session, url, topic, batch, acks)
        samples.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"produce acks={acks}: {status}")
    return samples


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


async def measure_requests(
    session: aiohttp.ClientSession, url: str, cluster: str, batch: bytes, args: argparse.Namespace
) -> list[tuple[str, str, str, str]]:
    """Topic creation, then produce latency to the first topic made."""
    answered: list[float] = []
    writable: list[float] = []
    for i in range(args.creates):
        until_answer, until_writable = await create_topic(session, url, cluster, f"bench-{i}", batch)
        answered.append(until_answer)
        writable.append(until_writable)
    rows = [
        ("topic create: answered", ms(statistics.median(answered)), "", ""),
        ("topic create: first produce ok", ms(statistics.median(writable)), "", ""),
    ]
    for acks in ("1", "all"):
        samples = await produce_latencies(session, url, "bench-0", batch, acks, args.produces)
        p50, p99 = ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99))
        rows.append((f"produce 1 record, acks={acks}", ms(statistics.median(samples)), p50, p99))
    return rows


async def run(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    batch = build_batch([Record(b"key", b"v" * 100)])
    with tempfile.TemporaryDirectory(prefix="tierlog-one-broker-") as tmp:
        work = Path(tmp)
        log = work / "broker.log"
        fresh: list[float] = []
        again: list[float] = []
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for run_index in range(args.starts):
                data = work / f"data-{run_index}"
                child, url, seconds = await start_broker(session, data, log, args.serve_args)
                fresh.append(seconds)
                try:
                    cluster = str((await get_json(session, url + "/v3/clusters"))["data"][0]["cluster_id"])
                    if run_index == 0:
                        rows += await measure_requests(session, url, cluster, batch, args)
                finally:
                    await child.stop()
                child, url, seconds = await start_broker(session, data, log, args.serve_args)
                again.append(seconds)
                await child.stop()
    rows.insert(0, ("start to /ready, fresh data dir", ms(statistics.median(fresh)), "", ""))
    rows.insert(1, ("start to /ready, after a clean stop", ms(statistics.median(again)), "", ""))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--starts", type=int, default=3, help="broker starts (each fresh, then again)")
    parser.add_argument("--creates", type=int, default=20, help="topics created (median reported)")
    parser.add_argument("--produces", type=int, default=500, help="produce requests per acks setting")
    parser.add_argument(
        "serve_args", nargs="*", help="more `tierlog serve` arguments (after --), e.g. --metadata-uri"
    )
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"one broker, {python}, {os.cpu_count()} cpus")
    print(f"{args.starts} starts, {args.creates} creates, {args.produces} produces per acks after {WARM_UP}")
    if args.serve_args:
        print("serve arguments:", " ".join(args.serve_args))
    print()
    print("| measurement | median ms | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for name, median, p50, p99 in rows:
        print(f"| {name} | {median} | {p50} | {p99} |")


if __name__ == "__main__":
    main()
