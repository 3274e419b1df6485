"""How one broker setting is declared: its :class:`SettingSpec` and the parsers the setting tables share.

One row per setting gives everything about it: the config-file key and ``TIERLOG_*`` environment variable
(from its dotted name), the flag, the default, the parser that validates it, the doc line (the row of
``docs/configuration.md`` and the ``--help`` line) and the attribute of
:class:`~tierlog.service.settings.config.Settings` (or
:class:`~tierlog.service.security.settings.SecuritySettings`)
it fills. :mod:`tierlog.service.settings.table` declares the broker's settings with these and
:mod:`tierlog.service.security.settings` the security settings; every parser raises ``ValueError`` with the
reason and nothing converts its result again. :class:`ParsedSettings` holds the parsed values while the
cross-field rules (:mod:`tierlog.service.settings.rules`) look at them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, cast
from urllib.parse import urlsplit

__all__ = [
    "ENV_PREFIX",
    "ParsedSettings",
    "SettingSpec",
    "SettingsError",
    "bool_value",
    "env_name",
    "flag_name",
    "host_port_or_none",
    "int_range",
    "optional_text",
    "parse_url",
    "path_value",
    "text_value",
]

T = TypeVar("T")

ENV_PREFIX = "TIERLOG_"


class SettingsError(Exception):
    """A setting is unknown or has an invalid value; the message is one line naming it and its source."""


def flag_name(name: str) -> str:
    """``log.segment.bytes`` -> ``--log-segment-bytes``. Pure."""
    return "--" + name.replace(".", "-")


def env_name(name: str) -> str:
    """``log.segment.bytes`` -> ``TIERLOG_LOG_SEGMENT_BYTES``. Pure."""
    return ENV_PREFIX + name.replace(".", "_").upper()


@dataclass(frozen=True, slots=True)
class SettingSpec(Generic[T]):
    """One broker setting. ``parse`` turns its text into the typed value the settings object holds (raising
    ``ValueError`` with the reason); nothing converts that value again.

    ``default`` is the text a flag would give (None: unset); ``doc`` is the Markdown of its row in
    ``docs/configuration.md`` (``--help`` shows it without backticks); ``shown_default`` replaces the default
    in both when a cross-field rule derives it. The parsed value fills the attribute named like the setting
    with ``_`` for ``.`` (``attribute`` when it differs); a topic default (``topic_config`` set) fills
    ``Settings.topic_defaults`` instead.
    """

    name: str
    default: str | None
    doc: str
    parse: Callable[[str], T]
    topic_config: str | None = None
    shown_default: str | None = None
    attribute: str | None = None

    @property
    def attr(self) -> str | None:
        """The settings attribute this setting fills; None for a topic default."""
        if self.topic_config is not None:
            return None
        return self.attribute or self.name.replace(".", "_")

    @property
    def flag(self) -> str:
        return flag_name(self.name)

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def default_doc(self) -> str:
        """The default as the docs show it (Markdown): the derived one, ``unset``, ``empty`` or the text."""
        if self.shown_default is not None:
            return f"`{self.shown_default}`"
        if self.default is None:
            return "unset"
        return "empty" if self.default == "" else f"`{self.default}`"

    @property
    def help(self) -> str:
        """The ``--help`` line: the doc, the environment variable and the default, without Markdown."""
        return f"{self.doc} [{self.env}; default {self.default_doc}]".replace("`", "")


class ParsedSettings:
    """Every setting's parsed value by name (None when unset), while the cross-field rules read and complete
    them. Not safe to share between threads while rules run."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self._values = dict(values)

    def get(self, spec: SettingSpec[T]) -> T:
        """The value ``spec.parse`` produced (or a rule set): a ``T`` already, typed, not converted."""
        return cast(T, self._values[spec.name])

    def optional(self, spec: SettingSpec[T]) -> T | None:
        """:meth:`get`, for a setting that may be unset."""
        return self.get(spec)

    def set(self, spec: SettingSpec[T], value: T) -> None:
        """Replace the value of ``spec`` (a rule deriving it from other settings)."""
        self._values[spec.name] = value


def text_value(raw: str) -> str:
    return raw


def optional_text(raw: str) -> str | None:
    """The stripped text; None when it is blank."""
    return raw.strip() or None


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


def host_port_or_none(raw: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6addr]:PORT`` too) as ``(host, port)``; ``none`` (any case) as None."""
    text = raw.strip()
    if text.lower() == "none":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT or none")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"port {port!r} is not an integer") from None
    if not 0 <= number <= 65535:
        raise ValueError("port must be between 0 and 65535")
    return host, number


def parse_url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return raw.strip().rstrip("/")


def path_value(raw: str) -> Path:
    return Path(raw).absolute()
