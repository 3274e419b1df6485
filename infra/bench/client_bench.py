"""Python client benchmark: records/s and MiB/s one client process produces and consumes through tierlog.

For 100 B and 1 KiB records, without compression and with zstd, the asyncio client (the implementation) and
the synchronous ``Producer`` (the same core behind a thread hand-off) produce for ``--seconds`` into a fresh
4-partition topic of one broker child process, then an ``AsyncConsumer`` reads everything back from offset 0.
Values are text with repeated words (about 3:1 under zstd). The broker-side ceiling comes from
``infra/bench/http_bench.py`` in the same run: its native path (prebuilt 1 MiB batches of 1 KiB records, no
client-side batching or decoding) and its minimal aiohttp server, both with one client.

The idempotence rows (design note 0011) run the same async workload (no compression) with
``enable_idempotence=True, acks="all"``, ``enable_idempotence=False, acks="all"`` and
``enable_idempotence=False, acks=1``, interleaved over ``--repetitions`` rounds (each round starts with a
different variant) so that the shared machine's load drifts hit every variant alike; each run gets a fresh
topic, and the page reports medians, the spread, and the ratio idempotent / plain (both ``acks=all``) of
each round.

    .venv/bin/python infra/bench/client_bench.py [--quick] [--seconds 3] [--repetitions 5]
        [--output docs/benchmarks-client.md] [--plot docs/benchmarks-client.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

import http_bench  # noqa: E402

from tierlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, Producer, TopicPartition  # noqa: E402
from tierlog.client.config import ProducerConfig  # noqa: E402

PARTITIONS = 4
DEFAULT_PLOT = "docs/benchmarks-client.png"
WORDS = [
    b"order",
    b"user",
    b"cart",
    b"paid",
    b"shipped",
    b"item",
    b"price",
    b"total",
    b"region",
    b"eu",
    b"42",
]


def values(size: int, count: int = 512, seed: int = 7) -> list[bytes]:
    """``count`` distinct text values of exactly ``size`` bytes."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = b"%d " % i + b" ".join(rng.choice(WORDS) for _ in range(size // 3 + 2))
        out.append(text[:size])
    return out


@dataclass
class Figure:
    records: int
    seconds: float
    size: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.records * self.size / 2**20 / self.seconds if self.seconds else 0.0


PRODUCER_OPTIONS: dict[str, Any] = {
    "linger_ms": 5,
    "batch_size": 512 * 1024,
    "max_request_size": 4 * 2**20,
    "buffer_memory": 64 * 2**20,
}


async def produce_async(
    url: str, topic: str, size: int, codec: str, seconds: float, options: dict[str, Any] | None = None
) -> Figure:
    async with AsyncProducer(url, compression_type=codec, **PRODUCER_OPTIONS, **(options or {})) as producer:
        await producer.partitions_for(topic)
        sent, elapsed = await send_for(producer, topic, values(size), seconds)
    return Figure(sent, elapsed, size)


async def send_for(producer: Any, topic: str, pool: list[bytes], seconds: float) -> tuple[int, float]:
    """Send ``pool``'s values round-robin for ``seconds`` (awaiting each ``send``, which only queues the
    record), then flush: the records sent and the seconds it took. For any producer with asyncio
    ``send(topic, value)`` and ``flush()`` (tierlog's, aiokafka's)."""
    sent = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(1000):
            await producer.send(topic, pool[sent % len(pool)])
            sent += 1
    await producer.flush()
    return sent, time.perf_counter() - start


def produce_sync(url: str, topic: str, size: int, codec: str, seconds: float) -> Figure:
    pool = values(size)
    sent = 0
    with Producer(url, compression_type=codec, **PRODUCER_OPTIONS) as producer:
        producer.partitions_for(topic)
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for _ in range(1000):
                producer.send(topic, pool[sent % len(pool)])
                sent += 1
        producer.flush()
        elapsed = time.perf_counter() - start
    return Figure(sent, elapsed, size)


async def consume(url: str, topic: str, size: int, expected: int) -> Figure:
    got = 0
    options = {"auto_offset_reset": "earliest", "max_poll_records": 10_000, "prefetch_batches": 4}
    async with AsyncConsumer(bootstrap_servers=url, **options) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        start = time.perf_counter()
        while got < expected:
            got += len(await consumer.poll(timeout=5.0))
        elapsed = time.perf_counter() - start
    return Figure(got, elapsed, size)


@dataclass
class Row:
    name: str
    produced: Figure
    consumed: Figure | None


async def measure_client(url: str, seconds: float, *, sync_rows: bool) -> list[Row]:
    rows: list[Row] = []
    async with AsyncAdmin(url) as admin:
        for size in (100, 1024):
            for codec in ("none", "zstd"):
                topic = f"bench-{size}-{codec}"
                await admin.create_topic(topic, PARTITIONS, {"max.message.bytes": str(16 * 2**20)})
                produced = await produce_async(url, topic, size, codec, seconds)
                consumed = await consume(url, topic, size, produced.records)
                rows.append(Row(f"async, {size} B, {codec}", produced, consumed))
                print(f"measured {rows[-1].name}", file=sys.stderr, flush=True)
                if sync_rows and codec == "none":
                    topic = f"bench-sync-{size}"
                    await admin.create_topic(topic, PARTITIONS)
                    figure = await asyncio.to_thread(produce_sync, url, topic, size, codec, seconds)
                    rows.append(Row(f"sync Producer, {size} B, {codec}", figure, None))
    return rows


# ---- idempotent vs plain produce (design note 0011) -----------------------------------------------------

VARIANTS: dict[str, dict[str, Any]] = {
    "idempotent, acks=all": {"enable_idempotence": True, "acks": "all"},
    "plain, acks=all": {"enable_idempotence": False, "acks": "all"},
    "plain, acks=1": {"enable_idempotence": False, "acks": 1},
}
IDEMPOTENT, PLAIN_ALL, PLAIN_ONE = VARIANTS


def require_idempotence_option() -> None:
    """Exit with a message when the client has no ``enable_idempotence`` option (the idempotence rows
    cannot be measured without it; ``--no-idempotence`` skips them)."""
    if "enable_idempotence" not in {f.name for f in fields(ProducerConfig)}:
        raise SystemExit(
            "client_bench: tierlog.client.config.ProducerConfig has no enable_idempotence option, so the "
            "idempotent vs plain rows cannot run; run with --no-idempotence to measure the rest"
        )


@dataclass
class Run:
    """One timed produce run of one variant: the figure, the milliseconds from creating the producer to
    the first acknowledged record (start, metadata, and for the idempotent producer its producer id), the
    CPU seconds of the client process and of the broker process during the timed window, and the records
    the topic stored (its log end offsets) against the records acknowledged."""

    figure: Figure
    first_ack_ms: float
    client_cpu: float
    broker_cpu: float
    stored: int
    acknowledged: int

    def cpu_ms_per_mib(self, seconds: float) -> float:
        mib = self.figure.records * self.figure.size / 2**20
        return seconds * 1000 / mib if mib else float("nan")


async def produce_variant(
    server: http_bench.Server,
    admin: AsyncAdmin,
    topic: str,
    size: int,
    options: dict[str, Any],
    seconds: float,
) -> Run:
    """Produce keyless ``size``-byte records to the fresh ``topic`` for ``seconds`` with the producer
    ``options`` (no compression), after one awaited warm-up record; flush, then count what was stored."""
    pool = values(size)
    begin = time.perf_counter()
    async with AsyncProducer(server.url, compression_type="none", **PRODUCER_OPTIONS, **options) as producer:
        await (await producer.send(topic, pool[0]))
        first_ack_ms = (time.perf_counter() - begin) * 1000
        client_before, broker_before = time.process_time(), server.cpu_seconds()
        sent, elapsed = await send_for(producer, topic, pool, seconds)
        client_cpu, broker_cpu = time.process_time() - client_before, server.cpu_seconds() - broker_before
    described = await admin.describe_topic(topic)
    stored = sum(p.log_end_offset for p in described.partitions)
    return Run(Figure(sent, elapsed, size), first_ack_ms, client_cpu, broker_cpu, stored, sent + 1)


@dataclass
class Variants:
    """The runs of every variant for one record size, in round order."""

    size: int
    runs: dict[str, list[Run]] = field(default_factory=lambda: {name: [] for name in VARIANTS})

    def ratios(self, top: str, bottom: str) -> list[float]:
        """records/s of ``top`` over ``bottom``, round by round (the two ran minutes apart at most)."""
        return [
            a.figure.records_per_s / b.figure.records_per_s
            for a, b in zip(self.runs[top], self.runs[bottom], strict=True)
            if b.figure.records_per_s
        ]


async def measure_idempotence(server: http_bench.Server, seconds: float, repetitions: int) -> list[Variants]:
    """For 100 B and 1 KiB records, ``repetitions`` rounds of the three variants, each round starting with
    a different one; dirty pages are flushed before each run so no run pays for another's writeback."""
    names = list(VARIANTS)
    out = [Variants(size) for size in (100, 1024)]
    async with AsyncAdmin(server.url) as admin:
        for round_ in range(repetitions):
            for variants in out:
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                    topic = f"idem-{variants.size}-{re.sub(r'[^a-z0-9]+', '-', name)}-{round_}"
                    await admin.create_topic(topic, PARTITIONS, {"max.message.bytes": str(16 * 2**20)})
                    await asyncio.to_thread(os.sync)
                    run = await produce_variant(server, admin, topic, variants.size, VARIANTS[name], seconds)
                    variants.runs[name].append(run)
            print(f"idempotence round {round_ + 1} of {repetitions} done", file=sys.stderr, flush=True)
    return out


def _median(xs: list[float]) -> float:
    ordered = sorted(xs)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    """The median and, with several values, the range: ``0.95 (0.91-1.02)``."""
    if len(xs) < 2:
        return fmt.format(_median(xs)) if xs else "-"
    return f"{fmt.format(_median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def idempotence_table(results: list[Variants], ceiling: dict[str, Any]) -> list[str]:
    """Markdown rows: medians over the rounds (range in brackets), the ratio to the broker ceiling, the
    per-round ratio idempotent / plain (both acks=all) and plain acks=all / plain acks=1, CPU per MiB."""
    base_produce, _ = ceiling_mib(ceiling)
    lines = [
        "| record size, variant | produce records/s | produce MiB/s | vs broker ceiling "
        "| idempotent / plain (acks=all) | acks=all / acks=1 (plain) | first ack ms "
        "| client CPU ms/MiB | broker CPU ms/MiB | stored = acknowledged |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for variants in results:
        for name, runs in variants.runs.items():
            mib = _median([r.figure.mib_per_s for r in runs])
            idem = _spread(variants.ratios(IDEMPOTENT, PLAIN_ALL)) if name == IDEMPOTENT else ""
            acks = _spread(variants.ratios(PLAIN_ALL, PLAIN_ONE)) if name == PLAIN_ALL else ""
            exact = all(r.stored == r.acknowledged for r in runs)
            lines.append(
                f"| {variants.size} B, {name} "
                f"| {_spread([r.figure.records_per_s for r in runs], '{:,.0f}')} | {mib:.1f} "
                f"| {_ratio(mib, base_produce)} | {idem} | {acks} "
                f"| {_spread([r.first_ack_ms for r in runs], '{:.0f}')} "
                f"| {_median([r.cpu_ms_per_mib(r.client_cpu) for r in runs]):.0f} "
                f"| {_median([r.cpu_ms_per_mib(r.broker_cpu) for r in runs]):.0f} "
                f"| {'yes' if exact else 'NO: ' + ', '.join(f'{r.stored}/{r.acknowledged}' for r in runs)} |"
            )
    return lines


def _phase(value: Any) -> Any:
    """One phase of http_bench's figures: a Result, or a list of per-round Results (the median is kept)."""
    if isinstance(value, list):
        ordered = sorted(value, key=lambda result: result.mib_per_s)
        return ordered[len(ordered) // 2]
    return value


def ceiling_mib(ceiling: dict[str, Any]) -> tuple[float, float]:
    """The broker ceiling (native path, prebuilt batches): produce and fetch MiB/s."""
    native = ceiling["native"]
    return _phase(native.produce).mib_per_s, _phase(native.fetch).mib_per_s


def _fmt(ratio: float) -> str:
    """Two decimals, three below 0.1 (the 100 B rows sit far below the ceiling)."""
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.3f}"


def _ratio(value: float, base: float) -> str:
    return _fmt(value / base) if base else "-"


def table(rows: list[Row], ceiling: dict[str, Any]) -> list[str]:
    """Markdown rows; the ratio columns are MiB/s over the broker ceiling's (native path) MiB/s."""
    base_produce, base_fetch = ceiling_mib(ceiling)
    lines = [
        "| client, record size, codec | produce records/s | produce MiB/s | vs broker ceiling "
        "| consume records/s | consume MiB/s | vs broker ceiling |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        consumed = (
            f"{row.consumed.records_per_s:,.0f} | {row.consumed.mib_per_s:.1f} "
            f"| {_ratio(row.consumed.mib_per_s, base_fetch)}"
            if row.consumed
            else "- | - | -"
        )
        lines.append(
            f"| {row.name} | {row.produced.records_per_s:,.0f} | {row.produced.mib_per_s:.1f} "
            f"| {_ratio(row.produced.mib_per_s, base_produce)} | {consumed} |"
        )
    for name, label in (
        ("native", "broker ceiling: native path, prebuilt batches"),
        ("ceiling", "HTTP ceiling"),
    ):
        if name in ceiling:
            produce, fetch = _phase(ceiling[name].produce), _phase(ceiling[name].fetch)
            lines.append(
                f"| {label}, 1 KiB | {produce.records / produce.seconds:,.0f} | {produce.mib_per_s:.1f} "
                f"| {_ratio(produce.mib_per_s, base_produce)} | {fetch.records / fetch.seconds:,.0f} "
                f"| {fetch.mib_per_s:.1f} | {_ratio(fetch.mib_per_s, base_fetch)} |"
            )
    return lines


def plot(
    rows: list[Row], ceiling: dict[str, Any], path: Path, note: str, idempotence: list[Variants] | None = None
) -> None:
    """Bars of each client row's produce and consume MiB/s as a ratio to the broker ceiling (log scale:
    the client sits one to two orders of magnitude below it), a line at 1.0 for the ceiling itself; with
    ``idempotence``, a second panel of the ratio idempotent / plain (both acks=all) per record size: every
    round as a dot, the median as a bar, and the issue's goal of 0.9 as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base_produce, base_fetch = ceiling_mib(ceiling)
    labels = [row.name.replace(", ", "\n", 1) for row in rows]
    xs = range(len(rows))
    width = 0.4
    if idempotence:
        fig, (ax, side) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    else:
        fig, ax = plt.subplots(figsize=(11, 4.5))
    produce = [r.produced.mib_per_s / base_produce for r in rows]
    consume = [r.consumed.mib_per_s / base_fetch if r.consumed else float("nan") for r in rows]
    for shift, heights, colour, label in (
        (-width / 2, produce, "tab:blue", "produce / broker produce ceiling"),
        (width / 2, consume, "tab:orange", "consume / broker fetch ceiling"),
    ):
        bars = ax.bar([x + shift for x in xs], heights, width, color=colour, label=label)
        ax.bar_label(bars, [_fmt(h) if h == h else "" for h in heights], fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8, label="broker ceiling (native path, 1.0)")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("MiB/s ratio to the broker ceiling (log)")
    ax.legend(fontsize=8)
    ax.set_title(f"Python client vs the broker's native-path ceiling\n{note}", fontsize=10)
    if idempotence:
        for x, variants in enumerate(idempotence):
            ratios = variants.ratios(IDEMPOTENT, PLAIN_ALL)
            bar = side.bar([x], [_median(ratios)], 0.5, color="tab:green")
            side.bar_label(bar, [f"{_median(ratios):.2f}"], fontsize=8)
            side.plot([x] * len(ratios), ratios, "o", color="black", markersize=4)
        side.axhline(0.9, color="tab:red", linewidth=0.8, linestyle="--", label="goal 0.9")
        side.axhline(1.0, color="grey", linewidth=0.8)
        side.set_xticks(
            range(len(idempotence)), [f"async, {v.size} B\nnone" for v in idempotence], fontsize=8
        )
        side.set_ylabel("records/s ratio", fontsize=9)
        side.set_ylim(0, 1.3)
        side.legend(fontsize=8, loc="lower right")
        side.set_title("idempotent / plain producer\n(both acks=all; dots: rounds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def default_settings() -> str:
    """What the client's defaults resolve to for the table's producers (``acks``, idempotence)."""
    config = ProducerConfig.from_kwargs({"bootstrap_servers": "http://127.0.0.1:1", **PRODUCER_OPTIONS})
    idempotence = getattr(config, "enable_idempotence", None)
    state = "no `enable_idempotence` option" if idempotence is None else f"`enable_idempotence={idempotence}`"
    return f"`acks={config.acks_param}`, {state}"


def idempotence_section(lines: list[str], repetitions: int, seconds: float) -> list[str]:
    """The page's section on the idempotent vs plain rows: how they were measured, then the table."""
    text = [
        "The same async workload (no compression, one broker) with three producer settings,",
        f"{repetitions} interleaved rounds of {seconds:g} s each (each round starts with a different",
        "setting; a fresh topic per run; dirty pages flushed before each run). Figures are medians",
        "over the rounds with the range in brackets. `idempotent / plain` divides the idempotent",
        "producer's records/s by the plain producer's with the same `acks=all`, round by round;",
        "`acks=all / acks=1` does the same for the plain producer. `first ack ms` is the time",
        "from creating the producer to its first acknowledged record (start, metadata and, when",
        "idempotent, `POST /native/v1/producers`); the throughput window starts after it. CPU",
        "ms/MiB is the client process's and the broker process's CPU time in the window per MiB",
        "of values. `stored = acknowledged` compares the topic's log end offsets with the records",
        "the producer had acknowledged.",
    ]
    return ["## Idempotent vs plain producer", "", " ".join(text), "", *lines, ""]


async def main(args: argparse.Namespace) -> str:
    seconds = 1.0 if args.quick else args.seconds
    repetitions = 1 if args.quick else args.repetitions
    if not args.no_idempotence:
        require_idempotence_option()
    data_root = Path(args.data_root)
    idempotence: list[Variants] = []
    with tempfile.TemporaryDirectory(dir=data_root) as data_dir:
        async with http_bench.Server("broker", Path(data_dir), PARTITIONS) as server:
            rows = await measure_client(server.url, seconds, sync_rows=not args.no_sync)
            if not args.no_idempotence:
                idempotence = await measure_idempotence(server, seconds, repetitions)
    ceiling = await http_bench.measure(1, seconds, 1, data_root)
    lines = table(rows, ceiling)
    print("\n".join(lines))
    idem_lines = idempotence_table(idempotence, ceiling) if idempotence else []
    print("\n".join(idem_lines))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    plot(
        rows,
        ceiling,
        Path(args.plot),
        f"{stamp}, {os.cpu_count()} CPUs shared with other work (load {load:.1f})",
        idempotence,
    )
    print(f"plot: {args.plot}")
    command = " ".join(
        [
            "infra/bench/client_bench.py",
            *(["--quick"] if args.quick else []),
            f"--seconds {seconds:g}",
            *([f"--repetitions {repetitions}"] if idempotence else ["--no-idempotence"]),
        ]
    )
    header = [
        "# Python client benchmark",
        "",
        f"`{command}`, {stamp}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work (load average {load:.1f} at the end); "
        "the broker is one child process on loopback.",
        "",
        " ".join(
            [
                f"One client process. Producers send keyless records to a {PARTITIONS}-partition topic",
                f"for {seconds:g} s (`linger_ms` 5, `batch_size` 512 KiB) with the client's defaults",
                f"({default_settings()}), then flush; an `AsyncConsumer`",
                "reads everything back from offset 0 with CRC checks on. MiB/s count record values.",
                "The last two rows come from `infra/bench/http_bench.py` run in the same process with one",
                "client: the broker's native path fed prebuilt 1 MiB batches (no client-side batching,",
                "encoding or decoding), and a minimal aiohttp server that only appends bodies to a file.",
                "The `vs broker ceiling` columns divide each row's MiB/s by the native path's produce or",
                "fetch MiB/s.",
            ]
        ),
        "",
    ]
    idem_section = idempotence_section(idem_lines, repetitions, seconds) if idempotence else []
    picture = [
        f"![the client's produce and consume MiB/s as ratios to the broker ceiling]({Path(args.plot).name})",
        "",
        "The plot shows the two `vs broker ceiling` columns (log scale)"
        + (
            " and, on the right, the `idempotent / plain` ratio of every round (dots) and its median (bar)"
            if idempotence
            else ""
        )
        + f"; the same run writes it (`--plot`, default `{DEFAULT_PLOT}`).",
        "",
    ]
    return "\n".join([*header, *lines, "", *picture, *idem_section, *READING])


READING = [
    "## Reading the table",
    "",
    "* The client is bound by per-record Python work, not by the broker or HTTP: producing builds every",
    "  record with the shared pure-Python codec (varints, headers, CRC over the batch) and resolves one",
    "  future per record; consuming decodes every record into a `ConsumerRecord`. The ceiling rows only move",
    "  prebuilt bytes, so the gap between them and the client rows is the cost of those per-record steps.",
    "* Bytes per second grow with the record size because the per-record cost dominates: 1 KiB records move",
    "  roughly ten times the bytes of 100 B records at a similar record rate.",
    "* On the producer zstd is small next to the per-record work (batches are compressed off the event",
    "  loop, and zstd releases the GIL); on the consumer decompression adds to the per-record decoding.",
    "* The synchronous `Producer` pays for the hand-off between the caller's thread and the I/O thread",
    "  (both compete for the GIL); use `AsyncProducer` where throughput matters.",
    "* Idempotence (the idempotence table) costs, per producer, one `POST /native/v1/producers` before its",
    "  first batch (in `first ack ms`, outside the throughput window); per batch, the client writes the",
    "  producer id, epoch and sequence into the header it encodes anyway and keeps the sequence per",
    "  partition, and the leader checks the sequence against the producer's entry and records the batch's",
    "  sequences and offsets (a five-batch cache) before and after the append. All of it is per batch, not",
    "  per record, and a batch here holds hundreds to thousands of records.",
    "* `acks=all` on one broker without a cluster is the `acks=1` path (there are no followers to wait for),",
    "  so the `acks=all / acks=1` column shows how much two identical settings differ on this machine: read",
    "  the `idempotent / plain` column against that spread. In a cluster `acks=all` also waits for the",
    "  followers' fetch ([cluster.md](cluster.md#acks-and-mininsyncreplicas)), which this bench does not",
    "  measure.",
    "* Numbers vary with the machine's load: the runs share two CPUs with other work, so compare rows of one",
    "  run, not runs.",
    "",
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1 s phases: a smoke run")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of producing per row (default 3)")
    parser.add_argument("--no-sync", action="store_true", help="skip the synchronous Producer rows")
    parser.add_argument(
        "--repetitions", type=int, default=5, help="interleaved rounds of the idempotence rows (default 5)"
    )
    parser.add_argument(
        "--no-idempotence", action="store_true", help="skip the idempotent vs plain producer rows"
    )
    parser.add_argument("--output", help="also write the markdown page to this file")
    parser.add_argument("--plot", default=DEFAULT_PLOT, help="where to save the ratio plot (PNG)")
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="where the broker keeps data")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    page = asyncio.run(main(arguments))
    if arguments.output:
        Path(arguments.output).write_text(page, encoding="utf-8")
