"""The CORS settings: which origins parse, and the credentials rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.service.settings.config import SettingsError, build_settings
from tierlog.service.settings.http import parse_origins


def test_cors_is_off_by_default(tmp_path: Path) -> None:
    settings = build_settings({"data.dir": str(tmp_path)})
    assert settings.http_cors_allowed_origins == ()
    assert settings.http_cors_allow_credentials is False


def test_origins_are_listed_lower_cased_or_star() -> None:
    assert parse_origins("") == ()
    assert parse_origins(" * ") == ("*",)
    assert parse_origins("https://Viewer.Example, http://localhost:3000") == (
        "https://viewer.example",
        "http://localhost:3000",
    )


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("viewer.example", "viewer.example"),
        ("https://viewer.example/docs", "https://viewer.example/docs"),
        ("https://user@viewer.example", "https://user@viewer.example"),
        ("ftp://viewer.example", "ftp://viewer.example"),
        ("https://viewer.example:99999", "invalid port"),
        ("*, https://viewer.example", "alone"),
    ],
)
def test_a_bad_origin_is_refused_naming_it(tmp_path: Path, raw: str, named: str) -> None:
    with pytest.raises(SettingsError, match=r"http\.cors\.allowed\.origins") as err:
        build_settings({"data.dir": str(tmp_path), "http.cors.allowed.origins": raw})
    assert named in str(err.value)


def test_credentials_need_explicit_origins(tmp_path: Path) -> None:
    values = {"data.dir": str(tmp_path), "http.cors.allow.credentials": "true"}
    with pytest.raises(SettingsError, match="explicit"):
        build_settings({**values, "http.cors.allowed.origins": "*"})
    settings = build_settings({**values, "http.cors.allowed.origins": "https://viewer.example"})
    assert settings.http_cors_allow_credentials is True
