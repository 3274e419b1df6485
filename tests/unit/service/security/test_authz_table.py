"""The route table of the authorizer covers every route the broker registers (fail closed otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.service.app import create_app
from tierlog.service.security.authz import HANDLER, OPEN, ROUTE_ACTIONS, Marker, Need
from tierlog.service.security.redact import redact_userinfo, without_userinfo
from tierlog.service.settings.config import build_settings


def _routes(tmp_path: Path, overrides: dict[str, str]) -> set[tuple[str, str]]:
    settings = build_settings({"data.dir": str(tmp_path), "kafka.listener": "none", **overrides}, {})
    app = create_app(settings)
    found = set()
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        found.add((route.method, resource.canonical))
    return found


@pytest.mark.parametrize(
    "overrides",
    [{}, {"authentication.methods": "basic"}],
    ids=["security-off", "basic"],
)
def test_every_route_has_a_row(tmp_path: Path, overrides: dict[str, str]) -> None:
    missing = sorted(_routes(tmp_path, overrides) - set(ROUTE_ACTIONS))
    assert not missing, f"routes without a row in authz.ROUTE_ACTIONS: {missing}"


def test_every_row_names_a_path_parameter_of_its_route() -> None:
    for (method, path), row in ROUTE_ACTIONS.items():
        if isinstance(row, Marker):
            continue
        assert row, f"{method} {path}: an empty row"
        for need in row:
            assert isinstance(need, Need)
            if need.key is not None:
                assert "{" + need.key + "}" in path, f"{method} {path}: no path parameter {need.key}"


def test_only_health_readiness_and_openapi_are_open() -> None:
    opened = sorted(path for (_, path), row in ROUTE_ACTIONS.items() if row is OPEN)
    assert set(opened) == {"/health", "/ready", "/openapi.json"}


def test_writes_never_skip_the_check() -> None:
    for (method, path), row in ROUTE_ACTIONS.items():
        if method in {"POST", "PUT", "PATCH", "DELETE"}:
            assert row is HANDLER or isinstance(row, tuple), f"{method} {path} is {row}"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://user:secret@minio:9000", "http://minio:9000"),
        ("https://minio:9000/path", "https://minio:9000/path"),
        ("etcd://a:b@h1:2379,h2:2379/prefix", "etcd://h1:2379,h2:2379/prefix"),
        ("/var/lib/tierlog/remote", "/var/lib/tierlog/remote"),
    ],
)
def test_without_userinfo(uri: str, shown: str) -> None:
    assert without_userinfo(uri) == shown


def test_redact_userinfo_in_free_text() -> None:
    reason = "Could not connect to the endpoint URL: http://AKIA:s3cr3t@minio:9000/bucket (and s3://b/p)"
    assert (
        redact_userinfo(reason)
        == "Could not connect to the endpoint URL: http://minio:9000/bucket (and s3://b/p)"
    )
