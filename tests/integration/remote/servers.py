"""Real S3 server processes for the object-store contract suite: moto_server always, LocalStack if it can run.

Each server is a subprocess bound to 127.0.0.1 on a free port, waited for by polling its HTTP port with a
bounded deadline (readiness, not an assertion), and terminated and waited on at teardown.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Variables that would point the tests at some other endpoint or account.
AWS_UNSET = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE")

LOCALSTACK_HINT = (
    "`make test` installs it with localstack/setup-venv.sh; or point TIERLOG_LOCALSTACK_PYTHON at a "
    "Python >= 3.12 that has localstack-core installed"
)


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server: where it listens and what it allows."""

    name: str
    endpoint_url: str
    min_part_size: int  # smallest non-final multipart part the server accepts


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, deadline_s: float) -> None:
    """Poll ``url`` until it answers any HTTP status, the process dies, or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered: the server is up
        except OSError:
            time.sleep(0.1)  # readiness polling only
    raise RuntimeError(f"server at {url} not ready within {deadline_s}s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def server_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AWS_UNSET}
    env.update(AWS_TEST_ENV)
    env.update(extra)
    return env


@contextlib.contextmanager
def run_moto(
    workdir: Path, *, atomic_puts: bool = True, env: Mapping[str, str] | None = None
) -> Iterator[S3Server]:
    """Start this interpreter's ``moto_server`` and stop it on exit. With ``atomic_puts`` (the tests) its
    object writes are made atomic as S3's are (``moto_atomic.py``); the benchmarks run moto as it is.
    ``env`` adds moto settings (``INITIAL_NO_AUTH_ACTION_COUNT=0`` makes it check credentials)."""
    if any(importlib.util.find_spec(name) is None for name in ("moto", "flask", "flask_cors")):
        raise RuntimeError("moto_server is not installed: pip install 'moto[server]'")
    # -P: the launcher's directory is not put on sys.path, so no test module can shadow one moto imports
    command = [sys.executable, "-P"]
    command += [str(Path(__file__).with_name("moto_atomic.py"))] if atomic_puts else ["-m", "moto.server"]
    min_part = 1024
    for attempt in range(3):  # a free port can be taken by someone else before moto binds it
        port = free_port()
        log = workdir / f"moto-{attempt}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*command, "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env({"S3_UPLOAD_PART_MIN_SIZE": str(min_part), **(env or {})}),
                cwd=workdir,
            )
        try:
            _wait_http(f"http://127.0.0.1:{port}/moto-api/", proc, log, deadline_s=30)
        except RuntimeError:
            exited_by_itself = proc.poll() is not None  # e.g. the port was taken meanwhile
            _stop(proc)
            if exited_by_itself and attempt < 2:
                continue
            raise
        if proc.poll() is not None:  # something else answered on that port
            continue
        break
    else:
        raise RuntimeError("could not start moto_server on a free port")
    try:
        yield S3Server("moto", f"http://127.0.0.1:{port}", min_part)
    finally:
        _stop(proc)


def _python_candidates() -> list[str]:
    explicit = os.environ.get("TIERLOG_LOCALSTACK_PYTHON")
    if explicit:
        return [explicit]
    venv = Path(os.environ.get("TIERLOG_LOCALSTACK_VENV", Path.home() / ".cache/tierlog/localstack-venv"))
    found = [str(venv / "bin" / "python")]
    # Where localstack/setup-venv.sh looks for an interpreter: PATH, then pyenv's versions.
    for name in ("python3.13", "python3.12", "python3.14"):
        path = shutil.which(name)
        if path:
            found.append(path)
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found += sorted(str(p) for p in pyenv.glob("3.1[2-9].*/bin/python3"))
    return found


def find_localstack_python() -> tuple[str | None, str]:
    """An interpreter that can run LocalStack, or ``None`` and the reason why not."""
    versions_seen = []
    for candidate in _python_candidates():
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode != 0:
            continue  # e.g. a pyenv shim for a version that is not activated
        version = probe.stdout.strip()
        if tuple(int(p) for p in version.split(".")) < (3, 12):
            continue
        versions_seen.append(f"{candidate} ({version})")
        check = subprocess.run(
            [candidate, "-c", "import localstack.aws.components, cbor2"],
            capture_output=True,
            timeout=120,
        )
        if check.returncode == 0:
            return candidate, ""
    if not versions_seen:
        return None, f"LocalStack needs Python >= 3.12; none found ({LOCALSTACK_HINT})"
    return (
        None,
        f"found {', '.join(versions_seen)} but no working localstack install in it ({LOCALSTACK_HINT})",
    )


OPENSSL_SELF_SIGNED = (
    "openssl",
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "30",
    "-subj",
    "/CN=localhost",
)


def _self_signed_pem(workdir: Path) -> Path:
    """A key + certificate PEM made with openssl, so LocalStack downloads no certificate."""
    key, cert, pem = workdir / "key.pem", workdir / "cert.pem", workdir / "server.test.pem"
    subprocess.run(
        [*OPENSSL_SELF_SIGNED, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    pem.write_bytes(key.read_bytes() + cert.read_bytes())
    return pem


@contextlib.contextmanager
def run_localstack(python: str, workdir: Path) -> Iterator[S3Server]:
    """Start LocalStack's S3 as a host process with ``python`` and stop it on exit."""
    port = free_port()
    log = workdir / "localstack.log"
    data = workdir / "data"
    data.mkdir()
    env = server_env(
        {
            "SERVICES": "s3",
            "GATEWAY_SERVER": "hypercorn",
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            "DNS_ADDRESS": "0",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "CUSTOM_SSL_CERT_PATH": str(_self_signed_pem(workdir)),
            "LOCALSTACK_VOLUME_DIR": str(data),
            "FILESYSTEM_ROOT": str(data),
            "DISABLE_EVENTS": "1",
            "LOCALSTACK_TELEMETRY": "0",
            "XDG_CACHE_HOME": str(workdir / "cache"),
        }
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "localstack.runtime.main"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
    try:
        _wait_http(f"http://127.0.0.1:{port}/_localstack/health", proc, log, deadline_s=120)
        yield S3Server("localstack", f"http://127.0.0.1:{port}", 5 * 1024 * 1024)
    finally:
        _stop(proc)
