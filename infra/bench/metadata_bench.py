"""The cost of cluster metadata: a 3-broker cluster on etcd against a single embedded broker.

Starts, as child processes on 127.0.0.1, one ``tierlog serve`` without ``metadata.uri`` (the embedded
broker), then one etcd and three ``tierlog serve --metadata-uri etcd://...`` brokers, and measures on each:

* **topic creation**: ``POST /v3/clusters/{id}/topics`` with 1, 100 and 1,000 partitions, from the request
  until the answer (in a cluster the serving broker answers once its cache shows a leader for every
  partition), and, in the cluster, until *every* broker's ``GET /native/v1/metadata?topic=T`` shows a
  leader for every partition. Each topic is deleted before the next creation, so open files stay bounded.
* **metadata requests**: sequential ``GET /native/v1/metadata?topic=T`` (one 100-partition topic),
  ``GET /native/v1/metadata`` (every topic) and v3 ``GET .../topics/T/partitions``, p50 and p99 over a
  keep-alive connection to one broker.

The two setups run one after the other on this machine, so read the ratios, not the absolute figures.
Prints a Markdown table and saves a plot:

    .venv/bin/python infra/bench/metadata_bench.py [--quick] [--plot docs/benchmarks-cluster.png]

Not a test: it never fails on a timing.
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
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SESSION_MS = 9000
START_DEADLINE_S = 120.0  # readiness bound on a child process; never a measured figure
PARTITION_COUNTS = (1, 100, 1000)
LATENCY_TOPIC_PARTITIONS = 100
NATIVE_ONE = f"native metadata, 1 topic x {LATENCY_TOPIC_PARTITIONS} partitions"
NATIVE_ALL = "native metadata, every topic"
V3_PARTITIONS = f"v3 partitions list, 1 topic x {LATENCY_TOPIC_PARTITIONS}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    """A child process with its log in a file; ``stop`` sends SIGTERM and waits, then SIGKILL."""

    name: str
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


async def spawn(name: str, argv: list[str], log: Path) -> Child:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_")}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:  # noqa: ASYNC230 - a benchmark's own log file, opened once per child
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env
        )
    return Child(name, proc, log)


async def wait_ready(session: aiohttp.ClientSession, url: str, child: Child) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if child.proc.returncode is not None:
            raise RuntimeError(f"{child.name} exited {child.proc.returncode}:\n{child.log.read_text()}")
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(url) as answer:
                if answer.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{child.name} not ready at {url} in {START_DEADLINE_S} s:\n{child.log.read_text()}")


async def start_etcd(work: Path, session: aiohttp.ClientSession) -> tuple[Child, str]:
    client, peer = free_port(), free_port()
    etcd = BIN / "etcd" if (BIN / "etcd").exists() else Path("etcd")
    url = f"http://127.0.0.1:{client}"
    argv = [
        str(etcd), "--name", "bench", "--data-dir", str(work / "etcd"),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"bench=http://127.0.0.1:{peer}",
    ]  # fmt: skip
    child = await spawn("etcd", argv, work / "etcd.log")
    await wait_ready(session, url + "/health", child)
    return child, f"127.0.0.1:{client}"


async def start_broker(
    work: Path, session: aiohttp.ClientSession, *extra: str, name: str
) -> tuple[Child, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "tierlog", "serve", "--port", str(port), "--advertised-url", url,
        "--data-dir", str(work / name), "--logging-level", "WARNING", *extra,
    ]  # fmt: skip
    child = await spawn(name, argv, work / f"{name}.log")
    await wait_ready(session, url + "/ready", child)
    return child, url


@contextlib.asynccontextmanager
async def single_broker(work: Path, session: aiohttp.ClientSession) -> AsyncIterator[list[str]]:
    child, url = await start_broker(work, session, name="single")
    try:
        yield [url]
    finally:
        await child.stop()


@contextlib.asynccontextmanager
async def three_brokers(work: Path, session: aiohttp.ClientSession) -> AsyncIterator[list[str]]:
    etcd, endpoint = await start_etcd(work, session)
    children: list[Child] = []
    urls: list[str] = []
    try:
        for broker_id in (1, 2, 3):
            child, url = await start_broker(
                work, session,
                "--metadata-uri", f"etcd://{endpoint}/bench", "--broker-id", str(broker_id),
                "--broker-session-timeout-ms", str(SESSION_MS),
                name=f"broker-{broker_id}",
            )  # fmt: skip
            children.append(child)
            urls.append(url)
        yield urls
    finally:
        for child in children:
            await child.stop()
        await etcd.stop()


# ---- measurements ------------------------------------------------------------------------------------


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as answer:
        body = await answer.json(content_type=None)
        if answer.status != 200:
            raise RuntimeError(f"GET {url}: {answer.status} {body}")
        return body


async def cluster_id(session: aiohttp.ClientSession, url: str) -> str:
    return str((await get_json(session, url + "/v3/clusters"))["data"][0]["cluster_id"])


async def all_led(session: aiohttp.ClientSession, urls: list[str], topic: str, partitions: int) -> bool:
    for url in urls:
        meta = await get_json(session, f"{url}/native/v1/metadata?topic={topic}")
        parts: list[dict[str, Any]] = next(
            (t["partitions"] for t in meta.get("topics", []) if t["topic"] == topic), []
        )
        if len(parts) != partitions or any(p["leader"] == -1 for p in parts):
            return False
    return True


async def all_open(session: aiohttp.ClientSession, urls: list[str], topic: str, partitions: int) -> bool:
    """Whether every partition is open on its leader: each broker lists the partitions it leads and has
    open in ``GET /native/v1/topics/T``; together they must cover the topic."""
    opened: set[int] = set()
    for url in urls:
        async with session.get(f"{url}/native/v1/topics/{topic}") as answer:
            if answer.status != 200:
                return False
            opened.update(p["partition"] for p in (await answer.json())["partitions"])
    return len(opened) == partitions


async def create(
    session: aiohttp.ClientSession, urls: list[str], topic: str, partitions: int
) -> tuple[float, float, float]:
    """Seconds until the create answer, until every broker shows a leader for every partition, and until
    every partition is open (writable) on its leader."""
    base = f"{urls[0]}/v3/clusters/{await cluster_id(session, urls[0])}/topics"
    started = time.perf_counter()
    async with session.post(base, json={"topic_name": topic, "partitions_count": partitions}) as answer:
        body = await answer.read()
        if answer.status != 201:
            raise RuntimeError(f"create {topic}: {answer.status} {body!r}")
    answered = time.perf_counter() - started
    deadline = time.monotonic() + START_DEADLINE_S
    led = opened = None
    while led is None or opened is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: not every partition led and open within {START_DEADLINE_S} s")
        if led is None and await all_led(session, urls, topic, partitions):
            led = time.perf_counter() - started
        if opened is None and await all_open(session, urls, topic, partitions):
            opened = time.perf_counter() - started
        if led is None or opened is None:
            await asyncio.sleep(0.005)
    return answered, led, opened


async def delete(session: aiohttp.ClientSession, url: str, topic: str) -> None:
    path = f"{url}/v3/clusters/{await cluster_id(session, url)}/topics/{topic}"
    async with session.delete(path) as answer:
        if answer.status not in (200, 204):
            raise RuntimeError(f"delete {topic}: {answer.status} {await answer.text()}")


async def latencies(session: aiohttp.ClientSession, url: str, requests: int) -> list[float]:
    samples: list[float] = []
    for _ in range(requests):
        started = time.perf_counter()
        async with session.get(url) as answer:
            await answer.read()
            if answer.status != 200:
                raise RuntimeError(f"GET {url}: {answer.status}")
        samples.append(time.perf_counter() - started)
    return samples


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass
class Results:
    setup: str
    urls: list[str]
    answered: dict[int, list[float]] = field(default_factory=dict)  # seconds to the create answer
    led: dict[int, list[float]] = field(default_factory=dict)  # ... until every broker shows every leader
    opened: dict[int, list[float]] = field(default_factory=dict)  # ... until every partition is writable
    samples: dict[str, list[float]] = field(default_factory=dict)  # route -> request latencies (s)

    def create_ms(self, kind: str, partitions: int) -> float:
        runs: dict[int, list[float]] = getattr(self, kind)
        return statistics.median(runs[partitions]) * 1000

    def latency_ms(self, route: str, q: float) -> float:
        return pct(self.samples[route], q) * 1000


async def measure(setups: list[Results], session: aiohttp.ClientSession, quick: bool) -> None:
    """Every measurement alternates between the setups round by round, so a burst of load from other
    processes on the machine falls on both sides of a ratio alike."""
    for partitions in PARTITION_COUNTS:
        rounds = (2 if quick else 5) if partitions < 1000 else (1 if quick else 2)
        for n in range(rounds):
            for setup in setups:
                topic = f"create-{partitions}-{n}"
                answered, led, opened = await create(session, setup.urls, topic, partitions)
                setup.answered.setdefault(partitions, []).append(answered)
                setup.led.setdefault(partitions, []).append(led)
                setup.opened.setdefault(partitions, []).append(opened)
                await delete(session, setup.urls[0], topic)
                print(f"{setup.setup}: create {partitions} partition(s): answer {answered * 1000:.0f} ms, "
                      f"open everywhere {opened * 1000:.0f} ms", file=sys.stderr, flush=True)  # fmt: skip
    routes: dict[str, dict[str, str]] = {}
    for setup in setups:
        await create(session, setup.urls, "latency", LATENCY_TOPIC_PARTITIONS)
        cid = await cluster_id(session, setup.urls[0])
        routes[setup.setup] = {
            NATIVE_ONE: "/native/v1/metadata?topic=latency",
            NATIVE_ALL: "/native/v1/metadata",
            V3_PARTITIONS: f"/v3/clusters/{cid}/topics/latency/partitions",
        }
    chunk, chunks = (30, 2) if quick else (50, 8)
    for route in (NATIVE_ONE, NATIVE_ALL, V3_PARTITIONS):
        for setup in setups:
            await latencies(session, setup.urls[0] + routes[setup.setup][route], 10)  # warm up
        for _ in range(chunks):
            for setup in setups:
                got = await latencies(session, setup.urls[0] + routes[setup.setup][route], chunk)
                setup.samples.setdefault(route, []).extend(got)


def table(single: Results, cluster: Results) -> str:
    lines = [
        "| measurement | single broker | 3 brokers + etcd | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    kinds = (
        ("answered", "answer"),
        ("led", "leaders seen by every broker"),
        ("opened", "open on every leader"),
    )
    for p in PARTITION_COUNTS:
        for kind, label in kinds:
            a, b = single.create_ms(kind, p), cluster.create_ms(kind, p)
            lines.append(
                f"| create topic, {p:,} partition(s): {label} (ms) | {a:,.1f} | {b:,.1f} | {b / a:.2f} |"
            )
    for route in single.samples:
        for q, name in ((0.5, "p50"), (0.99, "p99")):
            a, b = single.latency_ms(route, q), cluster.latency_ms(route, q)
            lines.append(f"| {route}: {name} (ms) | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    return "\n".join(lines)


def plot(single: Results, cluster: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = range(len(PARTITION_COUNTS))
    width = 0.38
    for offset, results, colour in ((-width / 2, single, "tab:blue"), (width / 2, cluster, "tab:orange")):
        answers = [results.create_ms("answered", p) for p in PARTITION_COUNTS]
        left.bar([x + offset for x in xs], answers, width, label=f"{results.setup}: answer", color=colour)
        left.scatter([x + offset for x in xs], [results.create_ms("opened", p) for p in PARTITION_COUNTS],
                     color="black", marker="_", s=300, zorder=3)  # fmt: skip
    left.set_xticks(list(xs), [f"{p:,} partitions" for p in PARTITION_COUNTS])
    left.set_yscale("log")
    left.set_ylabel("topic creation (ms, log): bar answer, dash open everywhere")
    left.legend()
    routes = list(single.samples)
    ys = range(len(routes))
    for offset, results, colour in ((-width / 2, single, "tab:blue"), (width / 2, cluster, "tab:orange")):
        right.bar([y + offset for y in ys], [results.latency_ms(r, 0.5) for r in routes], width,
                  label=f"{results.setup} p50", color=colour)  # fmt: skip
        right.scatter([y + offset for y in ys], [results.latency_ms(r, 0.99) for r in routes], color="black",
                      marker="_", s=300, zorder=3)  # fmt: skip
    right.set_xticks(list(ys), [r.replace(", ", "\n") for r in routes], fontsize=8)
    right.set_ylabel("metadata request latency (ms): bar p50, dash p99")
    right.legend()
    fig.suptitle("Cluster metadata cost: 3 brokers on etcd vs one embedded broker")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="metadata-bench-") as tmp:
        work = Path(tmp)
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as session,
            single_broker(work / "single", session) as one,
            three_brokers(work / "cluster", session) as three,
        ):
            single, cluster = Results("single broker", one), Results("3 brokers + etcd", three)
            await measure([single, cluster], session, args.quick)
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(table(single, cluster))
    plot(single, cluster, args.plot)
    print(f"plot: {args.plot}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and requests (a smoke run)")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "benchmarks-cluster.png")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
