"""Secrets out of what the broker shows: URLs without their ``user:password@`` part. Pure."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_userinfo", "without_userinfo"]


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
