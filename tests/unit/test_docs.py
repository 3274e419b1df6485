"""docs/configuration.md documents every broker setting (its tables generated from the settings table) and
every topic config, with its flag; the OpenAPI
document defines every schema it refers to; the docs use only import paths that exist; every design note
has a status and a date."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from tierlog.service.openapi import build_document, render
from tierlog.service.settings.config import SETTINGS_TABLE, flag_name
from tierlog.service.settings.doc import render_configuration
from tierlog.service.topics.configs import TOPIC_CONFIGS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
# The docs users read; 0007 and 0014 name old paths on purpose (they record renames).
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RENAME_NOTES = (
    ROOT / "docs" / "design" / "0007-one-import-namespace.md",
    ROOT / "docs" / "design" / "0014-package-map.md",
)
OLD_NAMES = re.compile(
    "|".join(
        (
            r"\bfrom (service|tiering|client)(\.\w+)* import\b",
            r"^\s*import (service|tiering|client)\b",
            r"\bpython -m (service|client)\b",
        )
    )
)


def test_every_setting_and_config_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [f"`{name}`" for name in SETTINGS_TABLE if f"`{name}`" not in text]
    process = [name for name, spec in SETTINGS_TABLE.items() if spec.topic_config is None]
    missing += [flag_name(name) for name in process if f"`{flag_name(name)}`" not in text]
    missing += [f"`{name}`" for name in TOPIC_CONFIGS if f"| `{name}` |" not in text]
    assert missing == []


def test_the_settings_tables_are_the_ones_the_settings_table_generates() -> None:
    """After changing a setting's row: ``python -m tierlog.service.settings.doc docs/configuration.md``."""
    text = DOC.read_text(encoding="utf-8")
    assert render_configuration(text) == text


def test_every_openapi_reference_resolves() -> None:
    document = build_document()
    referenced = set(re.findall(r"#/components/schemas/(\w+)", render()))
    assert referenced
    assert referenced - set(document["components"]["schemas"]) == set()


def test_docs_use_no_pre_tierlog_import_paths() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in USER_DOCS
        if path not in RENAME_NOTES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OLD_NAMES.search(line)
    ]
    assert found == []


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module or an attribute of one (true for a name that needs a missing
    extra, such as pyspark: it cannot be checked here)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if err.name is not None and not err.name.startswith("tierlog"):
                return True
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_tierlog_name_in_the_docs_exists() -> None:
    module_name = re.compile(r"\btierlog\.(?:client|service|tiering|spark|cli)\b(?:\.[A-Za-z_]\w*)*")
    names = set()
    for path in USER_DOCS:
        names.update(module_name.findall(path.read_text(encoding="utf-8")))
    assert names
    assert sorted(n for n in names if not resolves(n)) == []


def test_every_design_note_has_a_status_and_a_date_under_its_title() -> None:
    notes = sorted((ROOT / "docs" / "design").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert notes
    status = re.compile(r"Status: (proposed|accepted|rejected|superseded by \S+) · \d{4}-\d{2}-\d{2}$")
    bad = [p.name for p in notes if not status.match(p.read_text(encoding="utf-8").splitlines()[2])]
    assert bad == []


def test_every_source_file_the_docs_name_exists() -> None:
    source_path = re.compile(
        r"`((?:service|tiering|client|tierlog|infra|tests|localstack)/[\w./-]+\.(?:py|sh))`"
    )
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in USER_DOCS
        if path not in RENAME_NOTES
        for name in source_path.findall(path.read_text(encoding="utf-8"))
        if not (ROOT / name).exists()
    ]
    assert missing == []
