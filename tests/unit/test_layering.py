"""The dependency direction of DESIGN.md, checked on every test run.

``service -> tiering`` and ``client -> tiering``; nothing imports ``service``; the codec modules import
nothing async or vendor-specific; the wire contract (``tierlog/wire``) imports no layer and nothing async.
``make lint`` checks the same contracts with import-linter; this test keeps them enforced in CI too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in python_files(package):
        for module in imported_modules(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    return bad


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("tiering", ("tierlog.service", "tierlog.client", "service", "client")),
        ("client", ("tierlog.service", "service")),
        ("tiering/codec", ("asyncio", "aiohttp", "aiobotocore", "botocore", "pyspark")),
        (
            "tierlog/wire",
            (
                *("tierlog.service", "tierlog.tiering", "tierlog.client", "tierlog.cli", "tierlog.spark"),
                *("service", "tiering", "client", "asyncio", "aiohttp"),
            ),
        ),
    ],
)
def test_layering(package: str, forbidden: tuple[str, ...]) -> None:
    assert python_files(package), f"{package} has no modules to check"
    assert offenders(package, forbidden) == []


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import service.app\nfrom client import x\nfrom . import y\n", encoding="utf-8")
    assert imported_modules(sample) == {"service.app", "client"}
