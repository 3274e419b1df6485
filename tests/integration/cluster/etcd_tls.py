"""A real etcd process that speaks TLS only and requires client certificates, for tests of the etcd store and
of brokers over TLS: ``TlsEtcdServer(base_dir, pki).start()``.

:class:`EtcdPki` issues (with ``trustme``) a CA, etcd's server certificate for ``127.0.0.1`` and a client
certificate, written as PEM files under one directory. The server runs the venv's ``etcd`` binary (see
:func:`tests.integration.cluster.etcd.etcd_binary`) with ``--client-cert-auth``, https client URLs on a free
loopback port, and waits (bounded) until ``/health`` answers over TLS with the client certificate.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import trustme

from tests.integration.cluster.etcd import START_TIMEOUT_S, STOP_TIMEOUT_S, EtcdStartError, etcd_binary

__all__ = ["EtcdPki", "TlsEtcdServer"]


@dataclass(frozen=True)
class EtcdPki:
    """PEM files: ``ca`` (the CA etcd and its clients trust), etcd's ``server_cert``/``server_key`` (for
    127.0.0.1), a ``client_cert``/``client_key`` signed by the same CA, and ``other_ca`` (a CA that signed
    nothing here: trusting only it must fail)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    @classmethod
    def issue(cls, directory: Path) -> EtcdPki:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("broker.tierlog.test", common_name="tierlog-broker")  # Go refuses an empty SAN
        pki = cls(
            ca=directory / "ca.pem",
            server_cert=directory / "etcd.pem",
            server_key=directory / "etcd-key.pem",
            client_cert=directory / "client.pem",
            client_key=directory / "client-key.pem",
            other_ca=directory / "other-ca.pem",
        )
        ca.cert_pem.write_to_path(str(pki.ca))
        server.cert_chain_pems[0].write_to_path(str(pki.server_cert))
        server.private_key_pem.write_to_path(str(pki.server_key))
        client.cert_chain_pems[0].write_to_path(str(pki.client_cert))
        client.private_key_pem.write_to_path(str(pki.client_key))
        trustme.CA().cert_pem.write_to_path(str(pki.other_ca))
        return pki


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TlsEtcdServer:
    """One etcd member on loopback with TLS and client-certificate authentication. Also a context manager
    (``start``/``stop``). Not thread-safe."""

    def __init__(self, base_dir: Path, pki: EtcdPki) -> None:
        self.base_dir = base_dir
        self.pki = pki
        self.log_path = base_dir / "etcd.log"
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"https://{self.endpoint}"

    def uri(self, prefix: str) -> str:
        """The broker's ``metadata.uri`` (the scheme stays ``etcd``; TLS comes from ``metadata.ssl.*``)."""
        return f"etcd://{self.endpoint}/{prefix}"

    def start(self) -> None:
        """Start and wait until ``/health`` answers over TLS. Raises EtcdStartError."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        command = [
            str(etcd_binary()),
            "--name=tierlog-tls-test",
            f"--data-dir={self.base_dir / 'data'}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=tierlog-tls-test={peer_url}",
            "--initial-cluster-state=new",
            f"--cert-file={self.pki.server_cert}",
            f"--key-file={self.pki.server_key}",
            f"--trusted-ca-file={self.pki.ca}",
            "--client-cert-auth",
            "--log-level=warn",
            "--unsafe-no-fsync",
        ]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._wait_healthy()

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after STOP_TIMEOUT_S). Idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> TlsEtcdServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                raise EtcdStartError(f"etcd exited while starting; see {self.log_path}:\n{self._log_tail()}")
            try:
                with opener.open(f"{self.client_url}/health", timeout=1.0) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
                    last_error = "health is not true"
            except (OSError, ValueError) as err:
                last_error = repr(err)
            time.sleep(0.05)  # polling a process we do not control the start of: there is no event
        self.stop()
        raise EtcdStartError(
            f"etcd (TLS) did not become healthy within {START_TIMEOUT_S} s ({last_error}); see "
            f"{self.log_path}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
