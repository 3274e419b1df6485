"""The tiered-storage demo, one command from a fresh clone: ``make demo`` (``python infra/demo.py``).

What it does, printing each step as the command a user would type:

1. starts a broker (``tierlog serve``) on a free port, its data and its remote tier in a fresh directory
   (the local-directory tier, ``<data-dir>/remote``: nothing else to install or run);
2. creates a tiered topic with small segments (``remote.storage.enable=true``, ``segment.bytes=16384``)
   whose local copies go as soon as they are uploaded (``local.retention.ms=0``);
3. produces keyed records with ``tierlog produce``;
4. waits until every record is in the archive and gone from the broker's disk, watching the partitions'
   ``tiered_storage`` state (``GET /v3/clusters/{id}/topics/{topic}/partitions/{p}``), not a fixed time;
5. reads the archive with Spark (the ``tierlog`` data source, straight from the directory, no broker);
6. reads the topic back with ``tierlog consume`` (served from the remote tier, the local log being empty);
7. stops the broker and removes the directory (``--keep`` keeps it and prints how to read it again).

Every step checks its result against what was produced and the demo exits 1 naming the step that failed.
``run(spark=...)`` is the same demo on a SparkSession the caller owns (the tests share theirs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOPIC = "events"
PARTITIONS = 2
SEGMENT_BYTES = 16384
DEADLINE_S = 120.0  # bound on each wait for the broker; a deadline, never a timing assertion
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
# The broker's settings for a demo that finishes in seconds: idle partitions roll after 1 s, the uploader
# looks for work every 0.5 s, local retention runs every second. Defaults are an hour, 10 s and 5 min.
BROKER_SETTINGS = (
    "--remote-max-upload-interval-ms", "1000",
    "--remote-upload-interval-ms", "500",
    "--log-retention-check-interval-ms", "1000",
    "--kafka-listener", "127.0.0.1:0",
)  # fmt: skip
TOPIC_CONFIGS = (f"segment.bytes={SEGMENT_BYTES}", "remote.storage.enable=true", "local.retention.ms=0")

Say = Callable[[str], None]


class DemoError(Exception):
    """A step of the demo did not do what it should; the message names the step and what was seen."""


@dataclass
class DemoResult:
    """What the demo did: records produced, per-partition archive state, what Spark and the CLI read."""

    produced: int = 0
    archived: dict[int, dict[str, Any]] = field(default_factory=dict)
    spark_rows: int = 0
    spark_per_partition: dict[int, int] = field(default_factory=dict)
    cli_records: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def records(count: int) -> list[tuple[str, str]]:
    """``count`` (key, value) pairs: five users, JSON values."""
    return [
        (f"user-{n % 5}", json.dumps({"n": n, "event": "click" if n % 3 else "view"})) for n in range(count)
    ]


def tierlog_command() -> list[str]:
    """``tierlog`` as this interpreter runs it (the venv's console script, or ``python -m tierlog``)."""
    script = Path(sys.executable).parent / "tierlog"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tierlog"]


def _env() -> dict[str, str]:
    """This environment without tierlog settings a shell may carry (the demo passes its own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Broker:
    """A ``tierlog serve --port 0`` child process logging to ``<workdir>/broker.log``."""

    def __init__(self, workdir: Path, data_dir: Path) -> None:
        self.log_path = workdir / "broker.log"
        self.args = ["serve", "--data-dir", str(data_dir), "--port", "0", *BROKER_SETTINGS]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*tierlog_command(), *self.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=workdir,
            )
        self.url = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self) -> str:
        """The broker's URL once its log says where it listens. Raises DemoError if it exits first."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            exited = self.proc.poll() is not None  # read the log after this, so no last line is missed
            match = LISTENING.search(self.log())
            if match:
                self.url = match.group(1)
                return self.url
            if exited or time.monotonic() > deadline:
                why = (
                    f"exited with {self.proc.returncode}"
                    if exited
                    else f"not listening in {DEADLINE_S:.0f} s"
                )
                raise DemoError(f"the broker {why}; its log:\n{self.log()}")
            time.sleep(0.05)  # polling another process's log

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after the deadline). Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(DEADLINE_S)


def get_json(url: str) -> Any:
    """GET ``url`` and decode its JSON answer; None when the broker does not answer 200 (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def poll(what: str, probe: Callable[[], Any], describe: Callable[[], str] = lambda: "") -> Any:
    """Call ``probe`` every 0.1 s until it answers something true; DemoError at the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"not within {DEADLINE_S:.0f} s: {what}. {describe()}".strip())
        time.sleep(0.1)  # polling another process's state


def cli(broker: Broker, say: Say, *argv: str, stdin: str = "", shown_stdin: str = "") -> str:
    """Run ``tierlog *argv --bootstrap-server URL``, print it as a user types it, return its stdout.
    Raises DemoError with its stderr when it fails."""
    argv = (*argv, "--bootstrap-server", broker.url)
    say(f"  $ {shown_stdin}tierlog {shlex.join(argv)}")
    done = subprocess.run(
        [*tierlog_command(), *argv],
        input=stdin.encode(),
        capture_output=True,
        env=_env(),
        timeout=DEADLINE_S,
        check=False,
    )
    err = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        raise DemoError(
            f"tierlog {argv[0]} {argv[1] if len(argv) > 1 else ''} failed ({done.returncode}): {err}"
        )
    for line in err.splitlines():
        say(f"    {line}")
    return done.stdout.decode(errors="replace")


def tiered_state(broker: Broker, cluster_id: str) -> dict[int, dict[str, Any]]:
    """Each partition's ``tiered_storage`` object from the v3 API (empty where it does not answer)."""
    base = f"{broker.url}/v3/clusters/{cluster_id}/topics/{TOPIC}/partitions"
    states: dict[int, dict[str, Any]] = {}
    for p in range(PARTITIONS):
        answer = get_json(f"{base}/{p}")
        states[p] = dict(answer.get("tiered_storage") or {}) if answer else {}
    return states


def all_archived(states: dict[int, dict[str, Any]]) -> bool:
    """Every record uploaded (the remote tier ends where the log ends) and none left on local disk."""
    return all(
        s.get("log_end_offset") is not None
        and s.get("remote_next_offset") == s["log_end_offset"]
        and s.get("local_log_start_offset") == s["log_end_offset"]
        for s in states.values()
    ) and bool(states)


def new_spark_session() -> Any:
    """A local SparkSession as docs/spark.md sets one up (workers run this interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    session = (
        builder.master("local[2]")
        .appName("tierlog-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_read(spark: Any, archive: Path, say: Say) -> list[tuple[int, int, str, str]]:
    """Read the topic from the archive with Spark (one job); (partition, offset, key, value) rows in order."""
    from tierlog.spark import TierlogDataSource

    say("  spark.dataSource.register(TierlogDataSource)")
    say(f'  df = spark.read.format("tierlog").option("uri", "{archive}").option("topic", "{TOPIC}").load()')
    spark.dataSource.register(TierlogDataSource)
    df = spark.read.format("tierlog").option("uri", str(archive)).option("topic", TOPIC).load()
    rows = df.selectExpr(
        "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"
    )
    collected = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in rows.collect())
    say("  partition  offset  key     value")
    for partition, offset, key, value in collected[:3] + collected[-2:]:
        say(f"  {partition:>9}  {offset:>6}  {key:<6}  {value}")
    return collected


@contextmanager
def workspace(keep: bool, say: Say) -> Iterator[Path]:
    """A fresh directory for the broker's data and log; removed afterwards unless ``keep``."""
    root = Path(tempfile.mkdtemp(prefix="tierlog-demo-"))
    try:
        yield root
    finally:
        if keep:
            say(f"kept {root} (remove it with: rm -r {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(spark: Any | None = None, *, count: int = 2000, keep: bool = False, say: Say = print) -> DemoResult:
    """The whole demo (see the module docstring). ``spark``: a session to use (one is started, and stopped
    afterwards, when None). Raises DemoError naming the step that failed; always stops the broker."""
    result = DemoResult()
    sent = records(count)
    with workspace(keep, say) as root:
        data_dir = root / "data"
        archive = data_dir / "remote"
        started = time.monotonic()
        say(f"1. a broker, data in {data_dir}, its remote tier the directory {archive}:")
        broker = Broker(root, data_dir)
        try:
            say(f"  $ tierlog {shlex.join(broker.args)}")
            url = broker.wait_listening()
            ready = poll("the broker answering /ready", lambda: get_json(f"{url}/ready"), broker.log)
            cluster_id = str(ready["cluster_id"])
            result.seconds["broker ready"] = time.monotonic() - started
            say(f"  ready at {url} after {result.seconds['broker ready']:.1f} s")

            say(
                f"2. a tiered topic with {SEGMENT_BYTES // 1024} KiB segments, deleted locally once uploaded:"
            )
            configs = [arg for c in TOPIC_CONFIGS for arg in ("--config", c)]
            cli(broker, say, "topics", "create", TOPIC, "--partitions", str(PARTITIONS), *configs)

            say(f"3. {count} records, keyed by user:")
            lines = "".join(f"{k}:{v}\n" for k, v in sent)  # the key is the text before the first ':'
            cli(
                broker, say, "produce", TOPIC, "--key-separator", ":", "--batch-size", "4096",
                stdin=lines, shown_stdin="... | ",
            )  # fmt: skip
            result.produced = count

            say("4. waiting until every segment is in the archive and off the broker's disk:")
            states = poll(
                "every record archived and deleted locally",
                lambda: (s := tiered_state(broker, cluster_id)) and all_archived(s) and s,
                lambda: f"last state: {json.dumps(tiered_state(broker, cluster_id))}",
            )
            result.archived = states
            for p, s in sorted(states.items()):
                say(
                    f"  partition {p}: offsets {s['remote_log_start_offset']}..{s['remote_next_offset'] - 1} "
                    f"in {s['remote_segments']} remote segments ({s['remote_size_bytes']} bytes), "
                    f"local log starts at {s['local_log_start_offset']}"
                )
            result.seconds["archived"] = time.monotonic() - started
            say(f"  (everything archived {result.seconds['archived']:.1f} s after the start)")

            say(f"5. Spark reads the archive at {archive} (no broker involved):")
            owned = spark is None
            session = new_spark_session() if spark is None else spark
            try:
                rows = spark_read(session, archive, say)
            finally:
                if owned:
                    session.stop()
            result.spark_rows = len(rows)
            result.spark_per_partition = dict(sorted(Counter(r[0] for r in rows).items()))
            _check("Spark", sorted((k, v) for _, _, k, v in rows), sorted(sent))
            say(f"  {len(rows)} rows, per partition {result.spark_per_partition}: every record produced")
            result.seconds["spark read"] = time.monotonic() - started
            say(f"  (first Spark read of archived data {result.seconds['spark read']:.1f} s after the start)")

            say("6. the CLI reads it back through the broker, from the remote tier:")
            out = cli(
                broker, say, "consume", TOPIC, "--from-beginning", "--max-messages", str(count),
                "--timeout-ms", "30000", "--format", "key,value",
            )  # fmt: skip
            consumed = [json.loads(line) for line in out.splitlines() if line.strip()]
            result.cli_records = len(consumed)
            _check("tierlog consume", sorted((c["key"], c["value"]) for c in consumed), sorted(sent))
            say(f"  {len(consumed)} records, every record produced")
        finally:
            code = broker.stop()
            say(f"7. broker stopped (exit status {code})")
        if keep:
            say(
                f"  read it again: TIERLOG_ARCHIVE={archive} .venv/bin/python read_events.py  (docs/spark.md)"
            )
        result.seconds["total"] = time.monotonic() - started
    say(f"demo done in {result.seconds['total']:.0f} s")
    return result


def _check(step: str, got: list[tuple[str, str]], want: list[tuple[str, str]]) -> None:
    if got != want:
        missing = Counter(want) - Counter(got)
        extra = Counter(got) - Counter(want)
        raise DemoError(
            f"{step} read {len(got)} records, {len(want)} were produced: "
            f"{sum(missing.values())} missing, {sum(extra.values())} unexpected"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=2000, help="how many records to produce")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and print where it is")
    args = parser.parse_args(argv)
    try:
        run(count=args.records, keep=args.keep)
    except DemoError as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
