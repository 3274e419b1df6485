"""The cost of replication and the time a leader failover takes, on a 3-broker cluster on etcd.

Starts, as child processes on 127.0.0.1, one etcd and three ``tierlog serve --metadata-uri etcd://...``
brokers, and measures:

* **produce** to one partition through its leader, over the native batch path, for three setups that run
  in the same cluster at the same time, alternating phase by phase so that a burst of load from other
  processes on this machine falls on every setup alike:

  * RF=1, ``acks=1`` (the baseline: the leader alone, what a single broker does);
  * RF=3, ``acks=1`` (two followers fetch every batch; the producer does not wait for them);
  * RF=3, ``acks=all`` with ``min.insync.replicas=2`` (the answer waits until every ISR member has it).

  Two phases per setup: **under load** (``--clients`` requests in flight, 256 records of 1 KiB each, for
  throughput in MB/s and records/s, and the latency of those requests) and **one at a time** (a single
  request of 16 records in flight, p50/p99 latency), and the CPU time the three brokers used per MB
  produced (from ``/proc``). Everything is reported as a ratio to RF=1 ``acks=1``.
* **failover**: on a 3-partition RF=3 topic with ``min.insync.replicas=2``, ``kill -9`` of the broker
  leading a partition, then the time until the metadata shows a new leader and until the first
  ``acks=all`` produce to it succeeds, as a client would see it (poll the metadata, produce to the leader,
  retry on any error every 10 ms). Two kinds: a leader that is not the controller, and a leader that is
  also the controller (a controller election comes first). The broker is then restarted on the same data
  directory, and the next repetition waits until it is back in every ISR and leads its preferred
  partitions again. Both depend on ``broker.session.timeout.ms`` (``--session-timeout-ms``), which the
  output states.

Prints Markdown tables and saves a plot:

    .venv/bin/python infra/bench/replication_bench.py [--quick] [--plot docs/benchmarks-replication.png]
        [--rounds 5] [--seconds 4] [--clients 4] [--repetitions 5] [--session-timeout-ms 6000]
        [--broker-flag=--replica-fetch-backoff-ms=200 ...]

``--quick`` (one 1 s round, one failover) is a smoke run of about half a minute.

Not a test: it never fails on a timing. It stops with an error only when the cluster does not replicate
(an RF=3 partition's ISR never reaches three members) or a produce is refused outside a failover.
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_DEADLINE_S = 120.0  # readiness bounds on child processes and on the cluster; never a measured figure
RECORD_BYTES = 1024
LOAD_RECORDS = 256
ONE_RECORDS = 16
BATCHES = "application/vnd.tierlog.batches"
PROBE_INTERVAL_S = 0.01
REPLICA_FETCH_ROUTE = 'route="/native/v1/replication/topics/{topic}/partitions/{partition}/batches"'
BASELINE = "RF=1, acks=1"
SETUPS = (  # name, topic, acks
    (BASELINE, "rf1", "1"),
    ("RF=3, acks=1", "rf3", "1"),
    ("RF=3, acks=all, min.insync.replicas=2", "rf3", "all"),
)
FAILOVER_TOPIC = "failover"
FAILOVER_PARTITIONS = 3
LEADER_ONLY = "leader (not the controller)"
LEADER_CONTROLLER = "leader that is also the controller"


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
    with open(log, "ab") as out:  # noqa: ASYNC230 - a benchmark's own log file, opened once per child
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env
        )
    return Child(name, proc, log)


async def wait_ready(session: aiohttp.ClientSession, url: str, child: Child) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if child.proc.returncode is not None:
            raise RuntimeError(f"{child.name} exited {child.proc.returncode}:\n{child.log.read_text()}")
        with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
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


class Cluster:
    """etcd and three brokers with fixed ports and data directories, so a killed broker restarts as itself."""

    def __init__(
        self, work: Path, session: aiohttp.ClientSession, session_ms: int, extra: list[str] | None = None
    ) -> None:
        self.work, self.session, self.session_ms = work, session, session_ms
        self.extra = list(extra or [])
        self.ports = {broker_id: free_port() for broker_id in (1, 2, 3)}
        self.urls = {broker_id: f"http://127.0.0.1:{port}" for broker_id, port in self.ports.items()}
        self.children: dict[int, Child] = {}
        self.etcd: Child | None = None
        self.endpoint = ""

    async def start(self) -> None:
        self.etcd, self.endpoint = await start_etcd(self.work, self.session)
        for broker_id in self.ports:
            await self.start_broker(broker_id)

    async def start_broker(self, broker_id: int) -> None:
        port, url = self.ports[broker_id], self.urls[broker_id]
        argv = [
            sys.executable, "-m", "tierlog", "serve", "--port", str(port), "--advertised-url", url,
            "--data-dir", str(self.work / f"broker-{broker_id}"), "--logging-level", "WARNING",
            "--metadata-uri", f"etcd://{self.endpoint}/bench", "--broker-id", str(broker_id),
            "--broker-session-timeout-ms", str(self.session_ms),
            "--broker-heartbeat-interval-ms", str(self.session_ms // 3),
            "--leader-imbalance-check-interval-seconds", "2", *self.extra,
        ]  # fmt: skip
        child = await spawn(f"broker-{broker_id}", argv, self.work / f"broker-{broker_id}.log")
        self.children[broker_id] = child
        await wait_ready(self.session, url + "/ready", child)

    def cpu_seconds(self) -> float:
        """User + system CPU time the live brokers have used (Linux procfs; 0 elsewhere)."""
        total = 0.0
        for broker_id in self.live():
            try:
                with open(f"/proc/{self.children[broker_id].proc.pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    async def replica_fetches(self) -> int:
        """Replica fetches the live brokers answered with data or an empty long poll (200), from their
        ``tierlog_http_requests_total``; brokers that do not answer count 0."""
        total = 0
        for broker_id in self.live():
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self.session.get(self.urls[broker_id] + "/metrics") as answer:
                    text = await answer.text()
                for line in text.splitlines():
                    if (
                        line.startswith("tierlog_http_requests_total{")
                        and REPLICA_FETCH_ROUTE in line
                        and 'status="200"' in line
                    ):
                        total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def live(self) -> list[int]:
        return [b for b, child in self.children.items() if child.proc.returncode is None]

    async def close(self) -> None:
        for child in self.children.values():
            await child.stop()
        if self.etcd is not None:
            await self.etcd.stop()


# ---- cluster requests ----------------------------------------------------------------------------------


async def metadata(cluster: Cluster, topic: str, skip: int | None = None) -> dict[str, Any] | None:
    """The native metadata for ``topic`` from the first live broker (other than ``skip``) that answers."""
    timeout = aiohttp.ClientTimeout(total=2)
    for broker_id in cluster.live():
        if broker_id == skip:
            continue
        with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
            url = f"{cluster.urls[broker_id]}/native/v1/metadata?topic={topic}"
            async with cluster.session.get(url, timeout=timeout) as answer:
                if answer.status == 200:
                    doc: dict[str, Any] = await answer.json()
                    return doc
    return None


def partitions_of(doc: dict[str, Any], topic: str) -> list[dict[str, Any]]:
    for entry in doc.get("topics", []):
        if entry["topic"] == topic:
            return list(entry.get("partitions", []))
    return []


async def create_topic(
    cluster: Cluster, topic: str, partitions: int, rf: int, configs: dict[str, str]
) -> None:
    base = cluster.urls[1]
    async with cluster.session.get(base + "/v3/clusters") as answer:
        cid = (await answer.json())["data"][0]["cluster_id"]
    body = {
        "topic_name": topic,
        "partitions_count": partitions,
        "replication_factor": rf,
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }
    async with cluster.session.post(f"{base}/v3/clusters/{cid}/topics", json=body) as answer:
        if answer.status != 201:
            raise RuntimeError(f"create {topic}: {answer.status} {await answer.text()}")


async def wait_settled(cluster: Cluster, topic: str, *, preferred: bool) -> dict[str, Any]:
    """Wait until every partition of ``topic`` has a leader and a full ISR (and, with ``preferred``, is led
    by its first replica); answer the metadata. Raises RuntimeError after START_DEADLINE_S: replication is
    not working (the ISR of an RF=3 partition never grew), which the benchmark cannot measure."""
    deadline = time.monotonic() + START_DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        doc = await metadata(cluster, topic)
        if doc is not None:
            parts = partitions_of(doc, topic)
            last = parts
            if parts and all(
                p["leader"] >= 0
                and sorted(p["isr"]) == sorted(p["replicas"])
                and (not preferred or p["leader"] == p["replicas"][0])
                for p in parts
            ):
                return doc
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{topic}: leaders and full ISRs not seen within {START_DEADLINE_S} s: {last}")


def batch(records: int) -> bytes:
    return build_batch([Record(b"key-%d" % i, bytes([i % 251]) * RECORD_BYTES) for i in range(records)])


async def produce(
    session: aiohttp.ClientSession, url: str, topic: str, partition: int, acks: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    path = f"{url}/native/v1/topics/{topic}/partitions/{partition}/batches?acks={acks}"
    async with session.post(path, data=body, headers={"Content-Type": BATCHES}) as answer:
        doc: dict[str, Any] = await answer.json(content_type=None)
        return answer.status, doc


# ---- produce phases ------------------------------------------------------------------------------------


@dataclass
class Phase:
    """Requests, records and seconds of one phase, and each request's latency (s)."""

    requests: int = 0
    records: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    broker_cpu: float = 0.0  # CPU seconds all three brokers used during the phase
    replica_fetches: int = 0  # replica fetches the brokers answered during the phase


def _mb_per_s(phase: Phase) -> float:
    return phase.records * RECORD_BYTES / 1e6 / phase.seconds


def _cpu_ms_per_mb(phase: Phase) -> float:
    return phase.broker_cpu * 1000 / (phase.records * RECORD_BYTES / 1e6)


@dataclass
class Figures:
    """Every round's phases of one setup; the table shows medians over rounds and pooled percentiles."""

    name: str
    load: list[Phase] = field(default_factory=list)
    one: list[Phase] = field(default_factory=list)

    def mb_per_s(self) -> float:
        return statistics.median(_mb_per_s(p) for p in self.load)

    def mb_ratio(self, base: Figures) -> float:
        """Median over rounds of this setup's MB/s over the baseline's in the same round."""
        return statistics.median(
            _mb_per_s(a) / _mb_per_s(b) for a, b in zip(self.load, base.load, strict=True)
        )

    def cpu_ratio(self, base: Figures) -> float:
        """Median over rounds of this setup's CPU per MB over the baseline's in the same round."""
        pairs = zip(self.load, base.load, strict=True)
        return statistics.median(_cpu_ms_per_mb(a) / _cpu_ms_per_mb(b) for a, b in pairs)

    def cpu_ms_per_mb(self) -> float:
        """The three brokers' CPU milliseconds per MB produced (median over the load phases)."""
        return statistics.median(_cpu_ms_per_mb(p) for p in self.load)

    def fetches_per_s(self) -> float:
        """Replica fetches all brokers answered per second (median over the load phases), idle long polls
        of every replicated partition included."""
        return statistics.median(p.replica_fetches / p.seconds for p in self.load)

    def kb_per_fetch(self, base: Figures) -> float:
        """KB the two followers copied per replica fetch of this setup's partition: twice the bytes
        produced over the fetches beyond those the baseline phase of the same round saw (the idle long
        polls of the other partitions); median over rounds, NaN when there were none beyond."""
        values = []
        for a, b in zip(self.load, base.load, strict=True):
            extra = a.replica_fetches - b.replica_fetches * a.seconds / b.seconds
            values.append(2 * a.records * RECORD_BYTES / 1e3 / extra if extra > 0 else float("nan"))
        return statistics.median(values)

    def records_per_s(self) -> float:
        return statistics.median(p.records / p.seconds for p in self.load)

    def latency_ms(self, kind: str, q: float) -> float:
        phases: list[Phase] = self.load if kind == "load" else self.one
        samples = sorted(s for phase in phases for s in phase.latencies)
        return samples[min(len(samples) - 1, int(len(samples) * q))] * 1000


async def closed_loop(
    cluster: Cluster, url: str, topic: str, acks: str, body: bytes, records: int, seconds: float,
    in_flight: int,
) -> Phase:  # fmt: skip
    """``in_flight`` producers send ``body`` back to back to partition 0 for ``seconds``. Raises
    RuntimeError on any refused produce (no failover happens during these phases)."""
    session = cluster.session
    phase = Phase()
    fetches_before = await cluster.replica_fetches()
    cpu_before = cluster.cpu_seconds()
    start = time.perf_counter()
    deadline = start + seconds

    async def producer() -> None:
        while (now := time.perf_counter()) < deadline:
            status, doc = await produce(session, url, topic, 0, acks, body)
            if status != 200:
                raise RuntimeError(f"produce {topic} acks={acks}: {status} {doc}")
            phase.latencies.append(time.perf_counter() - now)
            phase.requests += 1
            phase.records += records

    async with asyncio.TaskGroup() as group:
        for _ in range(in_flight):
            group.create_task(producer())
    phase.seconds = time.perf_counter() - start
    phase.broker_cpu = cluster.cpu_seconds() - cpu_before
    phase.replica_fetches = await cluster.replica_fetches() - fetches_before
    return phase


async def measure_produce(cluster: Cluster, args: argparse.Namespace) -> list[Figures]:
    leaders = {topic: partitions_of(await metadata(cluster, topic) or {}, topic)[0]["leader"]
               for topic in ("rf1", "rf3")}  # fmt: skip
    urls = {topic: cluster.urls[leader] for topic, leader in leaders.items()}
    print(f"leaders: rf1 on broker {leaders['rf1']}, rf3 on broker {leaders['rf3']}", file=sys.stderr)
    load_body, one_body = batch(LOAD_RECORDS), batch(ONE_RECORDS)
    figures = [Figures(name) for name, _, _ in SETUPS]
    rounds, seconds = (1, 1.0) if args.quick else (args.rounds, args.seconds)
    for _name, topic, acks in SETUPS:  # warm up every path once
        await closed_loop(cluster, urls[topic], topic, acks, one_body, ONE_RECORDS, 0.5, 1)
    for n in range(rounds):
        for (name, topic, acks), figs in zip(SETUPS, figures, strict=True):
            load = await closed_loop(cluster, urls[topic], topic, acks, load_body, LOAD_RECORDS,
                                     seconds, args.clients)  # fmt: skip
            figs.load.append(load)
            one = await closed_loop(cluster, urls[topic], topic, acks, one_body, ONE_RECORDS,
                                    seconds / 2, 1)  # fmt: skip
            figs.one.append(one)
            print(f"round {n + 1}: {name}: {load.records * RECORD_BYTES / 1e6 / load.seconds:.1f} MB/s, "
                  f"one at a time p50 {statistics.median(one.latencies) * 1000:.2f} ms",
                  file=sys.stderr, flush=True)  # fmt: skip
    return figures


def replica_bytes(cluster: Cluster, topic: str) -> dict[int, int]:
    """Bytes of segment files each broker holds for ``topic`` partition 0 (0 when it has none)."""
    sizes: dict[int, int] = {}
    for broker_id in cluster.ports:
        folder = cluster.work / f"broker-{broker_id}" / f"{topic}-0"
        sizes[broker_id] = sum(f.stat().st_size for f in folder.glob("*.log")) if folder.is_dir() else 0
    return sizes


async def check_replicated(cluster: Cluster, topic: str) -> dict[int, int]:
    """Wait (bounded) until every broker holds as many segment bytes of ``topic``-0 as the largest copy
    (the followers caught up), and answer each broker's bytes. Prints a warning, and answers the last
    sizes, when they do not converge: then the RF=3 figures are not those of a replicated partition."""
    deadline = time.monotonic() + 30
    while True:
        sizes = await asyncio.to_thread(replica_bytes, cluster, topic)
        if len(set(sizes.values())) == 1 and max(sizes.values()) > 0:
            return sizes
        if time.monotonic() > deadline:
            print(f"WARNING: {topic}-0 copies differ after 30 s: {sizes} bytes by broker; the RF=3 figures "
                  "do not measure replication", file=sys.stderr, flush=True)  # fmt: skip
            return sizes
        await asyncio.sleep(0.2)


# ---- failover ------------------------------------------------------------------------------------------


@dataclass
class Failover:
    kind: str
    victim: int
    elected_s: float | None  # kill -9 -> a live broker's metadata names another leader
    produced_s: float | None  # kill -9 -> the first acks=all produce on that leader succeeds
    errors: Counter[str] = field(default_factory=Counter)  # what the retries saw before that

    def elapsed(self, which: str) -> str:
        """``elected`` or ``produced`` as text: milliseconds, or "never"."""
        value: float | None = getattr(self, f"{which}_s")
        return "never" if value is None else f"{value * 1000:,.0f} ms"


async def failover_once(cluster: Cluster, kind: str) -> Failover | None:
    """Kill -9 the broker leading a partition of FAILOVER_TOPIC (the controller or not, by ``kind``) and
    time a client's way to its first acknowledged produce on the new leader. None when no partition has
    a leader of that kind now. Gives up (None times) after four session timeouts plus a minute."""
    doc = await wait_settled(cluster, FAILOVER_TOPIC, preferred=False)
    controller = doc["controller_id"]
    parts = partitions_of(doc, FAILOVER_TOPIC)
    want_controller = kind == LEADER_CONTROLLER
    chosen = next((p for p in parts if (p["leader"] == controller) == want_controller), None)
    if chosen is None:
        return None
    victim, index = int(chosen["leader"]), int(chosen["partition"])
    body = batch(ONE_RECORDS)
    ready_by = time.monotonic() + START_DEADLINE_S
    while True:  # the metadata may name the leader a moment before that broker has taken the role
        status, answer = await produce(
            cluster.session, cluster.urls[victim], FAILOVER_TOPIC, index, "all", body
        )
        if status == 200:
            break
        if status != 503 or time.monotonic() > ready_by:
            raise RuntimeError(f"produce before the kill: {status} {answer}")
        await asyncio.sleep(0.1)
    result = Failover(kind, victim, None, None)
    timeout = aiohttp.ClientTimeout(total=5)
    started = time.perf_counter()
    cluster.children[victim].proc.kill()
    deadline = time.monotonic() + 4 * cluster.session_ms / 1000 + 60
    while result.produced_s is None and time.monotonic() < deadline:
        doc2 = await metadata(cluster, FAILOVER_TOPIC, skip=victim)
        part = next((p for p in partitions_of(doc2 or {}, FAILOVER_TOPIC) if p["partition"] == index), None)
        leader = -1 if part is None else int(part["leader"])
        if leader in (-1, victim):
            result.errors["metadata: no new leader yet"] += 1
            await asyncio.sleep(PROBE_INTERVAL_S)
            continue
        if result.elected_s is None:
            result.elected_s = time.perf_counter() - started
        try:
            path = f"{cluster.urls[leader]}/native/v1/topics/{FAILOVER_TOPIC}/partitions/{index}/batches"
            async with cluster.session.post(
                path, params={"acks": "all"}, data=body, headers={"Content-Type": BATCHES}, timeout=timeout
            ) as response:
                answer = await response.json(content_type=None)
                if response.status == 200:
                    result.produced_s = time.perf_counter() - started
                    break
                result.errors[f"produce: {response.status} {answer.get('error_code')}"] += 1
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            result.errors[f"produce: {type(err).__name__}"] += 1
        await asyncio.sleep(PROBE_INTERVAL_S)
    await cluster.children[victim].proc.wait()
    return result


async def measure_failover(cluster: Cluster, args: argparse.Namespace) -> list[Failover]:
    plan = (
        [LEADER_ONLY]
        if args.quick
        else [LEADER_ONLY] * args.repetitions + [LEADER_CONTROLLER] * max(1, args.repetitions // 2)
    )
    results: list[Failover] = []
    for n, kind in enumerate(plan):
        try:
            got = await failover_once(cluster, kind)
        except RuntimeError as err:  # report what was measured so far rather than nothing
            print(f"failover {n + 1}: stopped: {err}", file=sys.stderr, flush=True)
            break
        if got is None:
            print(f"failover {n + 1}: no partition led by a {kind}; skipped", file=sys.stderr, flush=True)
            continue
        results.append(got)
        print(f"failover {n + 1} ({kind}, broker {got.victim}): new leader in {got.elapsed('elected')}, "
              f"first acks=all produce in {got.elapsed('produced')}; retries saw {dict(got.errors)}",
              file=sys.stderr, flush=True)  # fmt: skip
        if n + 1 < len(plan):
            await cluster.start_broker(got.victim)
            with contextlib.suppress(RuntimeError):  # a layout not rebalanced yet only changes the next pick
                await wait_settled(cluster, FAILOVER_TOPIC, preferred=True)
    return results


# ---- report --------------------------------------------------------------------------------------------


def throughput_table(figures: list[Figures], in_flight: int) -> str:
    base = figures[0]
    lines = [
        f"| setup | MB/s ({in_flight} in flight) | records/s | vs {BASELINE} "
        "| brokers' CPU ms per MB produced | vs baseline | replica fetches/s | KB copied per fetch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for figs in figures:
        per_fetch = "-" if figs is base else f"{figs.kb_per_fetch(base):,.0f}"
        lines.append(
            f"| {figs.name} | {figs.mb_per_s():,.1f} | {figs.records_per_s():,.0f} "
            f"| {figs.mb_ratio(base):.2f}x | {figs.cpu_ms_per_mb():.1f} | {figs.cpu_ratio(base):.2f}x "
            f"| {figs.fetches_per_s():,.0f} | {per_fetch} |"
        )
    return "\n".join(lines)


def latency_table(figures: list[Figures], in_flight: int) -> str:
    base = figures[0]
    lines = [
        f"| setup | p50 / p99, {in_flight} in flight (ms) | vs baseline (p50 / p99) "
        "| p50 / p99, one at a time (ms) | vs baseline (p50 / p99) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for figs in figures:
        cells = []
        for kind in ("load", "one"):
            p50, p99 = figs.latency_ms(kind, 0.5), figs.latency_ms(kind, 0.99)
            b50, b99 = base.latency_ms(kind, 0.5), base.latency_ms(kind, 0.99)
            cells.append(f"{p50:.2f} / {p99:.2f} | {p50 / b50:.2f}x / {p99 / b99:.2f}x")
        lines.append(f"| {figs.name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def failover_table(results: list[Failover], session_ms: int) -> str:
    lines = [
        f"| broker killed (broker.session.timeout.ms={session_ms}) | runs | new leader in metadata: "
        "median / max (ms) | first acks=all produce: median / max (ms) | vs session timeout (median) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind in (LEADER_ONLY, LEADER_CONTROLLER):
        runs = [r for r in results if r.kind == kind]
        if not runs:
            continue
        cells = []
        for which in ("elected_s", "produced_s"):
            values = [getattr(r, which) for r in runs]
            done = [v * 1000 for v in values if v is not None]
            missing = len(values) - len(done)
            text = f"{statistics.median(done):,.0f} / {max(done):,.0f}" if done else "-"
            cells.append(text + (f" ({missing} never)" if missing else ""))
        produced = [r.produced_s * 1000 for r in runs if r.produced_s is not None]
        ratio = f"{statistics.median(produced) / session_ms:.2f}x" if produced else "-"
        lines.append(f"| {kind} | {len(runs)} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


def plot(figures: list[Figures], failovers: list[Failover], session_ms: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.8))
    base = figures[0]
    names = [f.name.replace(", min.insync", ",\nmin.insync") for f in figures]
    xs = list(range(len(figures)))
    width = 0.38
    left.bar([x - width / 2 for x in xs], [f.mb_ratio(base) for f in figures], width, color="tab:blue",
             label="produce MB/s")  # fmt: skip
    left.bar([x + width / 2 for x in xs], [f.cpu_ratio(base) for f in figures], width, color="tab:grey",
             label="brokers' CPU per MB")  # fmt: skip
    left.axhline(1.0, color="black", linestyle="--", linewidth=1)
    left.set_xticks(xs, names, fontsize=8)
    left.set_ylabel(f"ratio to {BASELINE} (median of per-round ratios)")
    left.set_title("throughput and CPU cost")
    left.legend(fontsize=8)
    for offset, kind, colour, label in ((-width / 2, "load", "tab:orange", "under load"),
                                        (width / 2, "one", "tab:green", "one at a time")):  # fmt: skip
        middle.bar([x + offset for x in xs], [f.latency_ms(kind, 0.5) for f in figures], width, color=colour,
                   label=f"{label}: p50")  # fmt: skip
        middle.scatter([x + offset for x in xs], [f.latency_ms(kind, 0.99) for f in figures], color="black",
                       marker="_", s=300, zorder=3)  # fmt: skip
    middle.set_xticks(xs, names, fontsize=8)
    middle.set_yscale("log")
    middle.set_ylabel("produce latency (ms, log): bar p50, dash p99")
    middle.set_title("latency")
    middle.legend(fontsize=8)
    kinds = [k for k in (LEADER_ONLY, LEADER_CONTROLLER) if any(r.kind == k for r in failovers)]
    for x, kind in enumerate(kinds):
        runs = [r for r in failovers if r.kind == kind]
        elected = [r.elected_s * 1000 for r in runs if r.elected_s is not None]
        produced = [r.produced_s * 1000 for r in runs if r.produced_s is not None]
        right.scatter([x - 0.1] * len(elected), elected, color="tab:purple", marker="o",
                      label="new leader in metadata" if x == 0 else None)  # fmt: skip
        right.scatter([x + 0.1] * len(produced), produced, color="tab:red", marker="x",
                      label="first acks=all produce" if x == 0 else None)  # fmt: skip
    right.axhline(session_ms, color="grey", linestyle="--", linewidth=1, label="broker.session.timeout.ms")
    labels = [k.replace(" (", "\n(").replace(" that", "\nthat") for k in kinds]
    right.set_xticks(list(range(len(kinds))), labels, fontsize=8)
    right.set_xlim(-0.6, max(1, len(kinds)) - 0.4)
    highest = max([r.produced_s or 0.0 for r in failovers] + [r.elected_s or 0.0 for r in failovers])
    right.set_ylim(0, max(session_ms * 1.25, highest * 1000 * 1.1))
    right.set_ylabel("ms after kill -9 of the leader")
    right.set_title("failover (each repetition)")
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle("Replication on 3 brokers + etcd, one machine")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as session:
            cluster = Cluster(Path(tmp), session, args.session_timeout_ms, args.broker_flag)
            try:
                await cluster.start()
                await create_topic(cluster, "rf1", 1, 1, {})
                await create_topic(cluster, "rf3", 1, 3, {"min.insync.replicas": "2"})
                await create_topic(
                    cluster, FAILOVER_TOPIC, FAILOVER_PARTITIONS, 3, {"min.insync.replicas": "2"}
                )
                for topic in ("rf1", "rf3"):
                    await wait_settled(cluster, topic, preferred=False)
                await wait_settled(cluster, FAILOVER_TOPIC, preferred=True)
                figures = await measure_produce(cluster, args)
                copies = await check_replicated(cluster, "rf3")
                load_average = os.getloadavg()[0]
                failovers = await measure_failover(cluster, args)
            finally:
                await cluster.close()
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{load_average:.1f} after the produce phases, {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print(throughput_table(figures, args.clients))
    print()
    print(latency_table(figures, args.clients))
    print(f"\nsegment bytes of rf3-0 on each broker after the produce phases: {copies}")
    print()
    print(failover_table(failovers, args.session_timeout_ms))
    plot(figures, failovers, args.session_timeout_ms, args.plot)
    print(f"plot: {args.plot}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round, one failover (a smoke run)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="produce rounds (each runs every setup; ratios are medians of per-round ratios)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of each under-load phase")
    parser.add_argument("--clients", type=int, default=4, help="produce requests in flight under load")
    parser.add_argument("--repetitions", type=int, default=5, help="failovers of a non-controller leader")
    parser.add_argument("--session-timeout-ms", type=int, default=6000, help="broker.session.timeout.ms")
    parser.add_argument("--broker-flag", action="append", default=[], metavar="FLAG",
                        help="an extra 'tierlog serve' flag for every broker, as one argument "
                        "(--broker-flag=--replica-fetch-backoff-ms=200); repeatable")  # fmt: skip
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "benchmarks-replication.png")
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
