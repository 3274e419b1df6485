"""docs/configuration.md documents every broker setting and every topic config, with its flag."""

from __future__ import annotations

from pathlib import Path

from service.config import SETTINGS_TABLE, flag_name
from service.topic_configs import TOPIC_CONFIGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_and_config_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [f"`{name}`" for name in SETTINGS_TABLE if f"`{name}`" not in text]
    missing += [
        flag_name(name) for name in SETTINGS_TABLE if name.count(".") < 3 and flag_name(name) not in text
    ]
    missing += [f"`{name}`" for name in TOPIC_CONFIGS if f"| `{name}` |" not in text]
    assert missing == []
