"""A producer its user never closes: scripts in a subprocess send records and exit without ``close()``.

The synchronous producer is closed at interpreter exit with a bounded wait (everything delivered, exit 0);
against an unreachable broker it exits within the bound and names the records it lost. The asyncio producer
dropped while its loop runs still delivers; left open when ``asyncio.run`` ends it names what it lost. No
path prints asyncio's "Task was destroyed but it is pending!" or an unclosed session or transport.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.broker import BrokerThread
from tests.integration.client.helpers import read_topic
from tierlog.client.exit_close import EXIT_CLOSE_MAX_S

ROOT = Path(__file__).resolve().parents[3]
RECORDS = 1000
NOISE = (
    "Task was destroyed",
    "Unclosed client session",
    "Unclosed connector",
    "unclosed transport",
    "Traceback",
)

SYNC_SCRIPT = """
import sys
from tierlog.client import Producer

# compressed: batches are encoded in a thread, which the interpreter no longer starts at exit
producer = Producer(sys.argv[1], linger_ms=50, compression_type="zstd")
for i in range(int(sys.argv[3])):
    producer.send(sys.argv[2], b"record %d" % i)
"""

ASYNC_SCRIPT = """
import asyncio, gc, sys
from tierlog.client import AsyncProducer

async def main(drop: bool) -> None:
    producer = AsyncProducer(sys.argv[1], linger_ms=50)
    for i in range(int(sys.argv[3])):
        await producer.send(sys.argv[2], b"record %d" % i)
    if drop:  # dropped while the loop runs: the sender task flushes, then closes the connections
        del producer
        gc.collect()
        while any(t.get_name() == "tierlog producer sender" for t in asyncio.all_tasks()):
            await asyncio.sleep(0.01)

asyncio.run(main(sys.argv[4] == "drop"))
"""


def run_script(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-W", "default", str(path), *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60, check=False,
    )  # fmt: skip


def assert_quiet(stderr: str) -> None:
    for noise in NOISE:
        assert noise not in stderr, stderr


def closed_port_url() -> str:
    """A loopback URL nobody listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_an_unclosed_producer_delivers_everything_at_exit(
    thread_broker: BrokerThread, tmp_path: Path
) -> None:
    done = run_script(tmp_path, SYNC_SCRIPT, thread_broker.url, "at-exit", str(RECORDS))
    assert done.returncode == 0, done.stderr
    assert_quiet(done.stderr)
    assert "not delivered" not in done.stderr
    records = asyncio.run(read_topic(thread_broker.url, "at-exit", RECORDS))
    assert sorted(r.value for r in records) == sorted(b"record %d" % i for i in range(RECORDS))


def test_an_unclosed_producer_without_a_broker_exits_within_the_bound_naming_its_losses(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    done = run_script(tmp_path, SYNC_SCRIPT, closed_port_url(), "nowhere", "10")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "UnclosedProducerWarning" in done.stderr
    assert f"10 record(s) were not delivered within {EXIT_CLOSE_MAX_S:g} s" in done.stderr
    assert_quiet(done.stderr)
    assert elapsed < EXIT_CLOSE_MAX_S + 10  # the bound, plus the interpreter's start on a busy machine


def test_an_async_producer_dropped_while_its_loop_runs_still_delivers(
    thread_broker: BrokerThread, tmp_path: Path
) -> None:
    done = run_script(tmp_path, ASYNC_SCRIPT, thread_broker.url, "dropped", str(RECORDS), "drop")
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning: a tierlog AsyncProducer was not closed" in done.stderr
    assert "not delivered" not in done.stderr
    assert_quiet(done.stderr)
    records = asyncio.run(read_topic(thread_broker.url, "dropped", RECORDS))
    assert len({r.value for r in records}) == RECORDS


def test_an_async_producer_open_when_asyncio_run_ends_names_its_losses(
    thread_broker: BrokerThread, tmp_path: Path
) -> None:
    done = run_script(tmp_path, ASYNC_SCRIPT, thread_broker.url, "abandoned", str(RECORDS), "keep")
    assert done.returncode == 0, done.stderr
    assert_quiet(done.stderr)
    found = re.search(r"UnclosedProducerWarning: .* (\d+) record\(s\) were not delivered", done.stderr)
    assert found is not None, done.stderr
    assert 0 < int(found.group(1)) <= RECORDS  # unacknowledged ones: a request in flight may have landed
