"""The first hour, timed: from ``git clone`` to a broker answering and to the first Spark read of the archive.

Clones this repository into a fresh temporary directory (``git clone`` of the local checkout's HEAD, so no
network for the sources) and times, as a newcomer runs them:

* **clone -> broker ready**: ``git clone``, then ``make run`` (a venv, ``pip install -e .``, the broker
  starting), until ``GET /ready`` answers 200;
* **clone -> first Spark read**: in another fresh clone, ``make demo`` (a venv, ``pip install -e
  '.[spark]'``, a broker, a tiered topic, records produced and archived, a SparkSession reading them)
  until the demo prints that Spark read the archive;

and, as the peers of the same run, the same commands again in the same clone (the venv installed, the
second-run cost), interleaved: cold run, warm run, cold demo, warm demo. pip uses the machine's own cache
(``~/.cache/pip``), as a developer's second clone would; ``--no-cache`` makes pip download everything.
Prints a Markdown table with the cold/warm ratios and saves ``docs/benchmarks-first-hour.png``.

    .venv/bin/python infra/bench/first_hour_bench.py [--rounds 1] [--no-cache] [--python python3.11]

Takes a few minutes (the pip installs dominate). Not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 1800.0  # bound on one measured step (a cold pip install of pyspark); never a measured figure
SPARK_READ = re.compile(r"first Spark read of archived data")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def env(no_cache: bool) -> dict[str, str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("TIERLOG_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    if no_cache:
        clean["PIP_NO_CACHE_DIR"] = "1"
    return clean


def clone(into: Path) -> float:
    """``git clone`` of this checkout's HEAD into ``into``; seconds taken."""
    started = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(into)], check=True, timeout=DEADLINE_S)
    return time.monotonic() - started


def until(proc: subprocess.Popen[bytes], log: Path, done: Callable[[], bool]) -> float:
    """Seconds until ``done()``; raises RuntimeError with the log if the process exits first."""
    started = time.monotonic()
    while not done():
        if proc.poll() is not None and not done():
            raise RuntimeError(
                f"{proc.args!r} exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
            )
        if time.monotonic() - started > DEADLINE_S:
            raise RuntimeError(f"{proc.args!r} not done in {DEADLINE_S:.0f} s")
        time.sleep(0.1)  # polling another process
    return time.monotonic() - started


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group (make and the broker it started), then wait."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)


def make_run(checkout: Path, python: str, no_cache: bool) -> float:
    """``make run`` in ``checkout`` until the broker answers /ready; seconds."""
    port = free_port()
    log = checkout / f"make-run-{port}.log"
    args = f"--port {port} --kafka-listener 127.0.0.1:0 --data-dir {checkout / 'data'}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["make", "run", f"PYTHON={python}", f"ARGS={args}"],
            cwd=checkout, stdout=out, stderr=subprocess.STDOUT, env=env(no_cache), start_new_session=True,
        )  # fmt: skip
    try:
        return until(proc, log, lambda: ready(f"http://127.0.0.1:{port}"))
    finally:
        stop(proc)


def make_demo(checkout: Path, python: str, no_cache: bool) -> float:
    """``make demo`` in ``checkout`` until Spark has read the archive; seconds (the demo then finishes)."""
    log = checkout / "make-demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["make", "demo", f"PYTHON={python}"],
            cwd=checkout, stdout=out, stderr=subprocess.STDOUT, env=env(no_cache), start_new_session=True,
        )  # fmt: skip
    try:
        seconds = until(proc, log, lambda: bool(SPARK_READ.search(log.read_text(errors="replace"))))
        if proc.wait(DEADLINE_S) != 0:
            raise RuntimeError(f"make demo failed:\n{log.read_text(errors='replace')}")
        return seconds
    finally:
        stop(proc)


def measure(rounds: int, python: str, no_cache: bool) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        "clone -> broker ready": [],
        "again: make run -> broker ready": [],
        "clone -> first Spark read": [],
        "again: make demo -> first Spark read": [],
    }
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="tierlog-first-hour-") as tmp:
            run_clone, demo_clone = Path(tmp) / "run", Path(tmp) / "demo"
            took = clone(run_clone)
            times["clone -> broker ready"].append(took + make_run(run_clone, python, no_cache))
            times["again: make run -> broker ready"].append(make_run(run_clone, python, no_cache))
            shutil.rmtree(run_clone)
            took = clone(demo_clone)
            times["clone -> first Spark read"].append(took + make_demo(demo_clone, python, no_cache))
            times["again: make demo -> first Spark read"].append(make_demo(demo_clone, python, no_cache))
        print(json.dumps({k: [round(v, 1) for v in vs] for k, vs in times.items()}), file=sys.stderr)
    return times


def report(times: dict[str, list[float]]) -> str:
    median = {k: statistics.median(v) for k, v in times.items()}
    rows = [
        "| step | median s | runs | cold / warm |",
        "| --- | --- | --- | --- |",
    ]
    pairs = {"clone -> broker ready": "again: make run -> broker ready",
             "clone -> first Spark read": "again: make demo -> first Spark read"}  # fmt: skip
    for name, values in times.items():
        warm = pairs.get(name)
        ratio = f"{median[name] / median[warm]:.1f}x" if warm else ""
        rows.append(f"| {name} | {median[name]:.1f} | {', '.join(f'{v:.0f}' for v in values)} | {ratio} |")
    return "\n".join(rows)


def plot(times: dict[str, list[float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(times)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.barh(names, [statistics.median(times[n]) for n in names], color=["C0", "C0", "C1", "C1"])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median)")
    ax.set_title("tierlog: from git clone to a broker and to the first Spark read")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-cache", action="store_true", help="pip downloads everything (PIP_NO_CACHE_DIR)")
    parser.add_argument("--python", default="python3", help="the Python make creates the venv with")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "benchmarks-first-hour.png")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"{platform.node()}: {os.cpu_count()} cores, load average {load:.1f}, {args.python}", file=sys.stderr
    )
    times = measure(args.rounds, args.python, args.no_cache)
    print(report(times))
    plot(times, args.plot)
    print(f"plot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
