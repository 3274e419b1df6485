"""Crash test: a child process appending with fsync per batch is SIGKILLed at random points many times;
every acknowledged record must survive each restart, in order, with nothing corrupt served."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.log import LogConfig, PartitionLog

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[3]
ITERATIONS = 20


def verify(directory: Path) -> int:
    """Open the log (running recovery), check every record, return the log end offset."""
    log = PartitionLog.open(directory, LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024))
    try:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 256 * 1024).data
            for _, record in iter_records(data):
                if record.offset < offset:
                    continue
                assert record.offset == offset
                assert record.value is not None and record.value.split(b"|")[0] == b"%d" % offset
                offset += 1
        assert offset == log.log_end_offset
        return offset
    finally:
        log.close()


@pytest.mark.slow
def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    directory = tmp_path / "crash-0"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    acknowledged = -1
    for iteration in range(ITERATIONS):
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(directory), str(iteration)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        assert child.stdout is not None
        try:
            for _ in range(rng.randint(1, 40)):
                line = child.stdout.readline()
                assert line, f"child exited early with {child.wait()}"
                acknowledged = max(acknowledged, int(line))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        end = verify(directory)
        assert end > acknowledged, f"iteration {iteration}: acknowledged {acknowledged}, log ends at {end}"
