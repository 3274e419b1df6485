"""Install the third-party REST Proxy clients the compat suite drives, outside the project's venv.

* npm ``kafka-rest`` goes into ``~/.cache/tierlog/compat-node/node_modules`` with ``npm ci`` from the
  ``package.json`` and ``package-lock.json`` committed in ``tests/compat/node/``.
* PyPI ``kafka-rest-client`` and ``kafka-rest`` go into the venv ``~/.cache/tierlog/compat-venv``, created by
  the interpreter running this module, with ``pip install --no-deps -r tests/compat/python/requirements.txt``
  (every distribution pinned there, dependencies included; see that file for why ``--no-deps``).

Each install is idempotent: a stamp file in the target holds a digest of what it was built from (the pin
files, the interpreter or Node version); when it matches, nothing runs, so after the first time this costs a
file read. Work is serialised with a lock file, so concurrent test sessions do not install twice. Each
install is bounded by ``INSTALL_TIMEOUT_S``.

When the registry cannot be reached, :class:`RegistryUnreachable` says so in one line and the tests skip.
``TIERLOG_COMPAT_CACHE`` moves the cache directory. ``python -m tests.compat.install`` installs up front.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMPAT_DIR",
    "INSTALL_TIMEOUT_S",
    "InstallError",
    "NodeEnv",
    "PythonEnv",
    "RegistryUnreachable",
    "cache_dir",
    "install_node",
    "install_python",
]

COMPAT_DIR = Path(__file__).resolve().parent
NODE_DIR = COMPAT_DIR / "node"
PYTHON_DIR = COMPAT_DIR / "python"
REQUIREMENTS = PYTHON_DIR / "requirements.txt"
# Bound on one install (all its commands; cached runs run none): under pytest-timeout's 300 s per test, which
# counts the setup of the first test that asks for the install.
INSTALL_TIMEOUT_S = 240.0
PROBE_TIMEOUT_S = 10.0


class InstallError(RuntimeError):
    """An install command failed although its registry answered; the message carries its output."""


class RegistryUnreachable(RuntimeError):
    """The package registry an install needs cannot be reached (offline machine, no proxy)."""


@dataclass(frozen=True)
class NodeEnv:
    node: str  # the node executable
    node_modules: Path  # for NODE_PATH


@dataclass(frozen=True)
class PythonEnv:
    python: Path  # the compat venv's interpreter


def cache_dir() -> Path:
    override = os.environ.get("TIERLOG_COMPAT_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "tierlog"


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _probe(url: str) -> None:
    """Raise RegistryUnreachable unless ``url`` answers at all (any HTTP status counts as reachable)."""
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
            pass
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as err:
        raise RegistryUnreachable(f"{url} is unreachable ({err})") from None


def _run(argv: list[str], *, cwd: Path | None = None, deadline: float | None = None) -> str:
    """Run ``argv`` to completion, by ``deadline`` (a ``time.monotonic()`` value) or within the install
    timeout; returns its stdout. Raises InstallError when it fails or runs out of time."""
    timeout = INSTALL_TIMEOUT_S if deadline is None else max(deadline - time.monotonic(), 1.0)
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise InstallError(f"{' '.join(argv)} did not finish in {timeout:.0f} s") from err
    if done.returncode != 0:
        raise InstallError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _npm_registry(npm: str) -> str:
    try:
        registry = _run([npm, "config", "get", "registry"]).strip()
    except InstallError:
        registry = ""
    return registry or "https://registry.npmjs.org/"


def install_node() -> NodeEnv:
    """``npm ci`` the committed lockfile into the cache; returns where the modules are.

    Raises RegistryUnreachable (offline), InstallError (node/npm missing, npm failed).
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise InstallError("node and npm must be on PATH for the npm kafka-rest tests")
    target = cache_dir() / "compat-node"
    manifest, lockfile = (
        (NODE_DIR / "package.json").read_bytes(),
        (NODE_DIR / "package-lock.json").read_bytes(),
    )
    version = _run([node, "--version"]).strip()
    want = _digest(manifest, lockfile, version.encode())
    stamp = target / ".installed"
    installed = target / "node_modules" / "kafka-rest" / "package.json"
    with _locked(cache_dir() / "compat-node.lock"):
        if not (stamp.exists() and stamp.read_text() == want and installed.exists()):
            deadline = time.monotonic() + INSTALL_TIMEOUT_S
            _probe(_npm_registry(npm).rstrip("/") + "/kafka-rest")
            stamp.unlink(missing_ok=True)
            target.mkdir(parents=True, exist_ok=True)
            (target / "package.json").write_bytes(manifest)
            (target / "package-lock.json").write_bytes(lockfile)
            ci = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
            _run(ci, cwd=target, deadline=deadline)
            stamp.write_text(want)
    return NodeEnv(node, target / "node_modules")


def _pip_index() -> str:
    """The index pip will use: ``PIP_INDEX_URL`` or PyPI (pip's configuration files are not consulted)."""
    return os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"


def install_python() -> PythonEnv:
    """Create the compat venv with this interpreter and install the pinned requirements into it.

    Raises RegistryUnreachable (offline), InstallError (venv or pip failed).
    """
    target = cache_dir() / "compat-venv"
    python = target / "bin" / "python"
    want = _digest(REQUIREMENTS.read_bytes(), sys.version.encode(), sys.base_prefix.encode())
    stamp = target / ".installed"
    with _locked(cache_dir() / "compat-venv.lock"):
        if not (stamp.exists() and stamp.read_text() == want and python.exists()):
            deadline = time.monotonic() + INSTALL_TIMEOUT_S
            _probe(_pip_index().rstrip("/") + "/kafka-rest-client/")
            if target.exists():
                shutil.rmtree(target)
            _run([sys.executable, "-m", "venv", str(target)], deadline=deadline)
            pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            _run([*pip, "--no-deps", "-r", str(REQUIREMENTS)], deadline=deadline)
            stamp.write_text(want)
    return PythonEnv(python)


def main() -> int:
    for name, install in (("npm kafka-rest", install_node), ("PyPI clients", install_python)):
        try:
            print(f"{name}: {install()}")
        except RegistryUnreachable as err:
            print(f"{name}: skipped, {err}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
