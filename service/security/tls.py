"""TLS of the broker: the HTTPS listener's SSL context, its reload on SIGHUP, and the broker's own client
identity for calls to other brokers.

:func:`server_context` builds one ``ssl.SSLContext`` for the listener (TLS 1.2 or newer; client certificates
none, requested or required as ``ssl.client.auth`` says). :class:`ServerTls` holds the listening socket's
context and the one new handshakes use: on SIGHUP a new context is built off the event loop
(:func:`server_context` again) and :meth:`ServerTls.install` makes it current; the listening context's
``sni_callback`` (called for every ClientHello, with or without SNI) hands each handshake the current one.
No context is changed while handshakes use it; connections already open keep their certificate.
:func:`broker_client_security` is what the broker presents when it calls another broker: it trusts
``ssl.cafile``, presents its own certificate when client certificates matter, and sends
``inter.broker.username`` with Basic when that is set.

All of these read PEM files: call them off the event loop (``asyncio.to_thread``) once the loop serves.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.client.security import ClientSecurity
from tierlog.service.security.settings import SecuritySettings

if TYPE_CHECKING:
    from tierlog.service.settings.config import Settings

__all__ = ["ServerTls", "TlsError", "broker_client_security", "server_context"]

_VERIFY_MODE = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsError(ValueError):
    """A TLS file cannot be used; the one-line message names the setting and the file (never a key)."""


def server_context(security: SecuritySettings) -> ssl.SSLContext:
    """The listener's SSL context: TLS 1.2 minimum, ``ssl.certfile``/``ssl.keyfile`` presented, client
    certificates verified against ``ssl.cafile`` as ``ssl.client.auth`` asks. Reads files (blocking).

    Raises:
        TlsError: TLS is not configured, or a file is missing, unreadable, not PEM, or the key does not
        match the certificate.
    """
    if security.ssl_certfile is None or security.ssl_keyfile is None:
        raise TlsError("TLS needs ssl.certfile and ssl.keyfile")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, security.ssl_certfile, security.ssl_keyfile)
    if security.ssl_cafile is not None:
        try:
            context.load_verify_locations(cafile=str(security.ssl_cafile))
        except (OSError, ssl.SSLError) as err:
            raise TlsError(f"ssl.cafile {security.ssl_cafile}: cannot load: {_reason(err)}") from err
    mode = _VERIFY_MODE[security.ssl_client_auth]
    if mode != ssl.CERT_NONE and security.ssl_cafile is None:
        raise TlsError(f"ssl.client.auth={security.ssl_client_auth} needs ssl.cafile")
    context.verify_mode = mode
    return context


class ServerTls:
    """The listener's TLS: the context its socket was opened with and the one new handshakes get.

    Use from the event loop only (handshakes run there too, so a swap never races one). Not thread-safe.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self.listening = context
        self.current = context
        context.sni_callback = self._select

    def _select(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        current = self.current
        if connection.context is not current:
            connection.context = current

    def install(self, context: ssl.SSLContext) -> None:
        """Serve every handshake from now on with ``context`` (built by :func:`server_context`)."""
        self.current = context


def _load_chain(context: ssl.SSLContext, certfile: Path, keyfile: Path) -> None:
    for name, path in (("ssl.certfile", certfile), ("ssl.keyfile", keyfile)):
        if not path.is_file():
            raise TlsError(f"{name} {path}: no such file")
    try:
        context.load_cert_chain(str(certfile), str(keyfile))
    except ssl.SSLError as err:
        raise TlsError(
            f"ssl.certfile {certfile} / ssl.keyfile {keyfile}: not a PEM certificate and its matching key "
            f"({_reason(err)})"
        ) from err
    except OSError as err:
        raise TlsError(
            f"ssl.certfile {certfile} / ssl.keyfile {keyfile}: cannot read: {_reason(err)}"
        ) from err


def _reason(err: BaseException) -> str:
    if isinstance(err, ssl.SSLError):
        return err.reason or str(err)
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


def broker_client_security(settings: Settings) -> ClientSecurity:
    """How this broker authenticates its own calls to other brokers: TLS when the listener speaks TLS
    (trusting ``ssl.cafile``, host names checked as ``ssl.endpoint.identification.algorithm`` says, the
    broker's certificate presented when ``mtls`` is an authentication method or ``ssl.client.auth`` is not
    ``none``), and Basic with ``inter.broker.username``/``inter.broker.password`` when set. Pure; the SSL
    context is built on its first use (:meth:`ClientSecurity.ssl_context`).
    """
    security = settings.security
    basic = security.inter_broker_username is not None and security.inter_broker_password is not None
    if not security.tls:
        if not basic:
            return ClientSecurity()
        return ClientSecurity(
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_username=security.inter_broker_username,
            sasl_plain_password=security.inter_broker_password,
        )
    present = "mtls" in security.authentication_methods or security.ssl_client_auth != "none"
    return ClientSecurity(
        security_protocol="SASL_SSL" if basic else "SSL",
        ssl_cafile=None if security.ssl_cafile is None else str(security.ssl_cafile),
        ssl_certfile=str(security.ssl_certfile) if present else None,
        ssl_keyfile=str(security.ssl_keyfile) if present else None,
        ssl_check_hostname=security.ssl_check_hostname,
        sasl_plain_username=security.inter_broker_username if basic else None,
        sasl_plain_password=security.inter_broker_password if basic else None,
    )
