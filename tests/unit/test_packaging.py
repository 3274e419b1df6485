"""The wheel installs one top-level import package, ``tierlog``, and nothing that collides with others.

The wheel is built without network (``--no-build-isolation``, with the ``setuptools`` and ``wheel`` of
the test extra) from a copy of the source tree, so the test never writes ``build/`` or ``*.egg-info``
into the checkout; it carries the compiled codec that setup.py builds. Then a throwaway venv (no pip
in it; this venv's pip installs into it with ``--python``) gets two stand-ins for generic PyPI
distributions that own the top-level packages ``service`` and ``client``, and tierlog's wheel next to
them, all with ``--no-deps`` and ``--no-index``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.machinery import EXTENSION_SUFFIXES
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and a venv: several seconds

ROOT = Path(__file__).resolve().parents[2]
# Folder in the repository -> where package-dir puts it in the wheel.
MAPPED = {
    "tierlog": "tierlog",
    "service": "tierlog/service",
    "tiering": "tierlog/tiering",
    "client": "tierlog/client",
}
VERSION = version("tierlog")
# the compiled codec, the REST records renderer and the producer's send lane (setup.py builds them)
EXTENSIONS = (
    f"tierlog/tiering/codec/_speedups{EXTENSION_SUFFIXES[0]}",
    f"tierlog/service/rest_v2/_restjson{EXTENSION_SUFFIXES[0]}",
    f"tierlog/client/_sendlane{EXTENSION_SUFFIXES[0]}",
)
DIST_INFO = f"tierlog-{VERSION}.dist-info"


def run(*args: str | Path, cwd: Path | None = None) -> str:
    """Run a command (with no PYTHONPATH), answer its stdout; it must succeed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def pip(*args: str | Path) -> str:
    return run(sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args)


@dataclass
class Wheel:
    path: Path
    names: list[str]
    zf: zipfile.ZipFile

    def text(self, name: str) -> str:
        return self.zf.read(name).decode("utf-8")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wheel]:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in MAPPED:
        # symlinks=True keeps tierlog/service -> ../service a link, as in a fresh clone
        shutil.copytree(
            ROOT / folder,
            src / folder,
            symlinks=True,
            # the editable install's in-place extension: the wheel build must compile its own
            ignore=shutil.ignore_patterns("__pycache__", "*.so"),
        )
    out = tmp_path_factory.mktemp("wheels")
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", out, src)
    (path,) = out.glob("tierlog-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield Wheel(path, zf.namelist(), zf)


def test_only_tierlog_is_installed_at_the_top_level(wheel: Wheel) -> None:
    assert {n.split("/")[0] for n in wheel.names} == {"tierlog", DIST_INFO}
    if f"{DIST_INFO}/top_level.txt" in wheel.names:
        assert wheel.text(f"{DIST_INFO}/top_level.txt").split() == ["tierlog"]
    recorded = [line.rsplit(",", 2)[0] for line in wheel.text(f"{DIST_INFO}/RECORD").splitlines() if line]
    assert sorted(recorded) == sorted(wheel.names)
    assert [p for p in recorded if not p.startswith(("tierlog/", f"{DIST_INFO}/"))] == []


def test_the_folders_are_mapped_into_tierlog_as_real_files_once_each(wheel: Wheel) -> None:
    for name in (
        "tierlog/service/app.py",
        "tierlog/tiering/codec/batch.py",
        "tierlog/client/producer.py",
        "tierlog/wire/errors.py",
    ):
        assert name in wheel.names
    assert "tierlog/spark.py" in wheel.names and "tierlog/cli.py" in wheel.names
    assert len(set(wheel.names)) == len(wheel.names)
    links = [i.filename for i in wheel.zf.infolist() if stat.S_ISLNK(i.external_attr >> 16)]
    assert links == []
    # Every module of the source tree is in the wheel, byte for byte, under its mapped name, and nothing else
    # (a subpackage without __init__.py would silently drop out; a symlink followed twice would double up).
    expected = {}
    for folder, target in MAPPED.items():
        for path in [*(ROOT / folder).rglob("*.py"), *(ROOT / folder).rglob("*.pyi")]:
            if "__pycache__" in path.parts or any(p.is_symlink() for p in path.relative_to(ROOT).parents):
                continue
            expected[f"{target}/{path.relative_to(ROOT / folder).as_posix()}"] = path
    # PEP 561: the package ships its type hints.
    expected["tierlog/py.typed"] = ROOT / "tierlog" / "py.typed"
    # The compiled extensions (setup.py builds tiering/codec/_speedups.c, service/rest_v2/_restjson.c and
    # client/_sendlane.c): gcc is on every machine this runs on. A compiled module's type stub (.pyi) ships
    # next to it.
    assert all(name in wheel.names for name in EXTENSIONS)
    ours = sorted(n for n in wheel.names if n.startswith("tierlog/") and n not in EXTENSIONS)
    assert ours == sorted(expected)
    for name, path in expected.items():
        assert wheel.zf.read(name) == path.read_bytes(), name


def test_metadata_declares_the_spark_extra_and_the_console_script(wheel: Wheel) -> None:
    metadata = wheel.text(f"{DIST_INFO}/METADATA").splitlines()
    assert "Provides-Extra: spark" in metadata
    assert any(line.startswith("Requires-Dist: pyspark") and 'extra == "spark"' in line for line in metadata)
    entry_points = wheel.text(f"{DIST_INFO}/entry_points.txt").splitlines()
    assert entry_points[entry_points.index("[console_scripts]") + 1] == "tierlog = tierlog.cli:main"


def tiny_wheel(out: Path, dist: str, package: str, source: str) -> Path:
    """A wheel of distribution ``dist`` owning the top-level package ``package``, written by hand."""
    files = {f"{package}/__init__.py": source.encode()}
    info = f"{dist}-1.0.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tierlog-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/top_level.txt"] = f"{package}\n".encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / f"{dist}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_installs_next_to_generic_service_and_client_packages(wheel: Wheel, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip())
    others = [
        tiny_wheel(tmp_path, "service", "service", "class Service:\n    owner = 'service'\n"),
        tiny_wheel(tmp_path, "client", "client", "class Producer:\n    owner = 'client'\n"),
    ]
    pip("--python", python, "install", "-q", "--no-deps", "--no-index", *others)
    before = set(p.name for p in site.iterdir())
    pip("--python", python, "install", "-q", "--no-deps", "--no-index", wheel.path)
    assert set(p.name for p in site.iterdir()) - before == {"tierlog", DIST_INFO}

    # cwd is not the checkout, whose service/ and client/ folders would shadow the installed packages
    check_others = (
        "from service import Service; from client import Producer; print(Service.owner, Producer.owner)"
    )
    assert run(python, "-c", check_others, cwd=tmp_path).split() == ["service", "client"]
    # Importing the top package needs none of tierlog's dependencies (none are installed here).
    assert run(python, "-c", "import tierlog; print(tierlog.__version__)", cwd=tmp_path).strip() == VERSION
    assert run(python, "-m", "tierlog", "--version", cwd=tmp_path).strip() == f"tierlog {VERSION}"
    assert run(venv / "bin" / "tierlog", "--version", cwd=tmp_path).strip() == f"tierlog {VERSION}"

    pip("--python", python, "uninstall", "-y", "-q", "tierlog")
    assert run(python, "-c", check_others, cwd=tmp_path).split() == ["service", "client"]
    assert {"tierlog", DIST_INFO} & set(p.name for p in site.iterdir()) == set()
