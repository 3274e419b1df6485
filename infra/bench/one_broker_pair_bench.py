"""One broker against a baseline checkout, request by request: start-up, topic creation and produce latency.

Runs two single brokers side by side, one from this tree and one from ``--baseline`` (another checkout of
tierlog, e.g. a worktree of an older commit), each with a fresh data directory on 127.0.0.1, and
alternates every measurement between them so both see the same load on a shared machine (the order
within a pair alternates too):

* **start-up**: spawn until ``GET /ready`` answers 200, fresh and again after a clean stop, in turns
  (after one uncounted start of each; run it without ``PYTHONDONTWRITEBYTECODE`` so both start from
  compiled bytecode);
* **topic creation**: ``POST /v3/clusters/{id}/topics`` of a one-partition topic, until the answer and
  until a first ``acks=1`` produce to it succeeds;
* **produce**: one single-record batch, ``acks=1`` and ``acks=all``, in alternating blocks.

Prints a Markdown table: the median of each side, the median of the per-pair ratios (this tree over the
baseline) and in how many pairs this tree was faster:

    .venv/bin/python infra/bench/one_broker_pair_bench.py --baseline ../wt-base [--creates 60] [-- ARGS]

``ARGS`` go to this tree's ``tierlog serve`` only (e.g. ``--kafka-listener 127.0.0.1:0``, which a
baseline that predates the Kafka listener would refuse); ``--baseline-arg=X`` (repeated) to the baseline's.
Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from one_broker_bench import START_DEADLINE_S, create_topic, get_json, produce, start_broker

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

HERE = str(Path(__file__).resolve().parents[2])
Samples = dict[str, list[float]]  # "this" / "base" -> seconds, index-aligned pairs


async def paired(count: int, step: Callable[[str, int], Awaitable[float]]) -> Samples:
    """``count`` pairs of ``step(side, i)``, the side that goes first alternating."""
    samples: Samples = {"this": [], "base": []}
    for i in range(count):
        for side in ("this", "base") if i % 2 == 0 else ("base", "this"):
            samples[side].append(await step(side, i))
    return samples


def row(name: str, samples: Samples) -> str:
    this, base = samples["this"], samples["base"]
    ratios = [t / b for t, b in zip(this, base, strict=True) if b > 0]
    faster = sum(1 for t, b in zip(this, base, strict=True) if t < b)
    return (
        f"| {name} | {statistics.median(base) * 1000:.1f} | {statistics.median(this) * 1000:.1f} "
        f"| {statistics.median(ratios):.2f} | {faster}/{len(this)} |"
    )


async def run(args: argparse.Namespace) -> list[str]:
    trees = {"this": HERE, "base": args.baseline}
    extra = {"this": args.serve_args, "base": args.baseline_arg}
    batch = build_batch([Record(b"key", b"v" * 100)])
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tierlog-pair-") as tmp:
        work = Path(tmp)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def start(side: str, i: int) -> float:
                data = work / f"{side}-start-{i}"
                log = work / f"{side}.log"
                child, _, seconds = await start_broker(session, data, log, extra[side], trees[side])
                await child.stop()
                return seconds

            # one uncounted start of each: compiled bytecode is cached from then on
            for side in ("this", "base"):
                child, _, _ = await start_broker(
                    session, work / f"{side}-warm-up", work / f"{side}.log", extra[side], trees[side]
                )
                await child.stop()
            rows.append(row("start to /ready, fresh data dir", await paired(args.starts, start)))
            rows.append(row("start to /ready, after a clean stop", await paired(args.starts, start)))

            brokers = {}
            for side in ("this", "base"):
                log = work / f"{side}.log"
                child, url, _ = await start_broker(
                    session, work / f"{side}-data", log, extra[side], trees[side]
                )
                cluster = str((await get_json(session, url + "/v3/clusters"))["data"][0]["cluster_id"])
                brokers[side] = (child, url, cluster)
            try:
                answered: Samples = {"this": [], "base": []}

                async def create(side: str, i: int) -> float:
                    _, url, cluster = brokers[side]
                    until_answer, until_writable = await create_topic(
                        session, url, cluster, f"pair-{i}", batch
                    )
                    answered[side].append(until_answer)
                    return until_writable

                writable = await paired(args.creates, create)
                rows.append(row("topic create (v3), answered", answered))
                rows.append(row("topic create, until a first produce succeeds", writable))
                for acks in ("1", "all"):

                    async def block(side: str, _: int, acks: str = acks) -> float:
                        _child, url, _cluster = brokers[side]
                        times = []
                        for _j in range(args.block):
                            started = time.perf_counter()
                            if await produce(session, url, "pair-0", batch, acks) != 200:
                                raise RuntimeError(f"produce acks={acks} to {side} failed")
                            times.append(time.perf_counter() - started)
                        return statistics.median(times)

                    await paired(2, block)  # warm-up
                    rows.append(
                        row(
                            f"produce 1 record, acks={acks} (median of blocks)",
                            await paired(args.blocks, block),
                        )
                    )
            finally:
                for child, _, _ in brokers.values():
                    await child.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", required=True, help="the source tree to compare with")
    parser.add_argument(
        "--baseline-arg", action="append", default=[], help="a `tierlog serve` argument for the baseline only"
    )
    parser.add_argument("--starts", type=int, default=4, help="start-up pairs (fresh, then again)")
    parser.add_argument("--creates", type=int, default=60, help="topic create pairs")
    parser.add_argument("--blocks", type=int, default=10, help="produce block pairs per acks setting")
    parser.add_argument("--block", type=int, default=50, help="produce requests per block")
    parser.add_argument(
        "serve_args", nargs="*", help="more `tierlog serve` arguments for this tree (after --)"
    )
    args = parser.parse_args()
    args.baseline = str(Path(args.baseline).resolve())
    rows = asyncio.run(run(args))
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(
        f"one broker against {args.baseline}, {python}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{args.starts} start pairs, {args.creates} create pairs, "
        f"{args.blocks} x {args.block} produces per acks"
    )
    print(f"(readiness bound {START_DEADLINE_S:.0f} s)")
    print()
    print("| measurement | baseline ms | this tree ms | ratio (median of pairs) | this tree faster |")
    print("|---|---:|---:|---:|---:|")
    for line in rows:
        print(line)


if __name__ == "__main__":
    main()
