"""How a client reaches a secured broker: TLS and credentials, named as Kafka clients name them.

``security_protocol`` is Kafka's: ``PLAINTEXT`` (http, no credentials), ``SSL`` (https), ``SASL_PLAINTEXT``
(credentials over http) and ``SASL_SSL`` (credentials over https). tierlog speaks HTTP, so SASL is its HTTP
equivalent: ``sasl_mechanism="PLAIN"`` sends ``Authorization: Basic`` with ``sasl_plain_username`` and
``sasl_plain_password`` (the broker checks them against its SCRAM credentials), ``"OAUTHBEARER"`` sends
``Authorization: Bearer`` with ``sasl_oauth_token``. With SSL the broker's certificate is verified against
``ssl_cafile`` (the system's trust store when unset) and its host name is checked unless
``ssl_check_hostname=False``; ``ssl_certfile``/``ssl_keyfile`` present a client certificate (mutual TLS).

The URL scheme and the protocol must agree, as :meth:`ClientSecurity.for_urls` decides: a bare
``host:port`` bootstrap server gets ``https://`` under SSL and SASL_SSL; an ``https://`` URL with the
protocol left at PLAINTEXT (or SASL_PLAINTEXT) means TLS, so the protocol becomes SSL (SASL_SSL), exactly as
if it had been set (an https URL already said "TLS"; nothing is ever sent in plaintext to it); an ``http://``
URL under SSL or SASL_SSL is an error, since it would send in plaintext what was asked to be encrypted. A
plaintext protocol with http and https URLs mixed stays as it is: each https URL is then verified against the
system's trust store (what the client did before these options existed).

Every check raises :class:`~tierlog.wire.errors.InvalidRequestError` naming the option; secrets never
appear in a repr or a message. A :class:`ClientSecurity` is immutable and safe to share between threads and
clients; its SSL context is built once, on first use.
"""

from __future__ import annotations

import argparse
import base64
import os
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "PASSWORD_ENV",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ClientSecurity",
    "add_security_arguments",
    "security_from_args",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "OAUTHBEARER")
#: The environment variable that holds the password of the CLI's ``--username``.
PASSWORD_ENV = "TIERLOG_PASSWORD"
_TLS_OF = {"PLAINTEXT": "SSL", "SASL_PLAINTEXT": "SASL_SSL", "SSL": "SSL", "SASL_SSL": "SASL_SSL"}


@dataclass(frozen=True)
class ClientSecurity:
    """A client's TLS settings and credentials (aiokafka's option names). Validated on construction.

    Raises (on construction):
        InvalidRequestError: an unknown protocol or mechanism, missing or misplaced credentials, an SSL
        option under a plaintext protocol; the message names the option.
    """

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    sasl_oauth_token: str | None = field(default=None, repr=False)
    _context: list[ssl.SSLContext] = field(default_factory=list, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate()

    @property
    def tls(self) -> bool:
        """Connections use TLS (SSL or SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Requests carry credentials (SASL_PLAINTEXT or SASL_SSL)."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def scheme(self) -> str:
        """The URL scheme of this protocol: ``https`` or ``http``."""
        return "https" if self.tls else "http"

    def _validate(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise InvalidRequestError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if not isinstance(self.ssl_check_hostname, bool):
            raise InvalidRequestError(
                f"ssl_check_hostname must be True or False, got {self.ssl_check_hostname!r}"
            )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidRequestError(f"{name} must be a file path")
            if value is not None and not self.tls:
                raise InvalidRequestError(
                    f"{name} needs security_protocol SSL or SASL_SSL, got {self.security_protocol}"
                )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise InvalidRequestError("ssl_keyfile needs ssl_certfile (the client certificate)")
        if self.sasl:
            self._validate_sasl()
        else:
            for name in ("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token"):
                if getattr(self, name) is not None:
                    raise InvalidRequestError(
                        f"{name} needs security_protocol SASL_PLAINTEXT or SASL_SSL, "
                        f"got {self.security_protocol}"
                    )

    def _validate_sasl(self) -> None:
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise InvalidRequestError(
                f"sasl_mechanism must be PLAIN (HTTP Basic, checked against the broker's SCRAM credentials) "
                f"or OAUTHBEARER (HTTP Bearer), got {self.sasl_mechanism!r}"
            )
        if self.sasl_mechanism == "PLAIN":
            if not self.sasl_plain_username or not isinstance(self.sasl_plain_username, str):
                raise InvalidRequestError("sasl_mechanism=PLAIN needs sasl_plain_username")
            if ":" in self.sasl_plain_username or not self.sasl_plain_username.isprintable():
                raise InvalidRequestError("sasl_plain_username must not contain ':' or control characters")
            if self.sasl_plain_password is None or not isinstance(self.sasl_plain_password, str):
                raise InvalidRequestError("sasl_mechanism=PLAIN needs sasl_plain_password")
            if not self.sasl_plain_password.isprintable():
                raise InvalidRequestError("sasl_plain_password must not contain control characters")
            if self.sasl_oauth_token is not None:
                raise InvalidRequestError("sasl_oauth_token needs sasl_mechanism=OAUTHBEARER")
        else:
            token = self.sasl_oauth_token
            if not token or not isinstance(token, str):
                raise InvalidRequestError("sasl_mechanism=OAUTHBEARER needs sasl_oauth_token")
            if not token.isprintable() or " " in token:
                raise InvalidRequestError("sasl_oauth_token must not contain spaces or control characters")
            if self.sasl_plain_username is not None or self.sasl_plain_password is not None:
                raise InvalidRequestError("sasl_plain_username/sasl_plain_password need sasl_mechanism=PLAIN")

    def for_urls(self, urls: Sequence[str]) -> ClientSecurity:
        """This security as it applies to broker base URLs ``urls`` (see the module docstring): SSL
        (SASL_SSL) when they are all ``https://`` and the protocol was a plaintext one. Pure.

        Raises:
            InvalidRequestError: an ``http://`` URL under SSL or SASL_SSL.
        """
        schemes = {urlsplit(url).scheme for url in urls}
        if "http" in schemes and self.tls:
            raise InvalidRequestError(
                f"security_protocol={self.security_protocol} encrypts, but a bootstrap server is an http:// "
                "URL: use https:// (or a bare host:port)"
            )
        if schemes == {"https"} and not self.tls:
            return replace(self, security_protocol=_TLS_OF[self.security_protocol])
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client SSL context (TLS 1.2 or newer, the broker's certificate verified), or None for the
        plaintext protocols. Built once (reads the PEM files: call it off the event loop the first time);
        safe to call from several threads.

        Raises:
            InvalidRequestError: a PEM file is missing or unreadable, or the key does not match the
            certificate (the message names the option and the path).
        """
        if not self.tls:
            return None
        with self._lock:
            if not self._context:
                self._context.append(self._build_context())
            return self._context[0]

    def _build_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=self.ssl_cafile)
        except (OSError, ssl.SSLError) as err:
            raise InvalidRequestError(f"ssl_cafile {self.ssl_cafile}: cannot load: {_reason(err)}") from err
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile is not None:
            try:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            except (OSError, ssl.SSLError) as err:
                files = self.ssl_certfile + (f" / ssl_keyfile {self.ssl_keyfile}" if self.ssl_keyfile else "")
                raise InvalidRequestError(f"ssl_certfile {files}: cannot load: {_reason(err)}") from err
        return context

    @property
    def ssl_loaded(self) -> bool:
        """:meth:`ssl_context` will answer without reading files (built already, or not needed)."""
        return not self.tls or bool(self._context)

    def connector_ssl(self) -> ssl.SSLContext | bool:
        """The ``ssl`` argument of ``aiohttp.TCPConnector``: the SSL context, or True (aiohttp's default
        verification) for the plaintext protocols, where no https URL is used. Raises as :meth:`ssl_context`.
        """
        context = self.ssl_context()
        return True if context is None else context

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of every request (``Basic`` or ``Bearer``), or ``{}``. Pure."""
        if not self.sasl:
            return {}
        if self.sasl_mechanism == "OAUTHBEARER":
            return {"Authorization": f"Bearer {self.sasl_oauth_token}"}
        pair = f"{self.sasl_plain_username}:{self.sasl_plain_password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}

    def options(self) -> dict[str, Any]:
        """The options as keyword arguments of a producer, consumer or config (``from_kwargs``). Pure."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def describe(self) -> str:
        """One line for logs and errors, without secrets."""
        parts = [self.security_protocol]
        if self.tls:
            parts.append(f"cafile={self.ssl_cafile or '(system)'}")
            if self.ssl_certfile:
                parts.append(f"certfile={self.ssl_certfile}")
            if not self.ssl_check_hostname:
                parts.append("no hostname check")
        if self.sasl:
            who = f"user={self.sasl_plain_username}" if self.sasl_mechanism == "PLAIN" else "bearer token"
            parts.append(f"{self.sasl_mechanism} {who}")
        return " ".join(parts)


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror and not isinstance(err, ssl.SSLError):
        return err.strerror
    return str(err) or type(err).__name__


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the client security options to ``parser`` (their ``dest`` names are what
    :func:`security_from_args` reads). The password of ``--username`` comes from ``$TIERLOG_PASSWORD`` only,
    never from the command line (where ``ps`` would show it)."""
    group = parser.add_argument_group("security")
    group.add_argument(
        "--security-protocol",
        choices=SECURITY_PROTOCOLS,
        default=None,
        help="PLAINTEXT, SSL (https), SASL_PLAINTEXT or SASL_SSL (credentials); default: inferred from the "
        "options below and the URL scheme",
    )
    group.add_argument("--ssl-cafile", metavar="PEM", help="CA bundle that verifies the broker's certificate")
    group.add_argument("--ssl-certfile", metavar="PEM", help="client certificate (mutual TLS)")
    group.add_argument("--ssl-keyfile", metavar="PEM", help="key of --ssl-certfile")
    group.add_argument(
        "--no-ssl-check-hostname",
        dest="ssl_check_hostname",
        action="store_false",
        default=True,
        help="do not check the broker's host name against its certificate (the chain is still verified)",
    )
    group.add_argument(
        "--username",
        metavar="NAME",
        help=f"authenticate with HTTP Basic; the password is read from ${PASSWORD_ENV}",
    )
    group.add_argument(
        "--bearer-token-file", metavar="FILE", help="authenticate with the bearer token in FILE"
    )


def security_from_args(args: argparse.Namespace) -> ClientSecurity:
    """The :class:`ClientSecurity` of options added by :func:`add_security_arguments`. Without
    ``--security-protocol`` the protocol follows the options: any ``--ssl-*`` option means TLS, ``--username``
    or ``--bearer-token-file`` means SASL (and an https bootstrap URL means TLS, see
    :meth:`ClientSecurity.for_urls`). Reads ``$TIERLOG_PASSWORD`` and the token file.

    Raises:
        InvalidRequestError: ``--username`` without ``$TIERLOG_PASSWORD``, both ``--username`` and
        ``--bearer-token-file``, an unreadable or empty token file, or what :class:`ClientSecurity` refuses.
    """
    username: str | None = getattr(args, "username", None)
    token_file: str | None = getattr(args, "bearer_token_file", None)
    cafile: str | None = getattr(args, "ssl_cafile", None)
    certfile: str | None = getattr(args, "ssl_certfile", None)
    keyfile: str | None = getattr(args, "ssl_keyfile", None)
    check_hostname: bool = getattr(args, "ssl_check_hostname", True)
    if username is not None and token_file is not None:
        raise InvalidRequestError("--username and --bearer-token-file exclude each other")
    password: str | None = None
    if username is not None:
        password = os.environ.get(PASSWORD_ENV)
        if password is None:
            raise InvalidRequestError(f"--username {username} needs its password in ${PASSWORD_ENV}")
    token = _read_token(token_file) if token_file is not None else None
    protocol: str | None = getattr(args, "security_protocol", None)
    if protocol is None:
        tls = any(value is not None for value in (cafile, certfile, keyfile)) or not check_hostname
        sasl = username is not None or token is not None
        protocol = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    return ClientSecurity(
        security_protocol=protocol,
        ssl_cafile=cafile,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
        ssl_check_hostname=check_hostname,
        sasl_mechanism="OAUTHBEARER" if token is not None else "PLAIN",
        sasl_plain_username=username,
        sasl_plain_password=password,
        sasl_oauth_token=token,
    )


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidRequestError(f"--bearer-token-file {path}: cannot read: {_reason(err)}") from err
    if not token:
        raise InvalidRequestError(f"--bearer-token-file {path} is empty")
    return token
