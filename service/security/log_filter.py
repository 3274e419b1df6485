"""No credential in the broker's log, at any level: a :class:`logging.Filter` that rewrites every record.

:func:`install_redaction` puts a :class:`RedactingFilter` on the root logger's handlers (``tierlog serve``
does it right after configuring logging), so it sees the records of every logger that propagates to the
root: the broker's own and the libraries' (botocore, aiobotocore, s3fs, urllib3, aiohttp, and whatever the
next store backend brings). The filter formats each record's message with its arguments, passes the text
(and a formatted exception or stack, if any) through a :class:`~tierlog.service.security.redact.Redactor`,
and stores the result back as the record's message without arguments. The redactor knows the credential
shapes (Authorization headers, AWS signing headers and query parameters, botocore's request and credential
dumps, ``user:password@`` in URLs) and the literal secret values the broker was given:
:func:`known_secrets`.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from tierlog.service.security.redact import Redactor

if TYPE_CHECKING:
    from tierlog.service.settings.config import Settings

__all__ = ["RedactingFilter", "install_redaction", "known_secrets"]

#: Environment variables whose value is a secret by their name (``AWS_SECRET_ACCESS_KEY``,
#: ``AWS_SESSION_TOKEN``, ``TIERLOG_INTER_BROKER_PASSWORD``, ``TIERLOG_PASSWORD``, ...), unless the name says
#: the value is where a secret is kept (``AWS_SHARED_CREDENTIALS_FILE``, ``CREDENTIALS_DIRECTORY``).
SECRET_ENVIRONMENT = re.compile(
    r"^(?!.*_(?:FILE|PATH|DIR|DIRECTORY)$).*(?:PASSWORD|PASSWD|SECRET|TOKEN|ACCESS_KEY|CREDENTIAL|API_KEY"
    r"|PRIVATE_KEY)"
)

_FORMATTER = logging.Formatter()


def known_secrets(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The secret values this broker was given: the value of every environment variable named like a
    secret (:data:`SECRET_ENVIRONMENT`: the S3 access key id, secret key and session token among them),
    ``inter.broker.password`` and the ``Basic`` credentials made of it, and the password of any URL
    setting. Pure."""
    found = [value for name, value in environ.items() if value and SECRET_ENVIRONMENT.search(name.upper())]
    security = settings.security
    password = security.inter_broker_password
    if password:
        found.append(password)
        user = security.inter_broker_username or ""
        found.append(base64.b64encode(f"{user}:{password}".encode()).decode("ascii"))
    for url in (settings.s3_endpoint_url, settings.advertised_url):
        if url and "@" in url:
            userinfo = urlsplit(url).netloc.rpartition("@")[0]
            found.append(unquote(userinfo.partition(":")[2]))
    return [value for value in found if value]


class RedactingFilter(logging.Filter):
    """Rewrites each record it sees so that no credential is left in its message, arguments, exception
    text or stack; never drops a record. Safe to use from several threads (the redactor is immutable; a
    record is handled by one thread)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._redact = Redactor(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # the handler would print the arguments in its error report: redact them too
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = self._redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True


def install_redaction(secrets: Iterable[str], logger: logging.Logger | None = None) -> RedactingFilter:
    """Put one :class:`RedactingFilter` knowing ``secrets`` on every handler of ``logger`` (the root logger
    by default; configure the handlers first). Returns the filter. Not idempotent: install once."""
    target = logger or logging.getLogger()
    redacting = RedactingFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(redacting)
    return redacting
