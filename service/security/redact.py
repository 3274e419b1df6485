"""Secrets out of what the broker shows: URLs without their ``user:password@`` part, and log text without
credentials (:func:`redact_credentials`, :class:`Redactor`, used by the broker's log filter,
:mod:`~tierlog.service.security.log_filter`). Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "Redactor",
    "redact_credentials",
    "redact_userinfo",
    "without_userinfo",
]


def without_userinfo(uri: str) -> str:
    """``uri`` without a ``user:password@`` part, for answers and logs. Pure."""
    parts = urlsplit(uri)
    if not parts.netloc or "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def redact_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` part of every URL in it removed (error reasons shown by
    ``/ready``). Pure."""
    return _USERINFO.sub(r"\g<scheme>", text)


#: What a redacted secret is replaced by.
REDACTED = "[REDACTED]"
#: Known secret values shorter than this are not replaced literally (a short value would blank common words
#: all over the log); the patterns of :func:`redact_credentials` still apply to them.
MIN_SECRET_CHARS = 8

# Names whose value is a secret wherever it is shown as ``name: value`` or ``name=value``, the name quoted or
# not: HTTP headers, botocore's canonical requests and request dicts, query strings, credential reprs, JSON.
_SECRET_NAMES = (
    r"(?:proxy-)?authorization|x-amz-security-token|x-amz-credential|x-amz-signature|awsaccesskeyid"
    r"|aws_access_key_id|aws_secret_access_key|aws_session_token|aws_security_token"
    r"|access_key(?:_id)?|secret_(?:access_)?key|session_token|security_token|client_secret|api_key"
    r"|password|passwd|secret|token|signature|credential"
)
_NOT_REDACTED_YET = r"(?!\[REDACTED\])"
# an unquoted Authorization header: everything to the end of the line (``AWS4-HMAC-SHA256 Credential=...,
# SignedHeaders=..., Signature=...``, ``Basic ...``, ``Bearer ...``)
_AUTHORIZATION_LINE = re.compile(
    r"(?P<key>(?<![\w-])(?:proxy-)?authorization\s*:(?![ \t]*(?:b?['\"]|\[REDACTED\]))[ \t]*)[^\r\n]+",
    re.IGNORECASE,
)
_KEYED = re.compile(
    rf"(?P<key>(?<![\w-])(?P<kq>['\"]?)(?:{_SECRET_NAMES})(?P=kq)\s*[:=]\s*)"
    r"""(?:(?P<quoted>b?'(?:[^'\\\r\n]|\\.)*'|b?"(?:[^"\\\r\n]|\\.)*")"""
    rf"|{_NOT_REDACTED_YET}(?!(?:None|null)\b)[^\s,;&'\"<>)\]}}]+)",
    re.IGNORECASE,
)
# a scheme and its token outside any header (``Bearer eyJ...``): the token holds a digit or a symbol, so an
# English word after "basic" or "bearer" is left alone
_SCHEME_TOKEN = re.compile(
    r"(?P<key>(?<![\w-])(?:basic|bearer)\s+)(?=[A-Za-z0-9._~+/=-]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}",
    re.IGNORECASE,
)
# AWS access key ids (``AKIA`` long-term, ``ASIA`` temporary, and the other IAM unique-id prefixes)
_ACCESS_KEY_ID = re.compile(
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AIDA|AROA|AGPA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"<>]+@")


def _keep_key(match: re.Match[str]) -> str:
    quoted = match.group("quoted") if "quoted" in match.re.groupindex else None
    if quoted:  # b'...' or "...": keep the quotes
        return f"{match.group('key')}{quoted[: quoted.index(quoted[-1]) + 1]}{REDACTED}{quoted[-1]}"
    return f"{match.group('key')}{REDACTED}"


def redact_credentials(text: str) -> str:
    """``text`` with the credentials in it replaced by :data:`REDACTED`: the values of Authorization headers,
    AWS signing headers and query parameters (``X-Amz-Security-Token``, ``X-Amz-Credential``,
    ``X-Amz-Signature``), secret-named keys of dicts, reprs and JSON (``aws_secret_access_key``, ``token``,
    ``password``, ...), ``Basic``/``Bearer`` tokens, AWS access key ids and the ``user:password@`` part of
    URLs. Pure; idempotent."""
    text = _AUTHORIZATION_LINE.sub(_keep_key, text)
    text = _KEYED.sub(_keep_key, text)
    text = _SCHEME_TOKEN.sub(_keep_key, text)
    text = _ACCESS_KEY_ID.sub(REDACTED, text)
    return _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)


class Redactor:
    """:func:`redact_credentials` plus the literal values the broker knows are secret (its S3 credentials,
    its own password, ...), as they are and percent-encoded (as they appear in query strings). Values shorter
    than :data:`MIN_SECRET_CHARS` are not replaced literally. Immutable; safe to call from any thread."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {
            form
            for secret in secrets
            if len(secret) >= MIN_SECRET_CHARS
            for form in (secret, quote(secret, safe=""), quote_plus(secret, safe=""))
        }
        ordered = sorted(forms, key=len, reverse=True)  # a secret that contains another goes first
        self._literals = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, text: str) -> str:
        """``text`` without the known secrets and credential patterns in it. Pure."""
        if self._literals is not None:
            text = self._literals.sub(REDACTED, text)
        return redact_credentials(text)
