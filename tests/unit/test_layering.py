"""The dependency direction of DESIGN.md, checked on every test run.

``service -> tiering`` and ``client -> tiering``; nothing imports ``service``; the codec modules import
nothing async or vendor-specific; the wire contract (``tierlog/wire``) imports no layer and nothing async.
Nothing anywhere imports a folder by its bare name (``service.x``, ``tiering.x``, ``client.x``): with the
repository root on ``sys.path`` that would load a second copy of every class beside ``tierlog.service.x``
(two ``UnknownTopicError`` classes that ``except`` cannot tell apart), so it is refused everywhere.
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


BARE = ("service", "tiering", "client")
# Every tree whose Python code runs against the installed package (tierlog/'s symlinks are its folders).
CHECKED_TREES = ("service", "tiering", "client", "tests", "infra", "localstack")


def bare_imports(path: Path) -> list[str]:
    return sorted(
        module
        for module in imported_modules(path)
        if any(module == b or module.startswith(b + ".") for b in BARE)
    )


def test_nothing_imports_a_folder_by_its_bare_name() -> None:
    files = [p for tree in CHECKED_TREES for p in python_files(tree)]
    files += [p for p in (ROOT / "tierlog").glob("*.py")]
    files += sorted((ROOT / "tierlog" / "wire").rglob("*.py"))
    assert len(files) > 300, "the guard found too few modules: is ROOT right?"
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in files for m in bare_imports(p)]
    assert bad == [], "import these as tierlog.service / tierlog.tiering / tierlog.client:\n" + "\n".join(bad)


def test_the_bare_import_guard_catches_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import service\nimport tiering.log\nfrom client.producer import Producer\n"
        "import tierlog.service.app\nfrom tierlog.client import Producer\nimport clientele\n",
        encoding="utf-8",
    )
    assert bare_imports(sample) == ["client.producer", "service", "tiering.log"]
