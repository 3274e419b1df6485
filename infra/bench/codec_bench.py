"""Record codec benchmark: tierlog's pure-Python codec, its compiled core, and aiokafka's compiled codec.

On the same uncompressed v2 batches, per operation, records per second (best of ``--repeat`` rounds that
interleave the implementations):

* build: records -> one batch with its CRC. tierlog: ``build_batch(list of Record)``; aiokafka:
  ``DefaultRecordBatchBuilder.append(...)`` per record then ``build()`` (its API has no bulk append).
* decode: batch -> record objects, CRC checked. tierlog: ``decode_batch(buf).records``; aiokafka:
  ``DefaultRecordBatch(buf)``, ``validate_crc()``, ``list(batch)``.
* validate: tierlog's produce validation of every record (``validate_batch``); aiokafka has none.
* columns: tierlog's ``decode_columns`` (Arrow-shaped buffers, no object per record); aiokafka has none.

Prints a markdown table with the ratios compiled/pure and compiled/aiokafka, and saves a PNG plot.

    .venv/bin/python infra/bench/codec_bench.py [--quick] [--plot docs/benchmarks-codec.png]

aiokafka is optional (``pip install aiokafka``); without it its column is empty. Not a test: it never
fails on a timing.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierlog.tiering.codec import Record, _accel, build_batch, decode_batch, decode_columns
from tierlog.tiering.codec.validate import validate_batch

NOW = 1_700_000_000_000
MAX_SIZE = 64 * 2**20


@dataclass(frozen=True)
class Workload:
    name: str
    count: int
    key_bytes: int
    value_bytes: int
    headers: int

    def records(self) -> list[Record]:
        value = bytes(range(256)) * (self.value_bytes // 256 + 1)
        headers = tuple((f"header-{h}", b"v" * 16) for h in range(self.headers))
        return [
            Record(
                (b"key-%08d" % i)[: self.key_bytes] or None,
                value[i % 256 : i % 256 + self.value_bytes],
                headers,
                NOW + i,
            )
            for i in range(self.count)
        ]


WORKLOADS = [
    Workload("1000 x 100 B", 1000, 12, 100, 0),
    Workload("1000 x 100 B, 2 headers", 1000, 12, 100, 2),
    Workload("1000 x 10 B", 1000, 8, 10, 0),
    Workload("100 x 10 KiB", 100, 12, 10240, 0),
]


def rate(count: int, op: Callable[[], object], min_seconds: float) -> float:
    """Records/s of one run looping ``op`` for at least ``min_seconds``."""
    loops, start = 0, time.perf_counter()
    while True:
        op()
        loops += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return loops * count / elapsed


def in_mode(implementation: str, op: Callable[[], object]) -> Callable[[], object]:
    if implementation == "aiokafka":
        return op

    def call() -> object:
        with _accel.use(implementation):
            return op()

    return call


def aiokafka_ops(records: list[Record], batch: bytes) -> dict[str, Callable[[], object]]:
    try:
        from aiokafka.record.default_records import (  # type: ignore[import-not-found,unused-ignore]
            DefaultRecordBatch,
            DefaultRecordBatchBuilder,
        )
    except ImportError:
        return {}
    plain = [(r.key, r.value, list(r.headers), r.timestamp) for r in records]

    def build() -> object:
        builder: Any = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**30)
        for i, (key, value, headers, ts) in enumerate(plain):
            builder.append(i, ts, key, value, headers)
        return builder.build()

    def decode() -> object:
        parsed: Any = DefaultRecordBatch(batch)
        parsed.validate_crc()
        return list(parsed)

    return {"build": build, "decode": decode}


def measure(workload: Workload, repeat: int, min_seconds: float) -> dict[str, dict[str, float]]:
    records = workload.records()
    batch = build_batch(records, now_ms=NOW)
    ours: dict[str, Callable[[], object]] = {
        "build": lambda: build_batch(records, now_ms=NOW),
        "decode": lambda: decode_batch(batch).records,
        "validate": lambda: validate_batch(batch, max_size=MAX_SIZE),
        "columns": lambda: decode_columns(batch),
    }
    runs: dict[str, dict[str, Callable[[], object]]] = {op: {} for op in ours}
    for implementation in ("pure", "compiled") if _accel.available is not None else ("pure",):
        for op, call in ours.items():
            runs[op][implementation] = in_mode(implementation, call)
    for op, call in aiokafka_ops(records, batch).items():
        runs[op]["aiokafka"] = call
    # Rounds interleave the implementations, so that a drift in the machine's load hits them alike;
    # each figure is the best of its rounds.
    figures: dict[str, dict[str, float]] = {op: {} for op in ours}
    for _ in range(repeat):
        for op, calls in runs.items():
            for implementation, call in calls.items():
                best = figures[op].get(implementation, 0.0)
                figures[op][implementation] = max(best, rate(workload.count, call, min_seconds))
    return figures


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| workload | operation | pure (rec/s) | compiled (rec/s) | aiokafka C (rec/s) "
        "| compiled / pure | compiled / aiokafka |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def cell(value: float | None) -> str:
        return f"{value:,.0f}" if value else "-"

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.1f}x" if a and b else "-"

    for name, ops in results.items():
        for op, f in ops.items():
            pure, compiled, peer = f.get("pure"), f.get("compiled"), f.get("aiokafka")
            lines.append(
                f"| {name} | {op} | {cell(pure)} | {cell(compiled)} | {cell(peer)} "
                f"| {ratio(compiled, pure)} | {ratio(compiled, peer)} |"
            )
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = ["build", "decode", "validate", "columns"]
    fig, axes = plt.subplots(1, len(ops), figsize=(16, 4.5), sharey=False)
    colours = {"pure": "tab:gray", "compiled": "tab:blue", "aiokafka": "tab:orange"}
    names = list(results)
    width = 0.27
    for ax, op in zip(axes, ops, strict=True):
        for k, (impl, colour) in enumerate(colours.items()):
            values = [results[n][op].get(impl, 0.0) / 1e6 for n in names]
            ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, label=impl, color=colour)
        ax.set_xticks(range(len(names)), [n.replace(", ", "\n") for n in names], fontsize=7)
        ax.set_title(op)
        ax.set_ylabel("million records / s")
    axes[0].legend()
    fig.suptitle("Record codec: tierlog pure Python vs compiled core vs aiokafka's compiled codec")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one short run per figure")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--plot", type=Path, default=Path("docs/benchmarks-codec.png"))
    args = parser.parse_args()
    repeat, min_seconds = (1, 0.05) if args.quick else (args.repeat, 0.3)
    results = {w.name: measure(w, repeat, min_seconds) for w in WORKLOADS}
    print(f"python {platform.python_version()}, {platform.machine()}, compiled codec loaded: "
          f"{_accel.available is not None}")  # fmt: skip
    print(table(results))
    plot(results, args.plot)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
