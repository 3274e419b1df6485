"""Hostile REST load: memory and event-loop responsiveness while many huge JSON produce bodies arrive.

A broker runs as its own process (``python -m tierlog serve``) on 127.0.0.1. This process sends
``--concurrency`` REST v2 JSON produce requests at once (``--rounds`` bursts, one after the other), each
a body of ``--records`` records with a null value (about 17 bytes of JSON per record: the case that costs
the most Python objects per byte), while a sampler process asks ``GET /health`` every 10 ms and this one
reads the broker's resident memory from ``/proc``. Two broker configurations run: the defaults (the parse
stops at record 100001 of each body: 422) and one that admits the bodies (``rest.produce.max.records``
1M, ``max.request.size`` 64 MiB: all 500k records are parsed and converted, then the request is refused
with 413 because they cannot fit the topic's ``max.message.bytes``). Requests that do not fit
``rest.produce.conversion.max.bytes`` get 503.

The table gives the broker's peak RSS (``VmHWM``) against its idle RSS, the answers, and the ``/health``
latency during the load; the plot goes next to the table in ``docs/benchmarks-hostile.md``.

    .venv/bin/python infra/bench/hostile_bench.py [--records 500000] [--concurrency 8 16] [--rounds 3]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

JSON_TYPE = "application/vnd.kafka.json.v2+json"
CONFIGS: dict[str, dict[str, str]] = {
    "defaults": {},
    "admitted": {"rest.produce.max.records": "1000000", "max.request.size": "67108864"},
}


@dataclass
class Outcome:
    config: str
    concurrency: int
    body_mb: float
    idle_rss_mb: float
    peak_rss_mb: float
    answers: str
    health_p50_ms: float
    health_p99_ms: float
    health_max_ms: float
    seconds: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def proc_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def body(records: int) -> bytes:
    one = b'{"value":null}'
    return b'{"records":[' + b",".join([one] * records) + b"]}"


# The /health sampler runs as its own process: in this one, the loop that writes the huge bodies would
# delay the samples (aiohttp warns that large raw bodies can block its loop) and they would measure this
# client, not the broker. It asks every 10 ms on one keep-alive connection until its stdin closes, then
# prints one latency (ms) per line.
SAMPLER = """
import http.client, sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=120)
print("ready", flush=True)
latencies = []
while not stop.is_set():
    started = time.perf_counter()
    conn.request("GET", "/health")
    conn.getresponse().read()
    latencies.append((time.perf_counter() - started) * 1000)
    time.sleep(0.01)
print("\\n".join(f"{ms:.3f}" for ms in latencies))
"""


async def start_sampler(port: int) -> asyncio.subprocess.Process:
    sampler = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SAMPLER, str(port), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert sampler.stdout is not None
    await sampler.stdout.readline()  # "ready": sampling starts before the load
    return sampler


async def stop_sampler(sampler: asyncio.subprocess.Process) -> list[float]:
    out, _ = await sampler.communicate(b"")
    return [float(line) for line in out.decode().split()]


async def wait_ready(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"broker at {url} not ready")


async def run_case(config: str, concurrency: int, payload: bytes, rounds: int) -> Outcome:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tierlog-hostile-") as tmp:
        args = [sys.executable, "-m", "tierlog", "serve", "--data-dir", tmp, "--port", str(port)]
        args += ["--logging-level", "WARNING"]
        for name, value in CONFIGS[config].items():
            args += ["--" + name.replace(".", "-"), value]
        broker = await asyncio.create_subprocess_exec(
            *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            await wait_ready(url, time.monotonic() + 30)
            timeout = aiohttp.ClientTimeout(total=300)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                headers = {"Content-Type": JSON_TYPE}
                async with session.post(url + "/topics/hostile", data=b'{"records":[{"value":1}]}',
                                        headers=headers) as warm:  # fmt: skip
                    await warm.read()
                idle = proc_kib(broker.pid, "VmRSS") / 1024

                async def produce() -> int:
                    async with session.post(url + "/topics/hostile", data=payload, headers=headers) as r:
                        await r.read()
                        return r.status

                sampler = await start_sampler(port)
                started = time.perf_counter()
                try:
                    statuses = []
                    for _ in range(rounds):  # bursts one after the other: more /health samples per row
                        statuses += await asyncio.gather(*(produce() for _ in range(concurrency)))
                finally:
                    latencies = await stop_sampler(sampler)
                elapsed = time.perf_counter() - started
                peak = proc_kib(broker.pid, "VmHWM") / 1024
        finally:
            broker.send_signal(signal.SIGTERM)
            await asyncio.wait_for(broker.wait(), 30)
    counts = Counter(statuses)
    latencies.sort()
    return Outcome(
        config=config,
        concurrency=concurrency,
        body_mb=len(payload) / 2**20,
        idle_rss_mb=idle,
        peak_rss_mb=peak,
        answers=", ".join(f"{n}x{s}" for s, n in sorted(counts.items())),
        health_p50_ms=statistics.median(latencies),
        health_p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        health_max_ms=latencies[-1],
        seconds=elapsed,
    )


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| broker config | concurrent bodies | body MiB | idle RSS MiB | peak RSS MiB | peak / 300 MiB goal "
        "| answers | /health p50 ms | p99 ms | max ms | seconds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.config} | {o.concurrency} | {o.body_mb:.1f} | {o.idle_rss_mb:.0f} | {o.peak_rss_mb:.0f} "
            f"| {o.peak_rss_mb / 300:.2f} | {o.answers} | {o.health_p50_ms:.1f} | {o.health_p99_ms:.1f} "
            f"| {o.health_max_ms:.1f} | {o.seconds:.1f} |"
        )
    return "\n".join(lines)


def plot(outcomes: list[Outcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{o.config}\n{o.concurrency} bodies" for o in outcomes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(labels, [o.peak_rss_mb for o in outcomes], color="tab:blue")
    left.axhline(300, color="tab:red", linestyle="--", label="goal: 300 MiB")
    left.set_ylabel("broker peak RSS (MiB)")
    left.legend()
    right.bar(labels, [o.health_p99_ms for o in outcomes], color="tab:green", label="p99")
    right.scatter(labels, [o.health_max_ms for o in outcomes], color="black", zorder=3, label="max")
    right.axhline(100, color="tab:red", linestyle="--", label="goal: 100 ms")
    right.set_ylabel("/health latency during the load (ms)")
    right.legend()
    fig.suptitle("Hostile REST JSON produce: memory and event-loop responsiveness")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--rounds", type=int, default=3, help="bursts per row, one after the other")
    parser.add_argument("--plot", type=Path, default=Path("docs/benchmarks-hostile.png"))
    args = parser.parse_args()
    payload = body(args.records)
    outcomes = []
    for config in CONFIGS:
        for concurrency in args.concurrency:
            outcomes.append(await run_case(config, concurrency, payload, args.rounds))
            print(f"done: {config} x{concurrency}", file=sys.stderr, flush=True)
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}")
    print(table(outcomes))
    plot(outcomes, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    asyncio.run(main())
