"""docs/configuration.md documents every broker setting and every topic config, with its flag; the OpenAPI
document defines every schema it refers to."""

from __future__ import annotations

import re
from pathlib import Path

from tierlog.service.config import SETTINGS_TABLE, flag_name
from tierlog.service.openapi import build_document, render
from tierlog.service.topic_configs import TOPIC_CONFIGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_and_config_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [f"`{name}`" for name in SETTINGS_TABLE if f"`{name}`" not in text]
    process = [name for name, spec in SETTINGS_TABLE.items() if spec.topic_config is None]
    missing += [flag_name(name) for name in process if f"`{flag_name(name)}`" not in text]
    missing += [f"`{name}`" for name in TOPIC_CONFIGS if f"| `{name}` |" not in text]
    assert missing == []


def test_every_openapi_reference_resolves() -> None:
    document = build_document()
    referenced = set(re.findall(r"#/components/schemas/(\w+)", render()))
    assert referenced
    assert referenced - set(document["components"]["schemas"]) == set()
