"""HTTP data-path benchmark: the native batch path and the REST v2 JSON path against a minimal ceiling.

Each server runs in its own process on 127.0.0.1; this process drives it with N concurrent aiohttp
clients. The ceiling is a minimal aiohttp server that only appends request bodies to a file and serves
byte ranges of it with sendfile: no validation, no offsets, no indexes. Our figures are printed as ratios
to it. Phases are time-bounded (``--seconds`` each, ``--quick`` for a smoke run), so the whole run takes
about a minute.

    .venv/bin/python infra/bench/http_bench.py [--quick] [--clients 4] [--output docs/benchmarks-http.md]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tiering.codec.batch import build_batch
from tiering.codec.header import iter_batches
from tiering.codec.records import Record

RECORD_BYTES = 1024
NATIVE_RECORDS = 1024
REST_RECORDS = 512
FETCH_BYTES = 1024 * 1024
BATCHES = "application/vnd.tierlog.batches"
REST_TYPE = "application/vnd.kafka.binary.v2+json"
Op = Callable[[aiohttp.ClientSession, int], Awaitable[int]]


# ---- servers (run in child processes) ---------------------------------------------------------------


async def _serve(app: web.Application, ready: Callable[[], Awaitable[None]] | None = None) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    if ready is not None:
        await ready()
    port = runner.addresses[0][1]
    print(f"PORT {port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def _baseline_app(data_dir: Path, partitions: int) -> web.Application:
    files = [
        os.open(data_dir / f"p{i}.bin", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        for i in range(partitions)
    ]
    sizes = [0] * partitions
    locks = [asyncio.Lock() for _ in range(partitions)]

    async def append(request: web.Request) -> web.Response:
        index = int(request.match_info["p"])
        body = await request.read()
        async with locks[index]:
            await asyncio.to_thread(os.write, files[index], body)
            position = sizes[index]
            sizes[index] += len(body)
        return web.json_response({"position": position})

    async def read_range(request: web.Request) -> web.StreamResponse:
        index = int(request.match_info["p"])
        offset = int(request.query["offset"])
        length = max(0, min(int(request.query["length"]), sizes[index] - offset))
        response = web.StreamResponse()
        response.content_length = length
        await response.prepare(request)
        if length:
            transport = request.transport
            assert transport is not None
            file = os.fdopen(os.dup(files[index]), "rb")
            try:
                await asyncio.get_running_loop().sendfile(transport, file, offset, length)
            finally:
                file.close()
        await response.write_eof()
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/append/{p}", append)
    app.router.add_get("/range/{p}", read_range)
    return app


def run_server(kind: str, data_dir: Path, partitions: int) -> None:
    """Child-process entry: serve ``kind`` on a free loopback port, print it, run until SIGTERM."""
    if kind == "baseline":
        asyncio.run(_serve(_baseline_app(data_dir, partitions)))
        return
    from service.app import create_app
    from service.config import build_settings
    from service.state import BROKER

    settings = build_settings(
        {
            "data.dir": str(data_dir),
            "port": "0",
            "max.request.size": str(64 * 1024 * 1024),
            "logging.level": "WARNING",
        }
    )
    app = create_app(settings)

    async def ready() -> None:
        broker = app[BROKER]
        await broker.wait_ready()
        for topic in ("native", "rest"):
            await broker.create_topic(topic, partitions, {"max.message.bytes": str(16 * 1024 * 1024)})

    asyncio.run(_serve(app, ready))


class Server:
    """A server child process; ``async with`` starts it and terminates it (and awaits its exit)."""

    def __init__(self, kind: str, data_dir: Path, partitions: int) -> None:
        self.kind, self.data_dir, self.partitions = kind, data_dir, partitions
        self.url = ""
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Server:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", self.kind, "--data-dir", str(self.data_dir),
            "--clients", str(self.partitions), stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = (await self._proc.stdout.readline()).decode().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"{self.kind} server did not start")
        self.url = f"http://127.0.0.1:{line[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


# ---- load ---------------------------------------------------------------------------------------------


@dataclass
class Result:
    """What one phase measured: operations, records moved, elapsed seconds, per-request latencies (s)."""

    ops: int = 0
    records: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def mib_per_s(self) -> float:
        return self.records * RECORD_BYTES / 2**20 / self.seconds if self.seconds else 0.0

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")


async def closed_loop(session: aiohttp.ClientSession, clients: int, seconds: float, op: Op) -> Result:
    """``clients`` workers each issue ``op`` back to back until ``seconds`` have passed."""
    result = Result()
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            result.records += await op(session, index)
            result.ops += 1
            result.latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for index in range(clients):
            group.create_task(worker(index))
    result.seconds = time.perf_counter() - start
    return result


async def open_loop(
    session: aiohttp.ClientSession, clients: int, seconds: float, rate: float, op: Op
) -> Result:
    """Issue ``op`` at ``rate`` per second, round-robin over clients; latency counts from the due time."""
    result = Result()
    start = time.perf_counter()
    total = max(1, int(rate * seconds))

    async def one(k: int, due: float) -> None:
        result.records += await op(session, k % clients)
        result.ops += 1
        result.latencies.append(time.perf_counter() - due)

    async with asyncio.TaskGroup() as group:
        for k in range(total):
            due = start + k / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(k, due))
    result.seconds = time.perf_counter() - start
    return result


def _value(i: int) -> bytes:
    return bytes([i % 251]) * RECORD_BYTES


class Workload:
    """The request bodies and the produce/fetch operations of one path against one server."""

    def __init__(self, path: str, url: str, clients: int) -> None:
        self.path, self.url = path, url
        self.positions = [0] * clients
        self.batch = build_batch([Record(b"key-%d" % i, _value(i)) for i in range(NATIVE_RECORDS)])
        records = [{"key": None, "value": base64.b64encode(_value(i)).decode()} for i in range(REST_RECORDS)]
        self.rest_body = json.dumps({"records": records}).encode()
        self.ends = [0] * clients

    async def produce(self, session: aiohttp.ClientSession, index: int) -> int:
        if self.path == "rest":
            url = f"{self.url}/topics/rest/partitions/{index}"
            async with session.post(
                url, data=self.rest_body, headers={"Content-Type": REST_TYPE}
            ) as response:
                assert response.status == 200, await response.text()
                await response.read()
            return REST_RECORDS
        if self.path == "native":
            url = f"{self.url}/native/v1/topics/native/partitions/{index}/batches"
            headers = {"Content-Type": BATCHES}
        else:
            url, headers = f"{self.url}/append/{index}", {}
        async with session.post(url, data=self.batch, headers=headers) as response:
            assert response.status == 200, await response.text()
            await response.read()
        self.ends[index] += len(self.batch)
        return NATIVE_RECORDS

    async def fetch(self, session: aiohttp.ClientSession, index: int) -> int:
        position = self.positions[index]
        if self.path == "rest":
            url = f"{self.url}/topics/rest/partitions/{index}/records"
            params = {"offset": str(position), "timeout": "0", "max_bytes": str(FETCH_BYTES)}
            async with session.get(url, params=params, headers={"Accept": REST_TYPE}) as response:
                records = await response.json(content_type=None)
            self.positions[index] = records[-1]["offset"] + 1 if records else 0
            return len(records)
        if self.path == "native":
            url = f"{self.url}/native/v1/topics/native/partitions/{index}/batches"
            params = {"offset": str(position), "max_bytes": str(FETCH_BYTES)}
        else:
            url = f"{self.url}/range/{index}"
            params = {"offset": str(position), "length": str(len(self.batch))}
        async with session.get(url, params=params) as response:
            data = await response.read()
        if not data:
            self.positions[index] = 0
            return 0
        count, next_offset = 0, position
        for _, header in iter_batches(data, verify=False):
            count += header.records_count
            next_offset = header.next_offset
        self.positions[index] = next_offset if self.path == "native" else position + len(data)
        return count


@dataclass
class PathFigures:
    """The median round of each phase for one path."""

    produce: Result
    fetch: Result
    latency: Result


def _median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.mib_per_s)[len(results) // 2]


async def measure(clients: int, seconds: float, rounds: int, data_root: Path) -> dict[str, PathFigures]:
    """Peak produce then fetch for every path, interleaved over ``rounds`` so that background load
    drifts hit every path alike; then produce latency at half of each path's median peak rate."""
    with tempfile.TemporaryDirectory(dir=data_root) as data_dir:
        root = Path(data_dir)
        (root / "ceiling").mkdir()
        (root / "broker").mkdir()
        async with (
            Server("baseline", root / "ceiling", clients) as ceiling,
            Server("broker", root / "broker", clients) as broker,
        ):
            connector = aiohttp.TCPConnector(limit=clients * 4)
            async with aiohttp.ClientSession(connector=connector) as session:
                works = {
                    "ceiling": Workload("ceiling", ceiling.url, clients),
                    "native": Workload("native", broker.url, clients),
                    "rest": Workload("rest", broker.url, clients),
                }
                produced: dict[str, list[Result]] = {path: [] for path in works}
                fetched: dict[str, list[Result]] = {path: [] for path in works}
                for _ in range(rounds):
                    for path, work in works.items():
                        produced[path].append(await closed_loop(session, clients, seconds, work.produce))
                        fetched[path].append(await closed_loop(session, clients, seconds, work.fetch))
                figures: dict[str, PathFigures] = {}
                for path, work in works.items():
                    peak = _median(produced[path])
                    rate = max(peak.ops_per_s / 2, 1.0)
                    latency = await open_loop(session, clients, seconds, rate, work.produce)
                    figures[path] = PathFigures(peak, _median(fetched[path]), latency)
                    print(f"measured {path}", file=sys.stderr, flush=True)
    return figures


def table(figures: dict[str, PathFigures]) -> list[str]:
    """Markdown table rows; ratios are to the ceiling's figures."""
    ceiling = figures["ceiling"]
    lines = [
        "| path | produce MiB/s | produce records/s | vs ceiling | fetch MiB/s | vs ceiling "
        "| p50 ms @50% | p99 ms @50% |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in figures.items():
        produce_ratio = f.produce.mib_per_s / ceiling.produce.mib_per_s
        fetch_ratio = f.fetch.mib_per_s / ceiling.fetch.mib_per_s
        lines.append(
            f"| {name} | {f.produce.mib_per_s:.0f} | {f.produce.records / f.produce.seconds:,.0f} "
            f"| {produce_ratio:.2f} | {f.fetch.mib_per_s:.0f} | {fetch_ratio:.2f} "
            f"| {f.latency.percentile(0.5):.1f} | {f.latency.percentile(0.99):.1f} |"
        )
    return lines


async def main(args: argparse.Namespace) -> str | None:
    """Run every phase, print the table, and return the markdown page when ``--output`` is set."""
    seconds = 1.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    figures = await measure(args.clients, seconds, rounds, Path(args.data_root))
    rows = table(figures)
    print("\n".join(rows))
    if args.output:
        header = [
            "# HTTP data-path benchmark",
            "",
            f"`infra/bench/http_bench.py {'--quick ' if args.quick else ''}--clients {args.clients}`: "
            f"{seconds:g} s per phase, median of {rounds} interleaved rounds, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs shared with other work.",
            "",
            f"Native: {NATIVE_RECORDS} records of {RECORD_BYTES} B per batch (about 1 MiB), one batch per "
            f"request, each client on its own partition. REST: {REST_RECORDS} base64 records per produce "
            "request (binary embedded format) and `max_bytes` 1 MiB per records fetch. Ceiling: a minimal "
            "aiohttp server that appends the body to a file and serves byte ranges with sendfile. MiB/s "
            "count record values delivered; latency is measured from the scheduled send time at half the "
            "peak request rate.",
            "",
        ]
        return "\n".join([*header, *rows, ""]) + "\n"
    return None


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one round of 1 s phases: a smoke run")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per phase (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is kept")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients, one partition each")
    parser.add_argument("--output", help="write the markdown table to this file")
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="where the servers keep data")
    parser.add_argument("--serve", choices=("broker", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    if arguments.serve:
        run_server(arguments.serve, Path(arguments.data_dir), arguments.clients)
    else:
        page = asyncio.run(main(arguments))
        if page is not None and arguments.output:
            Path(arguments.output).write_text(page)
