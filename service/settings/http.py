"""The settings of the HTTP listener's cross-origin policy (CORS), off by default.

A browser page served from another origin (an OpenAPI viewer's "try it", a dashboard) may call the broker
only when ``http.cors.allowed.origins`` names that origin; :mod:`tierlog.service.web.cors` answers the
preflight and adds the headers. Rows of the process table (:mod:`tierlog.service.settings.table`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tierlog.service.settings.spec import ParsedSettings, SettingsError, SettingSpec
from tierlog.service.settings.spec import bool_value as _bool
from tierlog.service.settings.spec import int_range as _int

__all__ = [
    "CORS_TABLE",
    "HTTP_CORS_ALLOWED_ORIGINS",
    "HTTP_CORS_ALLOW_CREDENTIALS",
    "HTTP_CORS_MAX_AGE_SECONDS",
    "credentials_need_origins",
    "parse_origins",
]


def parse_origins(raw: str) -> tuple[str, ...]:
    """``http.cors.allowed.origins``: empty (CORS off), ``*`` (any origin), or comma-separated origins
    ``scheme://host[:port]`` without path, query or user information. Pure.

    Raises:
        ValueError: an origin that is not of that form (naming it), or ``*`` mixed with origins.
    """
    origins = tuple(part.strip() for part in raw.split(",") if part.strip())
    if "*" in origins:
        if len(origins) > 1:
            raise ValueError("`*` allows every origin; list origins or give `*` alone")
        return origins
    for origin in origins:
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path
            or parts.query
            or parts.fragment
            or parts.username is not None
        ):
            raise ValueError(
                f"{origin!r} is not an origin (scheme://host[:port], e.g. https://viewer.example)"
            )
        try:
            parts.port  # noqa: B018 (validates the port)
        except ValueError:
            raise ValueError(f"{origin!r} has an invalid port") from None
    return tuple(origin.lower() for origin in origins)


HTTP_CORS_ALLOWED_ORIGINS = SettingSpec(
    "http.cors.allowed.origins",
    "",
    "Browser origins allowed to call the HTTP API from their pages (CORS), comma-separated "
    "`scheme://host[:port]` (e.g. `https://editor.swagger.io`), or `*` for any. Empty: CORS is off, no "
    "`Access-Control-*` header is sent and a preflight `OPTIONS` is answered `405`. A listed origin's "
    "preflight is answered `204` with the route's methods and the asked headers; its other answers, errors "
    "included, carry `Access-Control-Allow-Origin`. Authentication and ACLs apply as to any client.",
    parse_origins,
)
HTTP_CORS_ALLOW_CREDENTIALS = SettingSpec(
    "http.cors.allow.credentials",
    "false",
    "Let a listed origin's page send credentials (cookies, HTTP authentication, client certificates) "
    "(`Access-Control-Allow-Credentials: true`). Needs explicit origins: refused at start with `*`. "
    "An `Authorization` header set by the page itself needs only the origin to be listed.",
    _bool,
)
HTTP_CORS_MAX_AGE_SECONDS = SettingSpec(
    "http.cors.max.age.seconds",
    "600",
    "How long a browser may cache a preflight answer (`Access-Control-Max-Age`).",
    _int(0, 86400),
)

CORS_TABLE: tuple[SettingSpec[Any], ...] = (
    HTTP_CORS_ALLOWED_ORIGINS,
    HTTP_CORS_ALLOW_CREDENTIALS,
    HTTP_CORS_MAX_AGE_SECONDS,
)


def credentials_need_origins(values: ParsedSettings) -> None:
    """``http.cors.allow.credentials`` with ``*``: refused (browsers refuse it too, and echoing any origin
    with credentials would let every site act with a user's credentials)."""
    if values.get(HTTP_CORS_ALLOW_CREDENTIALS) and values.get(HTTP_CORS_ALLOWED_ORIGINS) == ("*",):
        raise SettingsError(
            "http.cors.allow.credentials=true needs explicit http.cors.allowed.origins, not `*`"
        )
