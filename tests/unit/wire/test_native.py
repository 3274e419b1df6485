"""The native protocol's names are defined once, in tierlog.wire.native: no other module of the broker, the
storage engine or the client spells the content type, a header name or a route prefix again."""

from __future__ import annotations

import ast
from pathlib import Path

from tierlog.wire import native

ROOT = Path(__file__).resolve().parents[3]
NAMES = {
    native.BATCHES_TYPE,
    native.HIGH_WATERMARK,
    native.LOG_START_OFFSET,
    native.LOG_END_OFFSET,
    native.LOCAL_LOG_START_OFFSET,
    native.LEADER_EPOCH,
}
# The OpenAPI document of the native routes spells each path out: it is the published description.
SPELLS_PATHS = {"service/native_api/openapi.py"}


def string_literals(path: Path) -> list[str]:
    """The string constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_second_definition_of_a_native_name() -> None:
    found = []
    paths = [*(ROOT / "tierlog").glob("*.py")]
    for folder in ("service", "client", "tiering", "tierlog/wire"):
        paths.extend((ROOT / folder).rglob("*.py"))
    assert len(paths) > 200
    for path in sorted(paths):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "tierlog/wire/native.py":
            continue
        for text in string_literals(path):
            if text in NAMES or (text.startswith(native.PREFIX) and relative not in SPELLS_PATHS):
                found.append(f"{relative}: {text!r}")
    assert found == []


def test_the_check_sees_literals_but_not_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text('"""Tierlog-High-Watermark"""\nH = "Tierlog-High-Watermark"\nP = f"/native/v1/{x}"\n')
    assert string_literals(sample) == ["Tierlog-High-Watermark", "/native/v1/"]


def test_paths_escape_names_as_one_segment() -> None:
    assert native.topic_path("a/b c") == "/native/v1/topics/a%2Fb%20c"
    assert native.partition_path("t", 3) == "/native/v1/topics/t/partitions/3"
    assert native.group_path("g/1") == "/native/v1/groups/g%2F1"
    assert native.replica_partition_path("t.x", 0) == "/native/v1/replication/topics/t.x/partitions/0"
    assert native.PARTITION_ROUTE.format(topic="t", partition=3) == native.partition_path("t", 3)
