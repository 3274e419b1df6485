"""The security settings: TLS listener, authentication, authorization, and the broker's own credentials.

Declared like every other broker setting, one :class:`~tierlog.service.settings.spec.SettingSpec` row each
(flag, ``TIERLOG_*`` environment variable, TOML key, default, doc), and appended to
:data:`tierlog.service.settings.table.TABLE`; each row fills one attribute of :class:`SecuritySettings`
(``Settings.security``). How they combine is checked by the cross-field rules of
:mod:`tierlog.service.settings.rules`. ``docs/security.md`` walks through them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.service.settings.spec import (
    SettingSpec,
    bool_value,
    int_range,
    optional_text,
    path_value,
    text_value,
)

__all__ = [
    "AUTH_METHODS",
    "CLIENT_AUTH",
    "SECURITY_TABLE",
    "SecuritySettings",
]

AUTH_METHODS = ("basic", "mtls", "bearer")
CLIENT_AUTH = ("none", "requested", "required")


def _methods(raw: str) -> tuple[str, ...]:
    methods: list[str] = []
    for item in raw.replace(";", ",").split(","):
        name = item.strip().lower()
        if not name:
            continue
        if name not in AUTH_METHODS:
            raise ValueError(f"unknown method {name!r}: expected a list of {', '.join(AUTH_METHODS)}")
        if name not in methods:
            methods.append(name)
    return tuple(methods)


def _client_auth(raw: str) -> str:
    value = raw.strip().lower()
    if value not in CLIENT_AUTH:
        raise ValueError(f"expected one of {', '.join(CLIENT_AUTH)}")
    return value


def _principals(raw: str) -> frozenset[str]:
    """Kafka's ``super.users``: ``User:a;User:b`` (``,`` also separates)."""
    names: set[str] = set()
    for item in raw.replace(",", ";").split(";"):
        text = item.strip()
        if not text:
            continue
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal: expected Type:name, e.g. User:admin")
        names.add(text)
    return frozenset(names)


def _checks_host_name(raw: str) -> bool:
    """``ssl.endpoint.identification.algorithm``: ``https`` checks the peer's host name, anything else not."""
    return raw.strip().lower() == "https"


def _claim(raw: str) -> str:
    return raw.strip() or "sub"


SSL_CERTFILE = SettingSpec(
    "ssl.certfile",
    None,
    "PEM certificate chain of the listener. Set, the main port (`port`) speaks HTTPS only, TLS 1.2 or newer, "
    "and `advertised.url` defaults to `https://`. `kill -HUP` reloads it and `ssl.keyfile` without dropping "
    "connections.",
    path_value,
)
SSL_KEYFILE = SettingSpec(
    "ssl.keyfile", None, "PEM private key of `ssl.certfile`; set together with it.", path_value
)
SSL_CAFILE = SettingSpec(
    "ssl.cafile",
    None,
    "PEM CA bundle client certificates must chain to (mutual TLS). Brokers also trust it when they call each "
    "other.",
    path_value,
)
SSL_CLIENT_AUTH = SettingSpec(
    "ssl.client.auth",
    "none",
    "Client certificates: `none`, `requested` (verified when sent) or `required` (the handshake fails "
    "without one). Needs `ssl.cafile`.",
    _client_auth,
)
SSL_PRINCIPAL_MAPPING_RULES = SettingSpec(
    "ssl.principal.mapping.rules",
    "DEFAULT",
    "How a client certificate's subject (RFC 4514, e.g. `CN=alice,OU=eng,O=acme`) becomes a user name, in "
    "Kafka's syntax: comma-separated `RULE:regex/replacement/[L|U]` tried in order, `DEFAULT` = the whole "
    "subject.",
    text_value,
)
SSL_ENDPOINT_IDENTIFICATION_ALGORITHM = SettingSpec(
    "ssl.endpoint.identification.algorithm",
    "https",
    "Broker-to-broker TLS checks the peer's host name against its certificate; empty turns the check off (as "
    "in Kafka).",
    _checks_host_name,
    attribute="ssl_check_hostname",
)
PLAINTEXT_PORT = SettingSpec(
    "plaintext.port",
    None,
    "With TLS on, also serve plaintext HTTP on this port of `host`. Unset: no plaintext listener at all.",
    int_range(0, 65535),
)
AUTHENTICATION_METHODS = SettingSpec(
    "authentication.methods",
    "",
    "Comma-separated list of `basic` (HTTP Basic against SCRAM credentials), `mtls` (the client "
    "certificate), `bearer` (OAuth 2 / OIDC JWTs). Empty: authentication and ACLs are off and every request "
    "acts as `User:ANONYMOUS`.",
    _methods,
)
SUPER_USERS = SettingSpec(
    "super.users",
    "",
    "Principals allowed everything, `;`-separated (`User:admin;User:broker`). Brokers of a secured cluster "
    "must be super users (only a super user's forwarded requests are believed).",
    _principals,
)
ALLOW_EVERYONE_IF_NO_ACL_FOUND = SettingSpec(
    "allow.everyone.if.no.acl.found",
    "false",
    "With authentication on, allow an operation on a resource that no ACL names at all.",
    bool_value,
)
AUTHENTICATION_FAILURE_LIMIT = SettingSpec(
    "authentication.failure.limit",
    "20",
    "Failed authentications of one user name from one client host per window; past it that name is answered "
    "429 (42901) with `Retry-After` from that host, without checking credentials (other users from the same "
    "host are not held back). Bearer tokens and client certificates count under one unnamed user per host.",
    int_range(1, 2**31 - 1),
)
AUTHENTICATION_FAILURE_ADDRESS_LIMIT = SettingSpec(
    "authentication.failure.address.limit",
    None,
    "Failed authentications from one client host per window whatever the user names (guessing across "
    "names); past it every attempt from that host is answered 429 (42901) with `Retry-After`.",
    int_range(1, 2**31 - 1),
    shown_default="5 * authentication.failure.limit",
)
AUTHENTICATION_FAILURE_WINDOW_MS = SettingSpec(
    "authentication.failure.window.ms",
    "60000",
    "The sliding window of `authentication.failure.limit` and `authentication.failure.address.limit`.",
    int_range(1, 2**31 - 1),
)
AUTHENTICATION_BEARER_JWKS = SettingSpec(
    "authentication.bearer.jwks",
    None,
    "The token issuer's JWKS: a file path or an `https://` URL. Needed by the `bearer` method. Only "
    "asymmetric algorithms (RS*, PS*, ES*) are accepted.",
    optional_text,
    attribute="bearer_jwks",
)
AUTHENTICATION_BEARER_AUDIENCE = SettingSpec(
    "authentication.bearer.audience",
    None,
    "The audience (`aud`) a token must name; set, a token without it is refused.",
    optional_text,
    attribute="bearer_audience",
)
AUTHENTICATION_BEARER_ISSUER = SettingSpec(
    "authentication.bearer.issuer",
    None,
    "The issuer (`iss`) a token must name.",
    optional_text,
    attribute="bearer_issuer",
)
AUTHENTICATION_BEARER_PRINCIPAL_CLAIM = SettingSpec(
    "authentication.bearer.principal.claim",
    "sub",
    "The claim naming the user (`User:<claim>`).",
    _claim,
    attribute="bearer_principal_claim",
)
AUTHENTICATION_BEARER_JWKS_REFRESH_MS = SettingSpec(
    "authentication.bearer.jwks.refresh.ms",
    "300000",
    "How often a JWKS URL is fetched again; a token with an unknown key id refetches at most once a minute.",
    int_range(1000, 2**31 - 1),
    attribute="bearer_jwks_refresh_ms",
)
METRICS_PUBLIC = SettingSpec(
    "metrics.public",
    "false",
    "With authentication on, serve `/metrics` without credentials. `false`: it needs `Describe` on the "
    "Cluster.",
    bool_value,
)
INTER_BROKER_USERNAME = SettingSpec(
    "inter.broker.username",
    None,
    "The user this broker authenticates as to other brokers with Basic. Unset: it presents its own "
    "certificate (`mtls`).",
    optional_text,
)
INTER_BROKER_PASSWORD = SettingSpec(
    "inter.broker.password",
    None,
    "Its password. A secret: prefer `TIERLOG_INTER_BROKER_PASSWORD` or the TOML file to the flag; it is "
    "never logged or shown.",
    optional_text,
)
METADATA_SSL_CAFILE = SettingSpec(
    "metadata.ssl.cafile",
    None,
    "PEM CA bundle that etcd's certificate must chain to. Set, etcd is reached over TLS.",
    path_value,
)
METADATA_SSL_CERTFILE = SettingSpec(
    "metadata.ssl.certfile",
    None,
    "PEM client certificate for etcd's client-certificate authentication.",
    path_value,
)
METADATA_SSL_KEYFILE = SettingSpec(
    "metadata.ssl.keyfile", None, "PEM key of `metadata.ssl.certfile`.", path_value
)

SECURITY_TABLE: tuple[SettingSpec[Any], ...] = (
    SSL_CERTFILE,
    SSL_KEYFILE,
    SSL_CAFILE,
    SSL_CLIENT_AUTH,
    SSL_PRINCIPAL_MAPPING_RULES,
    SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
    PLAINTEXT_PORT,
    AUTHENTICATION_METHODS,
    SUPER_USERS,
    ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    AUTHENTICATION_FAILURE_LIMIT,
    AUTHENTICATION_FAILURE_WINDOW_MS,
    AUTHENTICATION_FAILURE_ADDRESS_LIMIT,
    AUTHENTICATION_BEARER_JWKS,
    AUTHENTICATION_BEARER_AUDIENCE,
    AUTHENTICATION_BEARER_ISSUER,
    AUTHENTICATION_BEARER_PRINCIPAL_CLAIM,
    AUTHENTICATION_BEARER_JWKS_REFRESH_MS,
    METRICS_PUBLIC,
    INTER_BROKER_USERNAME,
    INTER_BROKER_PASSWORD,
    METADATA_SSL_CAFILE,
    METADATA_SSL_CERTFILE,
    METADATA_SSL_KEYFILE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SecuritySettings:
    """The resolved security settings (``Settings.security``): one attribute per row of
    :data:`SECURITY_TABLE`, filled by :func:`tierlog.service.settings.config.build_settings`. All defaults are
    today's behaviour: plaintext, no authentication."""

    ssl_certfile: Path | None
    ssl_keyfile: Path | None
    ssl_cafile: Path | None
    ssl_client_auth: str
    ssl_principal_mapping_rules: str
    ssl_check_hostname: bool
    plaintext_port: int | None
    authentication_methods: tuple[str, ...]
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    authentication_failure_limit: int
    authentication_failure_window_ms: int
    authentication_failure_address_limit: int
    bearer_jwks: str | None
    bearer_audience: str | None
    bearer_issuer: str | None
    bearer_principal_claim: str
    bearer_jwks_refresh_ms: int
    metrics_public: bool
    inter_broker_username: str | None
    inter_broker_password: str | None = field(repr=False)
    metadata_ssl_cafile: Path | None
    metadata_ssl_certfile: Path | None
    metadata_ssl_keyfile: Path | None

    @property
    def tls(self) -> bool:
        """The main listener speaks HTTPS."""
        return self.ssl_certfile is not None

    @property
    def enabled(self) -> bool:
        """Authentication (and with it ACL authorization) is on."""
        return bool(self.authentication_methods)

    @property
    def metadata_tls(self) -> bool:
        return self.metadata_ssl_cafile is not None
