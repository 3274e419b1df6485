"""REST v2 consumer offset commits under a mixed load: commit latency while fetches long-poll (issue 34).

A broker runs as its own process (``python -m tierlog serve``) on 127.0.0.1. A load process opens about
200 connections: ``--groups`` consumer groups of ``--members`` REST v2 consumer instances each (one
connection per instance, subscribed to one topic of ``--members`` partitions, so each member owns one
partition), and ``--producers`` connections producing small JSON batches. Every consumer loops: poll
records (a long poll of ``--poll-timeout-ms``), commit what it consumed (``POST .../offsets`` with explicit
offsets, or with no body when nothing new was read), idle ``--idle-ms``. Producers loop: produce, idle.
Every request's latency is recorded by kind; the table gives each kind's p50 / p99 / max and count.

The load generator runs in a process of its own (its event loop must not be the broker's), and a run
with ``--pythonpath`` pointing at another checkout starts that tree's broker, so two trees can be
compared in one (interleaved) run:

    .venv/bin/python infra/bench/commit_bench.py [--seconds 20] [--rounds 2] \
        [--compare /work/main] [--plot docs/benchmarks-commit.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from hostile_bench import free_port, wait_ready

V2_JSON = "application/vnd.kafka.v2+json"
JSON_TYPE = "application/vnd.kafka.json.v2+json"
BINARY_ACCEPT = "application/vnd.kafka.binary.v2+json"
TOPIC = "mixed"
GOAL_P99_MS = 50.0
HERE = Path(__file__).resolve().parents[2]  # this checkout


@dataclass
class Row:
    tree: str
    round: int
    kind: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


# -- the load (runs in a child process: ``commit_bench.py --load URL ...``) -----------------------------


class Load:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self.latencies: dict[str, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.stop = asyncio.Event()

    async def timed(
        self, kind: str, session: aiohttp.ClientSession, method: str, path: str, **kw: object
    ) -> object:
        started = time.perf_counter()
        async with session.request(method, self.url + path, **kw) as response:  # type: ignore[arg-type]
            text = await response.text()
        ms = (time.perf_counter() - started) * 1000
        if response.status >= 400:
            self.errors[f"{kind} {response.status}"] = self.errors.get(f"{kind} {response.status}", 0) + 1
            return None
        if not self.stop.is_set():
            self.latencies.setdefault(kind, []).append(ms)
        return json.loads(text) if text else None

    async def consumer(self, group: str, index: int, ready: asyncio.Barrier) -> None:
        headers = {"Content-Type": V2_JSON, "Accept": BINARY_ACCEPT}
        connector = aiohttp.TCPConnector(limit=1)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
            name = f"m{index}"
            config = {"name": name, "format": "binary", "auto.offset.reset": "earliest",
                      "auto.commit.enable": "false"}  # fmt: skip
            await self.timed("create", session, "POST", f"/consumers/{group}", data=json.dumps(config))
            base = f"/consumers/{group}/instances/{name}"
            await self.timed("subscribe", session, "POST", base + "/subscription",
                             data=json.dumps({"topics": [TOPIC]}))  # fmt: skip
            await ready.wait()
            idle = self.args.idle_ms / 1000
            poll = f"{base}/records?timeout={self.args.poll_timeout_ms}&max_bytes=65536"
            while not self.stop.is_set():
                records = await self.timed("poll", session, "GET", poll)
                last: dict[tuple[str, int], int] = {}
                for record in records if isinstance(records, list) else []:
                    last[(record["topic"], record["partition"])] = record["offset"]
                offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]
                body = json.dumps({"offsets": offsets}) if offsets else None
                await self.timed("commit", session, "POST", base + "/offsets", data=body)
                await asyncio.sleep(idle)
            await self.timed("delete", session, "DELETE", base)

    async def producer(self, ready: asyncio.Barrier) -> None:
        headers = {"Content-Type": JSON_TYPE, "Accept": V2_JSON}
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
            await ready.wait()
            body = json.dumps({"records": [{"value": {"n": i, "pad": "x" * 64}} for i in range(10)]})
            while not self.stop.is_set():
                await self.timed("produce", session, "POST", f"/topics/{TOPIC}", data=body)
                await asyncio.sleep(self.args.produce_idle_ms / 1000 * random.uniform(0.5, 1.5))

    async def run(self) -> dict[str, object]:
        args = self.args
        async with aiohttp.ClientSession() as admin:
            cluster = await (await admin.get(self.url + "/v3/clusters")).json()
            cluster_id = cluster["data"][0]["cluster_id"]
            create = {"topic_name": TOPIC, "partitions_count": args.members}
            async with admin.post(f"{self.url}/v3/clusters/{cluster_id}/topics", json=create) as r:
                await r.read()
        groups = [f"g{g}" for g in range(args.groups)]
        ready = asyncio.Barrier(args.groups * args.members + args.producers + 1)
        tasks = [asyncio.create_task(self.consumer(g, i, ready)) for g in groups for i in range(args.members)]
        tasks += [asyncio.create_task(self.producer(ready)) for _ in range(args.producers)]
        await ready.wait()
        await asyncio.sleep(args.warmup)  # let the groups settle before counting
        self.latencies.clear()
        await asyncio.sleep(args.seconds)
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        return {"latencies": self.latencies, "errors": self.errors}


# -- the driver -------------------------------------------------------------------------------------------


async def run_tree(tree: str, pythonpath: str, rnd: int, args: argparse.Namespace) -> list[Row]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=pythonpath)
    with tempfile.TemporaryDirectory(prefix="tierlog-commit-") as tmp:
        broker_args = [sys.executable, "-m", "tierlog", "serve", "--data-dir", tmp, "--port", str(port)]
        broker_args += ["--logging-level", "WARNING", "--kafka-listener", "none"]
        broker = await asyncio.create_subprocess_exec(
            *broker_args, env=env, cwd=pythonpath, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )  # cwd too: ``-m`` puts the working directory first on sys.path
        try:
            await wait_ready(url, time.monotonic() + 60)
            load_args = [sys.executable, __file__, "--load", url, "--seconds", str(args.seconds)]
            for name in (
                "groups",
                "members",
                "producers",
                "idle_ms",
                "produce_idle_ms",
                "poll_timeout_ms",
                "warmup",
            ):
                load_args += ["--" + name.replace("_", "-"), str(getattr(args, name))]
            load = await asyncio.create_subprocess_exec(*load_args, stdout=subprocess.PIPE)
            out, _ = await load.communicate()
            result = json.loads(out)
        finally:
            broker.send_signal(signal.SIGTERM)
            await asyncio.wait_for(broker.wait(), 60)
    if result["errors"]:
        print(f"{tree} round {rnd}: errors {result['errors']}", file=sys.stderr)
    rows = []
    for kind in ("commit", "poll", "produce"):
        values = result["latencies"].get(kind, [])
        rows.append(
            Row(tree, rnd, kind, len(values), pct(values, 0.5), pct(values, 0.99), max(values or [0]))
        )
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| tree | round | request | count | p50 ms | p99 ms | max ms | p99 / 50 ms goal |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        goal = f"{r.p99_ms / GOAL_P99_MS:.2f}" if r.kind == "commit" else ""
        lines.append(
            f"| {r.tree} | {r.round} | {r.kind} | {r.count} | {r.p50_ms:.1f} | {r.p99_ms:.1f} "
            f"| {r.max_ms:.1f} | {goal} |"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    commits = [r for r in rows if r.kind == "commit"]
    labels = [f"{r.tree}\nround {r.round}" for r in commits]
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(commits))
    ax.bar([i - 0.2 for i in x], [r.p50_ms for r in commits], width=0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [r.p99_ms for r in commits], width=0.4, label="p99")
    ax.axhline(GOAL_P99_MS, color="tab:red", linestyle="--", label=f"goal: p99 ≤ {GOAL_P99_MS:.0f} ms")
    ax.set_xticks(list(x), labels)
    ax.set_yscale("log")
    ax.set_ylabel("REST v2 commit latency (ms, log scale)")
    ax.legend()
    ax.set_title("REST v2 offset commits under a mixed load (~200 connections)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--idle-ms", type=float, default=5)
    parser.add_argument("--produce-idle-ms", type=float, default=200)
    parser.add_argument("--poll-timeout-ms", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", default=None, help="another checkout whose broker runs interleaved")
    parser.add_argument("--plot", type=Path, default=Path("docs/benchmarks-commit.png"))
    parser.add_argument("--load", default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


async def main() -> None:
    args = parse()
    if args.load:
        print(json.dumps(await Load(args.load, args).run()))
        return
    here = str(HERE)
    trees = [("this tree", here)] + ([(f"{args.compare}", args.compare)] if args.compare else [])
    rows: list[Row] = []
    for rnd in range(1, args.rounds + 1):
        for name, path in trees:
            rows += await run_tree(name, path, rnd, args)
            print(f"done: {name} round {rnd}", file=sys.stderr, flush=True)
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}")
    print(table(rows))
    plot(rows, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    asyncio.run(main())
