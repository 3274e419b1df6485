"""Runs a page's command blocks in order against a real ``tierlog serve`` process, as a reader would.

:class:`ServedBroker` is a broker process on free loopback ports (HTTP and Kafka), started the way the docs
start one (``tierlog serve``), its ports read from the "how to reach this broker" lines it logs when ready.
:class:`PageRun` runs one page's blocks in a working directory of its own:

- shell blocks run in ``bash -e -o pipefail``; the shell variables a block sets (``CID=$(...)``) carry over
  to the page's next shell block, as they would in the reader's terminal;
- python blocks run each in a fresh interpreter of this venv;
- the documented addresses (``127.0.0.1:8082``, ``localhost:9092`` ...) are rewritten to the broker's real
  ports, ``.venv/bin/`` to this venv's bin directory, and the venv's bin directory leads ``PATH`` (so
  ``tierlog`` is the venv's command) and ``TIERLOG_BOOTSTRAP_SERVER`` names the broker (the CLI's default
  address, 8082, is the test broker's);
- an ``expect-output`` block is compared with what the command block before it printed, and with
  ``output-in-comments`` the ``# ...`` lines right after a command with what that command printed
  (whitespace, ports, UUIDs and millisecond timestamps normalised; ``...`` in the expected text matches
  anything);
- ``background`` blocks are started in a process group of their own and stopped when the page is done;
- a ``needs=<command>`` block (and its expected output) is left out where the command is not installed,
  and :attr:`PageRun.left_out` says so.

A block that exits non-zero, times out or prints something else than the page expects raises
:class:`DocCommandFailed` naming the page, the line and what it printed.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.docs.blocks import SHELL_LANGUAGES, Block, comment_outputs

__all__ = ["BIN", "DocCommandFailed", "PageRun", "ServedBroker", "matches", "normalised"]

BIN = Path(sys.executable).parent  # this venv's bin directory: tierlog, python, etcd
BLOCK_TIMEOUT_S = 120  # a deadline for one block on a loaded 2-core machine, not a timing assertion
READY_TIMEOUT_S = 90
DOCUMENTED_HTTP = ("127.0.0.1:8082", "localhost:8082")
DOCUMENTED_KAFKA = ("127.0.0.1:9092", "localhost:9092")
# Shell variables bash owns or that describe the process, not what a doc's block set.
_BASH_OWN = re.compile(
    r"^(BASH\w*|FUNCNAME|GROUPS|PIPESTATUS|PPID|UID|EUID|SHELLOPTS|SHLVL|OLDPWD|PWD|_|RANDOM|LINENO|SECONDS"
    r"|HISTCMD|EPOCH\w*|SRANDOM|OPTIND|OPTERR|IFS|PS\d|COLUMNS|LINES|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|DIRSTACK)$"
)


class DocCommandFailed(AssertionError):
    """A documented command failed, or printed something else than its page says."""


@dataclass
class ServedBroker:
    """A ``tierlog serve`` process on free loopback ports; :meth:`stop` ends it (SIGTERM, then SIGKILL)."""

    process: subprocess.Popen[str]
    http_url: str  # http://127.0.0.1:port
    kafka: str  # 127.0.0.1:port
    log: list[str]
    drain: threading.Thread  # reads the process's output into ``log`` until it closes

    @classmethod
    def start(cls, workdir: Path) -> ServedBroker:
        """Start a broker on ``workdir/data``; returns once it logs where it listens. Raises RuntimeError
        (with the process stopped and its log) when it exits or does not get ready in time."""
        workdir.mkdir(parents=True, exist_ok=True)
        argv = [str(BIN / "tierlog"), "serve", "--data-dir", str(workdir / "data"), "--port", "0"]
        argv += ["--kafka-listener", "127.0.0.1:0"]
        process = subprocess.Popen(
            argv,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        assert process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        log: list[str] = []

        def drain() -> None:  # owned by the process: ends when its stdout closes
            assert process.stdout is not None
            for line in process.stdout:
                log.append(line)
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=drain, name="docs-broker-log", daemon=True)
        reader.start()
        http = kafka = None
        try:
            while http is None or kafka is None:
                line = lines.get(timeout=READY_TIMEOUT_S)
                if line is None:
                    raise RuntimeError("tierlog serve exited before it was ready")
                if found := re.match(r"\s*HTTP \(REST\)\s+(http://127\.0\.0\.1:\d+)", line):
                    http = found.group(1)
                if found := re.match(r"\s*Kafka\s+(127\.0\.0\.1:\d+)", line):
                    kafka = found.group(1)
        except (RuntimeError, queue.Empty) as err:
            stop_process(process)
            reader.join()
            process.stdout.close()
            raise RuntimeError(f"tierlog serve did not get ready: {err!r}\n{''.join(log)}") from None
        return cls(process, http, kafka, log, reader)

    def stop(self) -> None:
        """Stop the process and close its output. Idempotent."""
        stop_process(self.process)
        self.drain.join()
        if self.process.stdout is not None:
            self.process.stdout.close()


def stop_process(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process group, SIGKILL if it is still there after a grace period; reaps it."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL what is left of ``process``'s group (it leads its own session), then reap ``process``."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MILLIS = re.compile(r"\b1\d{12}\b")  # epoch milliseconds (2001..2286)


def normalised(text: str) -> str:
    """``text`` without whitespace, UUIDs and epoch-millisecond timestamps replaced by placeholders."""
    return "".join(_MILLIS.sub("<ms>", _UUID.sub("<uuid>", text)).split())


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is the ``expected`` output, both normalised; ``...`` in ``expected`` matches
    anything."""
    pattern = ".*?".join(re.escape(part) for part in normalised(expected).split("..."))
    return re.fullmatch(pattern, normalised(actual), re.DOTALL) is not None


@dataclass
class PageRun:
    """One page's blocks run in order in ``workdir``, against ``broker`` (None for a page without one)."""

    workdir: Path
    broker: ServedBroker | None
    background: list[subprocess.Popen[str]] = field(default_factory=list)
    last_output: str = ""
    left_out: list[str] = field(default_factory=list)  # blocks not run: a command they need is missing

    @property
    def state_file(self) -> Path:
        return self.workdir / ".docs-test-shell-state"

    def localised(self, text: str) -> str:
        """``text`` with the documented addresses pointing at this page's broker, and the venv's commands."""
        text = text.replace(".venv/bin/", f"{BIN}/")
        if self.broker is not None:
            http_port = self.broker.http_url.rsplit(":", 1)[1]
            kafka_port = self.broker.kafka.rsplit(":", 1)[1]
            for documented in DOCUMENTED_HTTP:
                text = text.replace(documented, f"127.0.0.1:{http_port}")
            for documented in DOCUMENTED_KAFKA:
                text = text.replace(documented, f"127.0.0.1:{kafka_port}")
        return text

    def documented(self, text: str) -> str:
        """``text`` with the broker's real addresses written back as the documented ones (for comparing)."""
        if self.broker is not None:
            text = text.replace(self.broker.http_url, "http://127.0.0.1:8082")
            text = text.replace(self.broker.kafka, "127.0.0.1:9092")
        return text

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("VIRTUAL_ENV", None)
        if self.broker is not None:
            env["TIERLOG_BOOTSTRAP_SERVER"] = self.broker.http_url
        return env

    def argv(self, block: Block) -> list[str]:
        code = self.localised(block.text)
        if block.language not in SHELL_LANGUAGES:
            return [str(BIN / "python"), "-c", code]
        if block.language == "console":  # the lines after a prompt are the commands
            code = "\n".join(line[2:] for line in code.splitlines() if line.startswith("$ "))
        state = self.state_file
        script = (
            f"[ -f {state} ] && . {state}\nset -e -o pipefail\n{code}\n"
            f"declare -p | grep -Ev '^declare -[a-zA-Z]*r' > {state}.all\n"
        )
        return ["bash", "-c", script]

    def run(self, block: Block) -> str:
        """Run ``block``; returns what it printed. Raises DocCommandFailed when it fails, times out, or (with
        ``output-in-comments``) prints something else than a comment after one of its commands says."""
        if block.annotation is None or not block.annotation.output_in_comments:
            return self.run_once(block)
        printed = []
        for commands, expected in comment_outputs(block.text):
            printed.append(self.run_once(replace(block, text=commands)))
            if expected is not None:
                self.expect(replace(block, text=expected))
        self.last_output = "".join(printed)
        return self.last_output

    def run_once(self, block: Block) -> str:
        """Run ``block`` in a process group of its own; whatever it left running is killed after it."""
        process = subprocess.Popen(
            self.argv(block),
            cwd=self.workdir,
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as err:
            raise DocCommandFailed(
                f"{block.where}: still running after {BLOCK_TIMEOUT_S} s (a command that does not end, or "
                f"one left in the background holding its output: annotate it background):\n{block.text}"
            ) from err
        finally:
            kill_group(process)
        done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        if done.returncode != 0:
            raise DocCommandFailed(
                f"{block.where}: exit status {done.returncode}\n--- block\n{self.localised(block.text)}"
                f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
            )
        if block.language in SHELL_LANGUAGES:
            self.keep_shell_state()
        self.last_output = done.stdout
        return done.stdout

    def keep_shell_state(self) -> None:
        """Keep the variables the block set for the page's next shell block (not bash's own)."""
        everything = self.state_file.with_name(self.state_file.name + ".all")
        kept = []
        for line in everything.read_text(encoding="utf-8").splitlines():
            found = re.match(r"declare -\S+ ([A-Za-z_]\w*)", line)
            if found is not None and not _BASH_OWN.match(found.group(1)):
                kept.append(line)
        self.state_file.write_text("\n".join(kept) + "\n", encoding="utf-8")

    def expect(self, block: Block) -> None:
        """Compare ``block`` (expected output) with what the command block before it printed."""
        actual = self.documented(self.last_output)
        if not matches(block.text, actual):
            raise DocCommandFailed(
                f"{block.where}: the command before printed something else\n--- expected\n{block.text}"
                f"--- printed (ports as documented)\n{actual}"
            )

    def start_background(self, block: Block) -> None:
        self.background.append(
            subprocess.Popen(
                self.argv(block),
                cwd=self.workdir,
                env=self.environment(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        )

    def close(self) -> None:
        while self.background:
            stop_process(self.background.pop())


@contextmanager
def page_run(workdir: Path, broker: ServedBroker | None) -> Iterator[PageRun]:
    """A :class:`PageRun` whose background commands are stopped on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = PageRun(workdir, broker)
    try:
        yield run
    finally:
        run.close()


def run_page(blocks: list[Block], run: PageRun) -> list[str]:
    """Run a page's blocks in order; returns the ``where`` of every block that ran or was compared."""
    done = []
    missing = False
    for block in blocks:
        needs = block.annotation.needs if block.annotation is not None else None
        if block.kind in ("run", "background"):
            missing = needs is not None and shutil.which(needs, path=run.environment()["PATH"]) is None
        if missing and block.kind in ("run", "background", "output"):
            run.left_out.append(f"{block.where} (needs {needs})" if needs else block.where)
            continue
        if block.kind == "run":
            run.run(block)
        elif block.kind == "background":
            run.start_background(block)
        elif block.kind == "output":
            run.expect(block)
        else:
            continue
        done.append(block.where)
    return done
