"""Python client benchmark: records/s and MiB/s one client process produces and consumes through tierlog.

For 100 B and 1 KiB records, without compression and with zstd, the asyncio client (the implementation) and
the synchronous ``Producer`` (the same core behind a thread hand-off) produce for ``--seconds`` into a fresh
4-partition topic of one broker child process, then an ``AsyncConsumer`` reads everything back from offset 0.
Values are text with repeated words (about 3:1 under zstd). The broker-side ceiling comes from
``infra/bench/http_bench.py`` in the same run: its native path (prebuilt 1 MiB batches of 1 KiB records, no
client-side batching or decoding) and its minimal aiohttp server, both with one client.

    .venv/bin/python infra/bench/client_bench.py [--quick] [--seconds 3] [--output docs/benchmarks-client.md]
        [--plot docs/benchmarks-client.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

import http_bench  # noqa: E402

from tierlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, Producer, TopicPartition  # noqa: E402

PARTITIONS = 4
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


async def produce_async(url: str, topic: str, size: int, codec: str, seconds: float) -> Figure:
    pool = values(size)
    sent = 0
    async with AsyncProducer(url, compression_type=codec, **PRODUCER_OPTIONS) as producer:
        await producer.partitions_for(topic)
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for _ in range(1000):
                await producer.send(topic, pool[sent % len(pool)])
                sent += 1
        await producer.flush()
        elapsed = time.perf_counter() - start
    return Figure(sent, elapsed, size)


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


def plot(rows: list[Row], ceiling: dict[str, Any], path: Path, note: str) -> None:
    """Bars of each client row's produce and consume MiB/s as a ratio to the broker ceiling (log scale:
    the client sits one to two orders of magnitude below it), a line at 1.0 for the ceiling itself."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base_produce, base_fetch = ceiling_mib(ceiling)
    labels = [row.name.replace(", ", "\n", 1) for row in rows]
    xs = range(len(rows))
    width = 0.4
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def main(args: argparse.Namespace) -> str:
    seconds = 1.0 if args.quick else args.seconds
    data_root = Path(args.data_root)
    with tempfile.TemporaryDirectory(dir=data_root) as data_dir:
        async with http_bench.Server("broker", Path(data_dir), PARTITIONS) as server:
            rows = await measure_client(server.url, seconds, sync_rows=not args.no_sync)
    ceiling = await http_bench.measure(1, seconds, 1, data_root)
    lines = table(rows, ceiling)
    print("\n".join(lines))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    plot(
        rows,
        ceiling,
        Path(args.plot),
        f"{stamp}, {os.cpu_count()} CPUs shared with other work (load {load:.1f})",
    )
    print(f"plot: {args.plot}")
    header = [
        "# Python client benchmark",
        "",
        f"`infra/bench/client_bench.py {'--quick ' if args.quick else ''}--seconds {seconds:g}`, "
        f"{stamp}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs shared with other work (load average {load:.1f} at the end); "
        "the broker is one child process on loopback.",
        "",
        " ".join(
            [
                f"One client process. Producers send keyless records to a {PARTITIONS}-partition topic",
                f"for {seconds:g} s (`linger_ms` 5, `batch_size` 512 KiB), then flush; an `AsyncConsumer`",
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
    return "\n".join([*header, *lines, "", *READING])


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
    parser.add_argument("--output", help="also write the markdown page to this file")
    parser.add_argument(
        "--plot", default="docs/benchmarks-client.png", help="where to save the ratio plot (PNG)"
    )
    parser.add_argument("--data-root", default=tempfile.gettempdir(), help="where the broker keeps data")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    page = asyncio.run(main(arguments))
    if arguments.output:
        Path(arguments.output).write_text(page, encoding="utf-8")
