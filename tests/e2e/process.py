"""``tierlog`` as a user runs it: the broker as a ``python -m tierlog serve`` child process, the CLI as
commands run to completion.

A :class:`BrokerProcess` writes its log to a file (nothing to drain, so synchronous tests can block freely);
its URL is read from the ``listening on`` line, since it binds 127.0.0.1 on a free port (``--port 0``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["DEADLINE_S", "BrokerProcess", "clean_env", "run_cli", "wait_for"]

DEADLINE_S = 60.0  # bound on every wait for another process; a readiness deadline, never a timing assertion
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
READY = re.compile(r"ready: cluster")


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float = DEADLINE_S) -> T:
    """Poll ``probe`` until it answers neither None nor False; AssertionError at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s:.0f} s: {what}")
        time.sleep(0.1)  # polling other processes; not followed by an assertion on timing


def clean_env() -> dict[str, str]:
    """This process's environment without tierlog settings or a stray S3 endpoint (tests pass their own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_") and k != "AWS_ENDPOINT_URL"}
    env["PYTHONUNBUFFERED"] = "1"
    env["TIERLOG_KAFKA_LISTENER"] = "127.0.0.1:0"  # a free port: brokers of tests run side by side
    return env


class BrokerProcess:
    """A running ``tierlog serve --port 0`` child. The constructor returns once it is ready (or raises
    AssertionError with its log); :meth:`stop` ends it with SIGTERM, :meth:`kill` with SIGKILL."""

    def __init__(self, workdir: Path, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tierlog", "serve", "--port", "0", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                cwd=workdir,
            )
        try:
            self.url = self.wait_for_line(LISTENING).group(1)
            self.wait_for_line(READY)
        except BaseException:
            self.kill()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first log line matching ``pattern``, polling the log file until ``DEADLINE_S``."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            exited = self.proc.poll() is not None  # read the log after this, so no last line is missed
            match = pattern.search(self.log())
            if match:
                return match
            if exited:
                code = self.proc.returncode
                raise AssertionError(f"broker exited ({code}) before {pattern.pattern!r}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern.pattern!r} in {DEADLINE_S} s:\n{self.log()}")
            time.sleep(0.05)  # polling another process's log; not followed by an assertion on timing

    def stop(self) -> int:
        """SIGTERM, then wait (bounded) for the exit code. Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(DEADLINE_S)

    def kill(self) -> None:
        """SIGKILL if still running, and reap. Idempotent."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(DEADLINE_S)


def tierlog_command() -> list[str]:
    """The ``tierlog`` console script next to this interpreter, or ``python -m tierlog`` without one."""
    script = Path(sys.executable).parent / "tierlog"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tierlog"]


def run_cli(*argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """Run ``tierlog *argv`` to completion (bounded) with ``stdin``; stdout and stderr are captured."""
    done = subprocess.run(
        [*tierlog_command(), *argv],
        input=stdin,
        capture_output=True,
        env=clean_env(),
        timeout=DEADLINE_S,
        check=False,
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())
