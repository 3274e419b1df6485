"""The security settings: TLS listener, authentication, authorization, and the broker's own credentials.

Declared like every other broker setting (flag, ``TIERLOG_*`` environment variable, TOML key) and appended to
:data:`tierlog.service.settings_table.TABLE`; :func:`security_settings` checks how they combine and resolves
them into one :class:`SecuritySettings` (``Settings.security``). ``docs/security.md`` walks through them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.service.setting_spec import SettingSpec, bool_value, int_range, path_value, text_value

__all__ = [
    "AUTH_METHODS",
    "CLIENT_AUTH",
    "SECURITY_TABLE",
    "SecuritySettings",
    "security_settings",
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


def _optional_text(raw: str) -> str | None:
    return raw.strip() or None


SSL_CERTFILE = SettingSpec(
    "ssl.certfile",
    None,
    "PEM certificate chain of the HTTPS listener; set, the listener speaks TLS only",
    path_value,
)
SSL_KEYFILE = SettingSpec("ssl.keyfile", None, "PEM private key of ssl.certfile", path_value)
SSL_CAFILE = SettingSpec(
    "ssl.cafile",
    None,
    "PEM CA bundle that client certificates must chain to; brokers also trust it for each other",
    path_value,
)
SSL_CLIENT_AUTH = SettingSpec(
    "ssl.client.auth", "none", "client certificates: none, requested or required (mutual TLS)", _client_auth
)
SSL_PRINCIPAL_MAPPING_RULES = SettingSpec(
    "ssl.principal.mapping.rules",
    "DEFAULT",
    "rules mapping a client certificate's subject to a user name (Kafka's RULE:regex/replacement/[LU])",
    text_value,
)
SSL_ENDPOINT_IDENTIFICATION_ALGORITHM = SettingSpec(
    "ssl.endpoint.identification.algorithm",
    "https",
    "broker-to-broker TLS checks the peer's host name against its certificate (https); empty turns it off",
    text_value,
)
PLAINTEXT_PORT = SettingSpec(
    "plaintext.port",
    None,
    "with TLS on, also listen in plaintext on this port (unset: no plaintext listener)",
    int_range(0, 65535),
)
AUTHENTICATION_METHODS = SettingSpec(
    "authentication.methods",
    "",
    "how clients authenticate: a list of basic, mtls, bearer; empty turns authentication and ACLs off",
    _methods,
)
SUPER_USERS = SettingSpec(
    "super.users", "", "principals allowed everything, ;-separated (User:admin;User:broker)", _principals
)
ALLOW_EVERYONE_IF_NO_ACL_FOUND = SettingSpec(
    "allow.everyone.if.no.acl.found",
    "false",
    "with authentication on, allow an operation on a resource that no ACL names",
    bool_value,
)
AUTHENTICATION_FAILURE_LIMIT = SettingSpec(
    "authentication.failure.limit",
    "20",
    "failed authentications one client host may make per window before it is answered 429",
    int_range(1, 2**31 - 1),
)
AUTHENTICATION_FAILURE_WINDOW_MS = SettingSpec(
    "authentication.failure.window.ms",
    "60000",
    "the window of authentication.failure.limit",
    int_range(1, 2**31 - 1),
)
AUTHENTICATION_BEARER_JWKS = SettingSpec(
    "authentication.bearer.jwks",
    None,
    "JWKS of the token issuer: a file path or an https:// URL (needed by the bearer method)",
    _optional_text,
)
AUTHENTICATION_BEARER_AUDIENCE = SettingSpec(
    "authentication.bearer.audience", None, "the audience (aud) a bearer token must name", _optional_text
)
AUTHENTICATION_BEARER_ISSUER = SettingSpec(
    "authentication.bearer.issuer",
    None,
    "the issuer (iss) a bearer token must name (unset: any)",
    _optional_text,
)
AUTHENTICATION_BEARER_PRINCIPAL_CLAIM = SettingSpec(
    "authentication.bearer.principal.claim", "sub", "the token claim that names the user", text_value
)
AUTHENTICATION_BEARER_JWKS_REFRESH_MS = SettingSpec(
    "authentication.bearer.jwks.refresh.ms",
    "300000",
    "how often a JWKS URL is fetched again (an unknown key id also refetches, at most once a minute)",
    int_range(1000, 2**31 - 1),
)
METRICS_PUBLIC = SettingSpec(
    "metrics.public",
    "false",
    "with authentication on, serve /metrics to anyone (false: it needs Describe on the Cluster)",
    bool_value,
)
INTER_BROKER_USERNAME = SettingSpec(
    "inter.broker.username",
    None,
    "user this broker authenticates as to other brokers with basic (unset: its certificate, with mtls)",
    _optional_text,
)
INTER_BROKER_PASSWORD = SettingSpec(
    "inter.broker.password", None, "password of inter.broker.username (secret: never logged)", _optional_text
)
METADATA_SSL_CAFILE = SettingSpec(
    "metadata.ssl.cafile",
    None,
    "PEM CA bundle to verify etcd's certificate; set, etcd is reached over TLS",
    path_value,
)
METADATA_SSL_CERTFILE = SettingSpec(
    "metadata.ssl.certfile", None, "PEM client certificate for etcd (client-cert authentication)", path_value
)
METADATA_SSL_KEYFILE = SettingSpec(
    "metadata.ssl.keyfile", None, "PEM key of metadata.ssl.certfile", path_value
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


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """The resolved security settings. The defaults are today's behaviour: plaintext, no authentication."""

    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_cafile: Path | None = None
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"
    ssl_check_hostname: bool = True
    plaintext_port: int | None = None
    authentication_methods: tuple[str, ...] = ()
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    authentication_failure_limit: int = 20
    authentication_failure_window_ms: int = 60_000
    bearer_jwks: str | None = None
    bearer_audience: str | None = None
    bearer_issuer: str | None = None
    bearer_principal_claim: str = "sub"
    bearer_jwks_refresh_ms: int = 300_000
    metrics_public: bool = False
    inter_broker_username: str | None = None
    inter_broker_password: str | None = field(default=None, repr=False)
    metadata_ssl_cafile: Path | None = None
    metadata_ssl_certfile: Path | None = None
    metadata_ssl_keyfile: Path | None = None

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


def security_settings(get: Callable[[SettingSpec[Any]], Any]) -> SecuritySettings:
    """Resolve the security settings through ``get`` (the parsed value of a spec, None when unset) and check
    how they combine. Pure.

    Raises:
        ValueError: a combination that cannot work (the message names the settings).
    """
    value = SecuritySettings(
        ssl_certfile=get(SSL_CERTFILE),
        ssl_keyfile=get(SSL_KEYFILE),
        ssl_cafile=get(SSL_CAFILE),
        ssl_client_auth=get(SSL_CLIENT_AUTH),
        ssl_principal_mapping_rules=get(SSL_PRINCIPAL_MAPPING_RULES),
        ssl_check_hostname=(get(SSL_ENDPOINT_IDENTIFICATION_ALGORITHM) or "").strip().lower() == "https",
        plaintext_port=get(PLAINTEXT_PORT),
        authentication_methods=get(AUTHENTICATION_METHODS),
        super_users=get(SUPER_USERS),
        allow_everyone_if_no_acl_found=get(ALLOW_EVERYONE_IF_NO_ACL_FOUND),
        authentication_failure_limit=get(AUTHENTICATION_FAILURE_LIMIT),
        authentication_failure_window_ms=get(AUTHENTICATION_FAILURE_WINDOW_MS),
        bearer_jwks=get(AUTHENTICATION_BEARER_JWKS),
        bearer_audience=get(AUTHENTICATION_BEARER_AUDIENCE),
        bearer_issuer=get(AUTHENTICATION_BEARER_ISSUER),
        bearer_principal_claim=get(AUTHENTICATION_BEARER_PRINCIPAL_CLAIM).strip() or "sub",
        bearer_jwks_refresh_ms=get(AUTHENTICATION_BEARER_JWKS_REFRESH_MS),
        metrics_public=get(METRICS_PUBLIC),
        inter_broker_username=get(INTER_BROKER_USERNAME),
        inter_broker_password=get(INTER_BROKER_PASSWORD),
        metadata_ssl_cafile=get(METADATA_SSL_CAFILE),
        metadata_ssl_certfile=get(METADATA_SSL_CERTFILE),
        metadata_ssl_keyfile=get(METADATA_SSL_KEYFILE),
    )
    _check(value)
    return value


def _check(s: SecuritySettings) -> None:
    if (s.ssl_certfile is None) != (s.ssl_keyfile is None):
        raise ValueError("ssl.certfile and ssl.keyfile are set together")
    if s.ssl_client_auth != "none" and (not s.tls or s.ssl_cafile is None):
        raise ValueError(
            f"ssl.client.auth={s.ssl_client_auth} needs ssl.certfile, ssl.keyfile and ssl.cafile"
        )
    if s.plaintext_port is not None and not s.tls:
        raise ValueError("plaintext.port is an extra listener beside the TLS one: set ssl.certfile first")
    if "mtls" in s.authentication_methods and s.ssl_client_auth == "none":
        raise ValueError("authentication.methods=mtls needs ssl.client.auth=requested or required")
    if "bearer" in s.authentication_methods and not s.bearer_jwks:
        raise ValueError("authentication.methods=bearer needs authentication.bearer.jwks")
    if "bearer" in s.authentication_methods and not s.bearer_audience:
        raise ValueError(
            "authentication.methods=bearer needs authentication.bearer.audience (without it a token the "
            "issuer made for any other service would be accepted)"
        )
    if s.bearer_jwks and "://" in s.bearer_jwks and not s.bearer_jwks.lower().startswith("https://"):
        raise ValueError(
            "authentication.bearer.jwks must be a file path or an https:// URL (keys fetched over plaintext "
            "could be replaced on the way)"
        )
    if (s.inter_broker_username is None) != (s.inter_broker_password is None):
        raise ValueError("inter.broker.username and inter.broker.password are set together")
    if (s.metadata_ssl_certfile is None) != (s.metadata_ssl_keyfile is None):
        raise ValueError("metadata.ssl.certfile and metadata.ssl.keyfile are set together")
    if s.metadata_ssl_certfile is not None and s.metadata_ssl_cafile is None:
        raise ValueError("metadata.ssl.certfile needs metadata.ssl.cafile (etcd over TLS)")
