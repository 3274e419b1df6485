"""HTTP data-path benchmark: the native batch path and the REST v2 JSON path against a minimal ceiling.

Each server runs in its own process on 127.0.0.1; this process drives it with N concurrent aiohttp
clients. The ceiling is a minimal aiohttp server that only appends request bodies to a file and serves
byte ranges of it with sendfile: no validation, no offsets, no indexes. Our figures are printed as ratios
to it. Phases are time-bounded (``--seconds`` each, ``--quick`` for a smoke run), so the whole run takes
about a minute.

    .venv/bin/python infra/bench/http_bench.py [--quick] [--clients 4] [--output docs/benchmarks-http.md]
        [--plot docs/benchmarks-http.png]

The REST client parses each records fetch's JSON array with msgspec, the fastest parser at hand: the
bench measures the server, and with one sequential client the stdlib's ``json`` (some 40% of the client's
time in a profile) added its parse to every fetch's round trip.

``--secure`` adds a third server: the broker again with TLS (a trustme CA, the certificate for 127.0.0.1)
and HTTP Basic authentication on (one super user), driven on the native path over HTTPS with credentials,
in the same interleaved rounds; its table row and the ``secure / native`` ratios show what security costs.

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import msgspec
from aiohttp import web

from tierlog.service import allocator
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record

RECORD_BYTES = 1024
NATIVE_RECORDS = 1024
REST_RECORDS = 512
FETCH_BYTES = 1024 * 1024
BATCHES = "application/vnd.tierlog.batches"
REST_TYPE = "application/vnd.kafka.binary.v2+json"
# Goals the docs state, as ratios to the ceiling (docs/design/0009-compiled-codec.md: native produce >= 0.8x).
GOALS = {("native", "produce"): 0.8}
# docs/security.md: native produce/fetch with TLS and authentication on stay >= 0.7x of the plain path.
SECURE_GOAL = 0.7
SECURE_USER, SECURE_PASSWORD = "bench", "bench-secret"
Ratios = dict[tuple[str, str], float]


# ---- servers (run in child processes) ---------------------------------------------------------------


async def _serve(
    app: web.Application,
    ready: Callable[[], Awaitable[None]] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    from tierlog.service.web.keys import BROKER

    if BROKER in app:  # a broker on port 0 learns its URL once bound, and opens only then (as serve does)
        app[BROKER].advertise(f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}")
    if ready is not None:
        await ready()
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
        transport = request.transport
        assert transport is not None
        if length and transport.get_extra_info("sslcontext") is not None:
            await response.write(await asyncio.to_thread(os.pread, files[index], length, offset))
        elif length:
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
    """Child-process entry: serve ``kind`` on a free loopback port, print it, run until SIGTERM.

    Every server, the ceilings too, runs with the allocator settings ``tierlog serve`` applies
    (:mod:`tierlog.service.allocator`), so that the ratios compare the code, not the allocator."""
    allocator.tune()
    if kind in ("baseline", "baseline-tls"):
        context = None
        if kind == "baseline-tls":
            certs = data_dir.parent / "certs"
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
        asyncio.run(_serve(_baseline_app(data_dir, partitions), None, context))
        return
    from tierlog.service.app import create_app
    from tierlog.service.security.tls import server_context
    from tierlog.service.settings.config import build_settings
    from tierlog.service.web.keys import BROKER

    values = {
        "data.dir": str(data_dir),
        "port": "0",
        "max.request.size": str(64 * 1024 * 1024),
        "logging.level": "WARNING",
    }
    if kind == "secure":
        certs = data_dir.parent / "certs"
        values |= {
            "ssl.certfile": str(certs / "server.pem"),
            "ssl.keyfile": str(certs / "server-key.pem"),
            "authentication.methods": "basic",
            "super.users": f"User:{SECURE_USER}",
        }
        asyncio.run(_add_user(data_dir))
    settings = build_settings({"kafka.listener": "none", **values})
    app = create_app(settings)

    async def ready() -> None:
        broker = app[BROKER]
        await broker.wait_ready()
        for topic in ("native", "rest"):
            await broker.create_topic(topic, partitions, {"max.message.bytes": str(16 * 1024 * 1024)})

    context = server_context(settings.security) if settings.security.tls else None
    asyncio.run(_serve(app, ready, context))


async def _add_user(data_dir: Path) -> None:
    """Store the benchmark's user in the broker's metadata file before it starts (``tierlog users add``)."""
    from tierlog.service.security.scram import make_credential
    from tierlog.service.security.security_store import SecurityStore

    store = SecurityStore.offline(data_dir)
    await store.start()
    try:
        await store.put_user(SECURE_USER, make_credential(SECURE_PASSWORD))
    finally:
        await store.close()


def _make_certificates(directory: Path) -> Path:
    """A CA and a certificate for 127.0.0.1 in ``directory``; answers the CA file clients trust."""
    import trustme

    directory.mkdir()
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(str(directory / "server.pem"))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(directory / "server.pem"), append=True)
    cert.private_key_pem.write_to_path(str(directory / "server-key.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return directory / "ca.pem"


class Server:
    """A server child process; ``async with`` starts it and terminates it (and awaits its exit)."""

    def __init__(self, kind: str, data_dir: Path, partitions: int) -> None:
        self.kind, self.data_dir, self.partitions = kind, data_dir, partitions
        self.url = ""
        self._proc: asyncio.subprocess.Process | None = None

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used (Linux procfs; 0 elsewhere)."""
        if self._proc is None:
            return 0.0
        try:
            with open(f"/proc/{self._proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def __aenter__(self) -> Server:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", self.kind, "--data-dir", str(self.data_dir),
            "--clients", str(self.partitions), stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = (await self._proc.stdout.readline()).decode().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"{self.kind} server did not start")
        scheme = "https" if self.kind in ("secure", "baseline-tls") else "http"
        self.url = f"{scheme}://127.0.0.1:{line[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


# ---- load: one client process per concurrent client ----------------------------------------------------


@dataclass
class Result:
    """What one phase measured: operations, records moved, elapsed seconds, per-request latencies (s)."""

    ops: int = 0
    records: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float = 0.0

    @property
    def cpu_ms_per_mib(self) -> float:
        mib = self.records * RECORD_BYTES / 2**20
        return self.server_cpu * 1000 / mib if mib else float("nan")

    @property
    def mib_per_s(self) -> float:
        return self.records * RECORD_BYTES / 2**20 / self.seconds if self.seconds else 0.0

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")

    @classmethod
    def merge(cls, parts: list[Result]) -> Result:
        """The clients' results as one: totals over the longest client's elapsed time."""
        merged = cls(seconds=max(part.seconds for part in parts))
        for part in parts:
            merged.ops += part.ops
            merged.records += part.records
            merged.latencies += part.latencies
        return merged


async def closed_loop(seconds: float, op: Callable[[], Awaitable[int]]) -> Result:
    """Issue ``op`` back to back until ``seconds`` have passed."""
    result = Result()
    start = time.perf_counter()
    deadline = start + seconds
    while (now := time.perf_counter()) < deadline:
        result.records += await op()
        result.ops += 1
        result.latencies.append(time.perf_counter() - now)
    result.seconds = time.perf_counter() - start
    return result


async def open_loop(seconds: float, rate: float, op: Callable[[], Awaitable[int]]) -> Result:
    """Issue ``op`` at ``rate`` per second whatever the answers' pace; latency counts from the due time."""
    result = Result()
    start = time.perf_counter()

    async def one(due: float) -> None:
        result.records += await op()
        result.ops += 1
        result.latencies.append(time.perf_counter() - due)

    async with asyncio.TaskGroup() as group:
        for k in range(max(1, int(rate * seconds))):
            due = start + k / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(due))
    result.seconds = time.perf_counter() - start
    return result


def _value(i: int) -> bytes:
    return bytes([i % 251]) * RECORD_BYTES


class Workload:
    """The request bodies and the produce/fetch operations of one path for one client and partition."""

    def __init__(self, path: str, url: str, partition: int) -> None:
        self.path, self.url, self.partition = path, url, partition
        self.position = 0
        self.batch = build_batch([Record(b"key-%d" % i, _value(i)) for i in range(NATIVE_RECORDS)])
        records = [{"key": None, "value": base64.b64encode(_value(i)).decode()} for i in range(REST_RECORDS)]
        self.rest_body = json.dumps({"records": records}).encode()

    async def produce(self, session: aiohttp.ClientSession) -> int:
        if self.path == "rest":
            url = f"{self.url}/topics/rest/partitions/{self.partition}"
            headers = {"Content-Type": REST_TYPE}
            async with session.post(url, data=self.rest_body, headers=headers) as response:
                assert response.status == 200, await response.text()
                await response.read()
            return REST_RECORDS
        if self.path in ("native", "secure"):
            url = f"{self.url}/native/v1/topics/native/partitions/{self.partition}/batches"
            headers = {"Content-Type": BATCHES}
        else:
            url, headers = f"{self.url}/append/{self.partition}", {}
        async with session.post(url, data=self.batch, headers=headers) as response:
            assert response.status == 200, await response.text()
            await response.read()
        return NATIVE_RECORDS

    async def fetch(self, session: aiohttp.ClientSession) -> int:
        if self.path == "rest":
            url = f"{self.url}/topics/rest/partitions/{self.partition}/records"
            params = {"offset": str(self.position), "timeout": "0", "max_bytes": str(FETCH_BYTES)}
            async with session.get(url, params=params, headers={"Accept": REST_TYPE}) as response:
                records = msgspec.json.decode(await response.read())  # see the module docstring
            self.position = records[-1]["offset"] + 1 if records else 0
            return len(records)
        if self.path in ("native", "secure"):
            url = f"{self.url}/native/v1/topics/native/partitions/{self.partition}/batches"
            params = {"offset": str(self.position), "max_bytes": str(FETCH_BYTES)}
        else:
            url = f"{self.url}/range/{self.partition}"
            params = {"offset": str(self.position), "length": str(len(self.batch))}
        async with session.get(url, params=params) as response:
            data = await response.read()
        if not data:
            self.position = 0
            return 0
        count, next_offset = 0, self.position
        for _, header in iter_batches(data, verify=False):
            count += header.records_count
            next_offset = header.next_offset
        self.position = self.position + len(data) if self.path.startswith("ceiling") else next_offset
        return count


async def _alternate(
    session: aiohttp.ClientSession, works: dict[str, Workload], count: int
) -> dict[str, dict[str, list[float]]]:
    """One request at a time, cycling through the paths, so that drifting background load hits every
    path alike: ``count`` produces per path, then ``count`` fetches. Seconds per record of each request
    that moved records, by op and path."""
    out: dict[str, dict[str, list[float]]] = {"produce": {}, "fetch": {}}
    for op in ("produce", "fetch"):
        for _ in range(count):
            for path, work in works.items():
                start = time.perf_counter()
                records = await (work.produce(session) if op == "produce" else work.fetch(session))
                if records:
                    out[op].setdefault(path, []).append((time.perf_counter() - start) / records)
    return out


def _secure_session(cafile: str) -> aiohttp.ClientSession:
    """A session that verifies the secure broker's certificate and sends the benchmark user's password."""
    context = ssl.create_default_context(cafile=cafile)
    auth = base64.b64encode(f"{SECURE_USER}:{SECURE_PASSWORD}".encode()).decode()
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context), headers={"Authorization": f"Basic {auth}"}
    )


async def run_client(ceiling_url: str, broker_url: str, partition: int, secure: str = "") -> None:
    """Child-process entry: run the phases the driver writes on stdin (one JSON line each), answering
    each with its Result as one JSON line on stdout, until stdin closes. ``secure`` is
    ``<secure broker url>,<TLS ceiling url>,<ca file>``, or empty."""
    urls = {"ceiling": ceiling_url, "native": broker_url, "rest": broker_url}
    secure_url, tls_ceiling_url, cafile = secure.split(",") if secure else ("", "", "")
    if secure_url:
        urls["secure"], urls["ceiling-tls"] = secure_url, tls_ceiling_url
    works = {path: Workload(path, url, partition) for path, url in urls.items()}
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        sessions = {path: session for path in urls}
        if secure_url:
            sessions["secure"] = await stack.enter_async_context(_secure_session(cafile))
            sessions["ceiling-tls"] = sessions["secure"]
        while line := await asyncio.to_thread(sys.stdin.readline):
            command = json.loads(line)
            if command["op"] == "alternate":
                print(json.dumps(await _alternate(session, works, command["count"])), flush=True)
                continue
            work = works[command["path"]]
            call = work.produce if command["op"] == "produce" else work.fetch
            path_session = sessions[command["path"]]

            async def op(
                call: Callable[[aiohttp.ClientSession], Awaitable[int]] = call,
                session: aiohttp.ClientSession = path_session,
            ) -> int:
                return await call(session)

            if command.get("rate"):
                result = await open_loop(command["seconds"], command["rate"], op)
            else:
                result = await closed_loop(command["seconds"], op)
            print(json.dumps(asdict(result)), flush=True)


class Clients:
    """``count`` client processes, one per partition; ``async with`` starts them and awaits their exit."""

    def __init__(self, count: int, ceiling_url: str, broker_url: str, secure: str = "-") -> None:
        self.count, self.ceiling_url, self.broker_url = count, ceiling_url, broker_url
        self.secure = secure
        self._procs: list[asyncio.subprocess.Process] = []

    async def __aenter__(self) -> Clients:
        for partition in range(self.count):
            self._procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "--client",
                    self.ceiling_url,
                    self.broker_url,
                    str(partition),
                    self.secure,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=64 * 1024 * 1024,
                )
            )
        return self

    async def run(self, path: str, op: str, seconds: float, rate: float = 0.0) -> Result:
        """Run one phase on every client at once (``rate`` is the total for open-loop phases)."""
        command = json.dumps({"path": path, "op": op, "seconds": seconds, "rate": rate / self.count})
        for proc in self._procs:
            assert proc.stdin is not None
            proc.stdin.write(command.encode() + b"\n")
        parts = []
        for proc in self._procs:
            assert proc.stdout is not None
            line = await proc.stdout.readline()
            if not line:
                raise RuntimeError("a client process died")
            parts.append(Result(**json.loads(line)))
        return Result.merge(parts)

    async def alternate(self, count: int) -> dict[str, dict[str, list[float]]]:
        """Run :func:`_alternate` on the first client only."""
        proc = self._procs[0]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"op": "alternate", "count": count}).encode() + b"\n")
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("a client process died")
        answer: dict[str, dict[str, list[float]]] = json.loads(line)
        return answer

    async def __aexit__(self, *exc: object) -> None:
        for proc in self._procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self._procs:
            await proc.wait()


@dataclass
class PathFigures:
    """Every round's phases for one path; the table shows medians."""

    produce: list[Result] = field(default_factory=list)
    fetch: list[Result] = field(default_factory=list)
    latency: list[Result] = field(default_factory=list)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def measure(
    clients: int, seconds: float, rounds: int, data_root: Path, secure: bool = False
) -> dict[str, PathFigures]:
    """Per round and path: peak produce, fetch, then produce at half of that round's peak rate (open
    loop) for latency. Rounds interleave the paths, each round starting with a different one, so that
    background load drifts hit every path alike; dirty pages are flushed before each produce phase so
    that no path pays for writing back another's data. ``secure`` adds the TLS + Basic broker's native
    path ("secure")."""
    paths: tuple[str, ...] = ("ceiling", "native", "rest")
    if secure:
        paths += ("secure", "ceiling-tls")
    figures = {path: PathFigures() for path in paths}
    with tempfile.TemporaryDirectory(dir=data_root) as data_dir:
        root = Path(data_dir)
        (root / "ceiling").mkdir()
        (root / "broker").mkdir()
        (root / "secure").mkdir()
        cafile = _make_certificates(root / "certs") if secure else None
        async with contextlib.AsyncExitStack() as stack:
            ceiling = await stack.enter_async_context(Server("baseline", root / "ceiling", clients))
            broker = await stack.enter_async_context(Server("broker", root / "broker", clients))
            servers = {"ceiling": ceiling, "native": broker, "rest": broker}
            secure_arg = "-"
            if cafile is not None:
                (root / "ceiling-tls").mkdir()
                for path, kind in (("secure", "secure"), ("ceiling-tls", "baseline-tls")):
                    servers[path] = await stack.enter_async_context(Server(kind, root / path, clients))
                secure_arg = f"{servers['secure'].url},{servers['ceiling-tls'].url},{cafile}"
            pool = await stack.enter_async_context(Clients(clients, ceiling.url, broker.url, secure_arg))

            async def run(path: str, op: str) -> Result:
                before = servers[path].cpu_seconds()
                result = await pool.run(path, op, seconds)
                result.server_cpu = servers[path].cpu_seconds() - before
                return result

            for round_ in range(rounds):
                turn = round_ % len(paths)
                for path in paths[turn:] + paths[:turn]:
                    f = figures[path]
                    await asyncio.to_thread(os.sync)
                    f.produce.append(await run(path, "produce"))
                    f.fetch.append(await run(path, "fetch"))
                    await asyncio.to_thread(os.sync)
                    rate = max(f.produce[-1].ops_per_s / 2, 1.0)
                    f.latency.append(await pool.run(path, "produce", seconds, rate=rate))
                print(f"round {round_ + 1} of {rounds} done", file=sys.stderr, flush=True)
    return figures


async def measure_alternating(count: int, data_root: Path) -> tuple[list[str], Ratios]:
    """Markdown rows: median time per 1 MiB request for one client, requests alternating between paths;
    and each path's ratios (ceiling time / path time) by (path, op)."""
    with tempfile.TemporaryDirectory(dir=data_root) as data_dir:
        root = Path(data_dir)
        (root / "ceiling").mkdir()
        (root / "broker").mkdir()
        async with (
            Server("baseline", root / "ceiling", 1) as ceiling,
            Server("broker", root / "broker", 1) as broker,
            Clients(1, ceiling.url, broker.url) as pool,
        ):
            times = await pool.alternate(count)
    records_per_mib = 2**20 // RECORD_BYTES
    lines = [
        "| path | produce ms per MiB | ceiling / path | fetch ms per MiB | ceiling / path |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    medians = {
        op: {path: _median(values) * 1000 * records_per_mib for path, values in paths.items()}
        for op, paths in times.items()
    }
    ratios = {
        (path, op): medians[op]["ceiling"] / medians[op][path] for op in medians for path in medians[op]
    }
    for path in ("ceiling", "native", "rest"):
        produce, fetch = medians["produce"][path], medians["fetch"][path]
        lines.append(
            f"| {path} | {produce:.2f} | {ratios[path, 'produce']:.2f} "
            f"| {fetch:.2f} | {ratios[path, 'fetch']:.2f} |"
        )
    return lines, ratios


def ratios(figures: dict[str, PathFigures]) -> Ratios:
    """Each path's median produce and fetch MiB/s over the ceiling's, by (path, op)."""
    ceiling = figures["ceiling"]
    out: Ratios = {}
    for name, f in figures.items():
        out[name, "produce"] = _median([r.mib_per_s for r in f.produce]) / _median(
            [r.mib_per_s for r in ceiling.produce]
        )
        out[name, "fetch"] = _median([r.mib_per_s for r in f.fetch]) / _median(
            [r.mib_per_s for r in ceiling.fetch]
        )
    return out


def plot(panels: dict[str, Ratios], path: Path, note: str) -> None:
    """One group of bars per table (alternating requests, then each client count): native and REST v2
    produce and fetch as ratios to the ceiling, a line at 1.0 (the ceiling) and a dashed line over each
    bar whose goal the docs state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [("native", "produce"), ("native", "fetch"), ("rest", "produce"), ("rest", "fetch")]
    colours = ["tab:blue", "tab:cyan", "tab:orange", "tab:olive"]
    if any(("secure", "produce") in panel for panel in panels.values()):
        bars += [
            ("secure", "produce"),
            ("secure", "fetch"),
            ("ceiling-tls", "produce"),
            ("ceiling-tls", "fetch"),
        ]
        colours += ["tab:purple", "tab:pink", "tab:gray", "tab:brown"]
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, (bar, colour) in enumerate(zip(bars, colours, strict=True)):
        xs = [k + (i - (len(bars) - 1) / 2) * width for k in range(len(panels))]
        heights = [panel.get(bar, float("nan")) for panel in panels.values()]
        drawn = ax.bar(xs, heights, width, color=colour, label=f"{bar[0]} {bar[1]}")
        ax.bar_label(drawn, fmt="%.2f", fontsize=8)
        if bar in GOALS:
            starts, ends = [x - width / 2 for x in xs], [x + width / 2 for x in xs]
            label = f"goal: {bar[0]} {bar[1]} {GOALS[bar]}x"
            ax.hlines([GOALS[bar]] * len(xs), starts, ends, colors="tab:red", linestyles="--", label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8, label="ceiling (1.0)")
    ax.set_xticks(range(len(panels)), list(panels))
    ax.set_ylabel("MiB/s ratio to the minimal aiohttp ceiling")
    ax.legend(fontsize=8)
    ax.set_title(f"HTTP data path vs a minimal aiohttp server\n{note}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def table(figures: dict[str, PathFigures]) -> list[str]:
    """Markdown table rows of round medians; ratios are to the ceiling's medians."""

    def mib(results: list[Result]) -> float:
        return _median([r.mib_per_s for r in results])

    ceiling = figures["ceiling"]

    def cpu(results: list[Result]) -> float:
        return _median([r.cpu_ms_per_mib for r in results])

    lines = [
        "| path | produce MiB/s | records/s | vs ceiling | server CPU ms/MiB | fetch MiB/s | vs ceiling "
        "| server CPU ms/MiB | p50 ms @50% | p99 ms @50% |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in figures.items():
        records = _median([r.records / r.seconds for r in f.produce])
        p50 = _median([r.percentile(0.5) for r in f.latency])
        p99 = _median([r.percentile(0.99) for r in f.latency])
        lines.append(
            f"| {name} | {mib(f.produce):.0f} | {records:,.0f} | {mib(f.produce) / mib(ceiling.produce):.2f} "
            f"| {cpu(f.produce):.2f} | {mib(f.fetch):.0f} | {mib(f.fetch) / mib(ceiling.fetch):.2f} "
            f"| {cpu(f.fetch):.2f} | {p50:.1f} | {p99:.1f} |"
        )
    return lines


def secure_table(figures: dict[str, PathFigures]) -> list[str]:
    """What TLS costs: the secure broker's native path over the plain broker's, against the goal, and the
    minimal server over TLS against its plaintext self (TLS's own cost in Python's asyncio, the floor)."""

    def mib(results: list[Result]) -> float:
        return _median([r.mib_per_s for r in results])

    def row(label: str, secured: PathFigures, plain: PathFigures, goal: str) -> str:
        return (
            f"| {label} | {mib(secured.produce) / mib(plain.produce):.2f} "
            f"| {mib(secured.fetch) / mib(plain.fetch):.2f} | {goal} |"
        )

    return [
        "| with TLS vs without, same run (MiB/s) | produce | fetch | goal |",
        "| --- | ---: | ---: | ---: |",
        row("tierlog native: TLS + Basic / plain", figures["secure"], figures["native"], f">= {SECURE_GOAL}"),
        row(
            "minimal aiohttp ceiling: TLS / plain", figures["ceiling-tls"], figures["ceiling"], "(the floor)"
        ),
    ]


def _cpu_pressure() -> str:
    """Linux's 5-minute CPU pressure ("some"), a measure of how contended the machine was."""
    try:
        with open("/proc/pressure/cpu") as pressure:
            fields = dict(item.split("=") for item in pressure.readline().split()[1:])
    except (OSError, ValueError):
        return ""
    return f" (CPU pressure over the last 5 minutes: {fields.get('avg300', '?')}%)"


async def main(args: argparse.Namespace) -> str:
    """Run every phase for each client count, print the tables, and return them as a markdown page."""
    seconds = 1.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    counts = [int(n) for n in str(args.clients).split(",")]
    alternating, alternating_ratios = await measure_alternating(
        50 if args.quick else 300, Path(args.data_root)
    )
    panels = {"1 client, alternating\n(time per MiB)": alternating_ratios}
    print("one client, alternating requests\n" + "\n".join(alternating))
    sections: list[str] = [
        "### One client, requests alternating between paths",
        "",
        "Median time per MiB of record values, from each request's time per record. Requests "
        "go one at a time, cycling through the paths, so background load drifts hit them alike. A "
        "produce also pays for the page-cache writeback of the other paths' data, so the produce "
        "column is the noisier one.",
        "",
        *alternating,
        "",
    ]
    for clients in counts:
        figures = await measure(clients, seconds, rounds, Path(args.data_root), args.secure)
        rows = table(figures)
        if args.secure:
            rows += ["", *secure_table(figures)]
        panels[f"{clients} concurrent client{'s' if clients > 1 else ''}"] = ratios(figures)
        print(f"{clients} client(s)\n" + "\n".join(rows))
        sections += [f"### {clients} concurrent client{'s' if clients > 1 else ''}", "", *rows, ""]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    plot(panels, Path(args.plot), f"{stamp}, {os.cpu_count()} CPUs shared with other work{_cpu_pressure()}")
    print(f"plot: {args.plot}")
    header = [
        "# HTTP data-path benchmark",
        "",
        f"`infra/bench/http_bench.py {'--quick ' if args.quick else ''}--clients {args.clients}`: "
        f"{seconds:g} s per phase, medians of {rounds} interleaved rounds, "
        f"{stamp}, Python {platform.python_version()}, {os.cpu_count()} CPUs shared with other work"
        f"{_cpu_pressure()}.",
        "",
        f"Native: {NATIVE_RECORDS} records of {RECORD_BYTES} B per batch (about 1 MiB), one batch per "
        f"request, each client on its own partition. REST: {REST_RECORDS} base64 records per produce "
        "request (binary embedded format) and `max_bytes` 1 MiB per records fetch, its answer parsed "
        "with msgspec (the client's parse is not the server's work). Ceiling: a minimal "
        "aiohttp server that appends the body to a file and serves byte ranges with sendfile. MiB/s "
        "count record values delivered; server CPU is the server process's user + system time per MiB "
        "(the steadiest figure when other work competes for the CPUs); latency is measured from the "
        "scheduled send time, sending at half the request rate the same round's peak phase reached.",
        "",
    ]
    return "\n".join([*header, *sections])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one round of 1 s phases: a smoke run")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per phase (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are kept")
    parser.add_argument(
        "--clients", default="4", help="concurrent clients, one partition each; a comma list runs several"
    )
    parser.add_argument("--output", help="write the markdown table to this file")
    parser.add_argument(
        "--plot", default="docs/benchmarks-http.png", help="where to save the ratio plot (PNG)"
    )
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="where the servers keep data")
    parser.add_argument(
        "--secure", action="store_true", help="also measure the native path with TLS and Basic authentication"
    )
    parser.add_argument(
        "--serve", choices=("broker", "baseline", "baseline-tls", "secure"), help=argparse.SUPPRESS
    )
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    if arguments.serve:
        run_server(arguments.serve, Path(arguments.data_dir), int(arguments.clients))
    elif arguments.client:
        ceiling_url, broker_url, partition, secure = arguments.client
        asyncio.run(run_client(ceiling_url, broker_url, int(partition), "" if secure == "-" else secure))
    else:
        page = asyncio.run(main(arguments))
        if arguments.output:
            Path(arguments.output).write_text(page)
