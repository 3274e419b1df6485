"""How the security settings combine: each impossible or unsafe combination is refused at start, naming the
settings, and the defaults are today's behaviour."""

from __future__ import annotations

import pytest

from tierlog.service.settings.config import SettingsError, build_settings


def test_the_defaults_leave_security_off() -> None:
    security = build_settings({}).security
    assert not security.tls and not security.enabled
    assert build_settings({}).advertised_url.startswith("http://")


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"ssl.certfile": "/c.pem"}, "ssl.keyfile"),
        ({"ssl.client.auth": "required"}, "ssl.cafile"),
        ({"plaintext.port": "9000"}, "ssl.certfile"),
        ({"authentication.methods": "mtls"}, "ssl.client.auth"),
        ({"authentication.methods": "bearer"}, "authentication.bearer.jwks"),
        (
            {"authentication.methods": "bearer", "authentication.bearer.jwks": "/jwks.json"},
            "authentication.bearer.audience",
        ),
        (
            {
                "authentication.methods": "bearer",
                "authentication.bearer.jwks": "http://idp.example/jwks",
                "authentication.bearer.audience": "tierlog",
            },
            "https://",
        ),
        ({"inter.broker.username": "broker"}, "inter.broker.password"),
        ({"metadata.ssl.certfile": "/c.pem", "metadata.ssl.keyfile": "/k.pem"}, "metadata.ssl.cafile"),
        ({"authentication.methods": "basic,kerberos"}, "kerberos"),
        ({"super.users": "admin"}, "Type:name"),
    ],
)
def test_unsafe_or_impossible_combinations_are_refused(values: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        build_settings(values)


def test_a_complete_secured_setup_resolves() -> None:
    security = build_settings(
        {
            "ssl.certfile": "/c.pem",
            "ssl.keyfile": "/k.pem",
            "ssl.cafile": "/ca.pem",
            "ssl.client.auth": "requested",
            "authentication.methods": "basic, mtls,bearer",
            "authentication.bearer.jwks": "https://idp.example/jwks",
            "authentication.bearer.audience": "tierlog",
            "super.users": "User:admin;User:broker",
            "inter.broker.username": "broker",
            "inter.broker.password": "s3cret",
        }
    ).security
    assert security.authentication_methods == ("basic", "mtls", "bearer")
    assert security.super_users == frozenset({"User:admin", "User:broker"})
    assert "s3cret" not in repr(security)


def test_a_remote_uri_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(SettingsError) as caught:
        build_settings({"remote.uri": "s3://AKIAEXAMPLE:very-secret@bucket/prefix"})
    assert "very-secret" not in str(caught.value) and "AKIAEXAMPLE" not in str(caught.value)
    assert "credentials" in str(caught.value)
