"""Log engine benchmark: PartitionLog append and read against plain file I/O on the same bytes.

Appends 1 KiB records in ~1 MiB batches, without fsync and with an fsync per batch (flush.messages=1),
then reads the log back from the page cache with ``read`` (1 MiB fetches) and ``read_slice``. The same
bytes are written with a plain ``open().write()`` (and write + fsync per 1 MiB) and read with a plain
``open().read()``; each figure is printed with its ratio to the plain operation. Each phase runs a fixed
amount of data, best of ``--repeat`` runs, so the whole run is bounded (about 30 s, ``--quick`` a few).

    .venv/bin/python infra/bench/log_bench.py [--quick] [--dir /path/on/the/disk/to/test]
        [--plot docs/benchmarks-log.png]

Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, PartitionLog

RECORD_BYTES = 1024
RECORDS_PER_BATCH = 1000
READ_BYTES = 1 << 20


@dataclass
class Result:
    name: str
    seconds: float
    nbytes: int
    records: int
    baseline: str | None = None

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def make_batch() -> bytes:
    value = bytes(range(256)) * (RECORD_BYTES // 256)
    records = [
        Record(b"key-%06d" % i, value, timestamp=1_700_000_000_000 + i) for i in range(RECORDS_PER_BATCH)
    ]
    return build_batch(records, now_ms=1_700_000_000_000)


def best_of(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def plain_write(path: Path, batch: bytes, count: int, *, fsync: bool) -> float:
    start = time.perf_counter()
    with open(path, "wb") as file:
        for _ in range(count):
            file.write(batch)
            if fsync:
                file.flush()
                os.fsync(file.fileno())
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def log_append(directory: Path, batch: bytes, count: int, *, fsync: bool) -> float:
    shutil.rmtree(directory, ignore_errors=True)
    config = LogConfig(flush_messages=1) if fsync else LogConfig()
    log = PartitionLog.open(directory, config)
    start = time.perf_counter()
    for _ in range(count):
        log.append(batch)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def plain_read(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb") as file:
        while file.read(READ_BYTES):
            pass
    return time.perf_counter() - start


def log_read(log: PartitionLog, batch_size: int) -> float:
    """Fetch the whole log sequentially, 1 MiB at a time (every batch holds the same record count)."""
    start = time.perf_counter()
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        data = log.read(offset, READ_BYTES).data
        offset += RECORDS_PER_BATCH * (len(data) // batch_size)
    return time.perf_counter() - start


def log_read_slice(log: PartitionLog, batch_size: int) -> float:
    """The zero-copy form: a file slice per fetch, read here with pread (a broker would sendfile it)."""
    start = time.perf_counter()
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        with log.read_slice(offset, READ_BYTES) as piece:
            data = os.pread(piece.fd, piece.size, piece.position)
        offset += RECORDS_PER_BATCH * (len(data) // batch_size)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=None, help="also write the table (markdown) here")
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path("docs/benchmarks-log.png"),
        help="where to save the ratio plot (PNG)",
    )
    args = parser.parse_args()
    nbatches, fsync_batches, repeat = (64, 8, 2) if args.quick else (512, 64, 7)

    batch = make_batch()
    root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    try:
        results = run(root, batch, nbatches, fsync_batches, repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = render(results, batch, nbatches, fsync_batches, repeat)
    print(table)
    if args.output is not None:
        args.output.write_text(table + "\n")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    plot(results, args.plot, f"{stamp}, {os.cpu_count()} cores shared with other work (load {load:.1f})")
    print(f"plot: {args.plot}")


def run(root: Path, batch: bytes, nbatches: int, fsync_batches: int, repeat: int) -> list[Result]:
    """Each phase pairs the engine with its plain twin, alternating them ``repeat`` times (best kept), so
    a burst of load on a shared machine hits both sides of a ratio alike."""
    size, records = len(batch), RECORDS_PER_BATCH
    plain_path = root / "plain.bin"
    log_dir = root / "bench-0"
    best: dict[str, float] = {}

    def measure(name: str, run_once: Callable[[], float]) -> None:
        best[name] = min(best.get(name, float("inf")), run_once())

    for _ in range(repeat):
        measure("plain write", lambda: plain_write(plain_path, batch, nbatches, fsync=False))
        measure("append, no fsync", lambda: log_append(log_dir, batch, nbatches, fsync=False))
    for _ in range(repeat):
        measure("plain write+fsync", lambda: plain_write(plain_path, batch, fsync_batches, fsync=True))
        measure("append, fsync", lambda: log_append(log_dir, batch, fsync_batches, fsync=True))

    log_append(log_dir, batch, nbatches, fsync=False)
    with open(plain_path, "wb") as file:
        for _ in range(nbatches):
            file.write(batch)
    log = PartitionLog.open(log_dir, LogConfig())
    try:
        plain_read(plain_path)
        log_read(log, size)
        for _ in range(repeat):
            measure("plain read", lambda: plain_read(plain_path))
            measure("read", lambda: log_read(log, size))
            measure("read_slice", lambda: log_read_slice(log, size))
    finally:
        log.close()
    whole, synced = (size * nbatches, records * nbatches), (size * fsync_batches, records * fsync_batches)
    return [
        Result("plain write", best["plain write"], *whole),
        Result("append, no fsync", best["append, no fsync"], *whole, baseline="plain write"),
        Result("plain write + fsync per batch", best["plain write+fsync"], *synced),
        Result(
            "append, fsync per batch (flush.messages=1)",
            best["append, fsync"],
            *synced,
            baseline="plain write + fsync per batch",
        ),
        Result("plain read, 1 MiB reads (page cache)", best["plain read"], *whole),
        Result(
            "read(), 1 MiB fetches (page cache)",
            best["read"],
            *whole,
            baseline="plain read, 1 MiB reads (page cache)",
        ),
        Result(
            "read_slice() + pread",
            best["read_slice"],
            *whole,
            baseline="plain read, 1 MiB reads (page cache)",
        ),
    ]


def render(results: list[Result], batch: bytes, nbatches: int, fsync_batches: int, repeat: int) -> str:
    by_name = {r.name: r for r in results}
    lines = [
        f"Machine: {os.cpu_count()} cores shared with other work (load average {os.getloadavg()[0]:.1f} "
        f"at the end), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; batch {len(batch)} bytes ({RECORDS_PER_BATCH} x "
        f"{RECORD_BYTES} B records); {nbatches} batches ({fsync_batches} with fsync); best of {repeat}.",
        "",
        "| operation | MB/s | records/s | vs plain |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in results:
        ratio = f"{r.mb_per_s / by_name[r.baseline].mb_per_s:.0%}" if r.baseline else "(baseline)"
        lines.append(f"| {r.name} | {r.mb_per_s:,.0f} | {r.records_per_s:,.0f} | {ratio} |")
    return "\n".join(lines)


def plot(results: list[Result], path: Path, note: str) -> None:
    """Bars of each engine operation's MB/s as a ratio to its plain-I/O twin, a line at 1.0 (plain)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name = {r.name: r for r in results}
    engine = [r for r in results if r.baseline is not None]
    labels = [r.name.replace(" (", "\n(").replace(", ", ",\n", 1) for r in engine]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ratios = [r.mb_per_s / by_name[r.baseline].mb_per_s for r in engine if r.baseline]
    bars = ax.bar(labels, ratios, color=["tab:blue", "tab:cyan", "tab:orange", "tab:olive"][: len(engine)])
    ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0, color="grey", linewidth=0.8, label="plain file I/O (1.0)")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("MB/s ratio to the same plain file operation")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"PartitionLog vs plain file I/O on the same bytes\n{note}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
