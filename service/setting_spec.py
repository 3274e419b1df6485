"""How one broker setting is declared: its :class:`SettingSpec` and the parsers the setting tables share.

:mod:`tierlog.service.settings_table` declares the broker's settings with these and
:mod:`tierlog.service.security.settings` the security settings; every parser raises ``ValueError`` with the
reason and nothing converts its result again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar
from urllib.parse import urlsplit

__all__ = ["SettingSpec", "bool_value", "int_range", "parse_url", "path_value", "text_value"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SettingSpec(Generic[T]):
    """One broker setting. ``parse`` turns its text into the typed value :class:`Settings` holds (raising
    ``ValueError`` with the reason); nothing converts that value again."""

    name: str
    default: str | None
    doc: str
    parse: Callable[[str], T]
    topic_config: str | None = None


def text_value(raw: str) -> str:
    return raw


def int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError("not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def bool_value(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def parse_url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return raw.strip().rstrip("/")


def path_value(raw: str) -> Path:
    return Path(raw).absolute()
