"""Protocol mix-ups on the HTTP ports, named (issue 35).

The first bytes a client sends tell what it speaks: a TLS handshake record starts ``16 03``; an HTTP/1
request starts with an ASCII method; a Kafka request starts with a 4-byte big-endian size (below 16 MiB,
so its first byte is 0) and a 2-byte API key and version. Without a look at them a mix-up shows as a bare
disconnect ("Server disconnected", librdkafka's "Invalid response size 1213486160" — the bytes ``HTTP``
read as a size). So:

* on a **TLS** port, plain HTTP is answered ``400`` in plain HTTP with a body saying to use ``https://``
  (curl, browsers and aiohttp show it), and a Kafka client is closed; both with a WARNING naming the
  mix-up;
* on a **plaintext** port, a TLS handshake and a Kafka client are closed with a WARNING naming the
  mix-up and where to go instead (neither protocol can show an HTTP answer).

:func:`classify` is the sans-io part; :class:`SniffingProtocol` sits in front of a TLS port's connections
(a plaintext port's first bytes are checked by :class:`~tierlog.service.web.connections.ConnectionGuard`'s
protocol, see :func:`refusal_on_plaintext`). The Kafka listener names the opposite mix-ups itself.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Literal

from tierlog.wire.native import HTTP_ON_TLS_PORT

__all__ = ["classify", "SniffingProtocol", "refusal_on_plaintext", "HTTP_ON_TLS_PORT"]

log = logging.getLogger("tierlog.connections")

Kind = Literal["tls", "http", "kafka", "unknown"]

_HTTP_METHODS = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"PATC", b"OPTI", b"CONN", b"TRAC", b"PRI ")
_MAX_KAFKA_API_KEY = 200
_MAX_KAFKA_API_VERSION = 50
SNIFF_TIMEOUT_S = 60  # as asyncio's default TLS handshake timeout: a silent client is closed after it


def classify(first: bytes) -> Kind:
    """What protocol a connection's first bytes (at least one) speak. Pure."""
    if first[:1] == b"\x16" and first[1:2] in (b"\x03", b""):
        return "tls"
    if first[:4] in _HTTP_METHODS or (len(first) < 4 and any(m.startswith(first) for m in _HTTP_METHODS)):
        return "http"
    if len(first) >= 8 and first[0] == 0:
        size = int.from_bytes(first[:4], "big")
        api_key = int.from_bytes(first[4:6], "big", signed=True)
        version = int.from_bytes(first[6:8], "big", signed=True)
        if size >= 4 and 0 <= api_key <= _MAX_KAFKA_API_KEY and 0 <= version <= _MAX_KAFKA_API_VERSION:
            return "kafka"
    return "unknown"


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


def refusal_on_plaintext(first: bytes, transport: asyncio.BaseTransport, kafka: str | None) -> bool:
    """On a plaintext HTTP port: log and return True when ``first`` is a TLS handshake or a Kafka request
    (the caller closes the connection); False for anything else (HTTP, or junk aiohttp answers 400)."""
    kind = classify(first)
    port = _port(transport)
    if kind == "tls":
        log.warning(
            "a TLS handshake from %s reached tierlog's plaintext HTTP port %d: the client uses https:// or "
            "TLS but this port speaks plain HTTP; use http://, or the broker's TLS port",
            _peer(transport),
            port,
        )
        return True
    if kind == "kafka":
        log.warning(
            "a Kafka protocol client from %s reached tierlog's HTTP port %d; point it at the Kafka "
            "listener%s (bootstrap.servers), not the HTTP API",
            _peer(transport),
            port,
            f" at {kafka}" if kafka else " (kafka.listener)",
        )
        return True
    return False


def _port(transport: asyncio.BaseTransport) -> int:
    sock = transport.get_extra_info("sockname")
    return int(sock[1]) if isinstance(sock, tuple) else 0


class SniffingProtocol(asyncio.Protocol):
    """A TLS port's connection until its first bytes arrive: a TLS handshake is handed to an SSL protocol
    around ``inner`` (what ``loop.create_server(..., ssl=context)`` would have built), the bytes fed to
    it; plain HTTP is answered 400 naming ``https://``; a Kafka client is closed; each mix-up logged.

    One per connection, event-loop only.
    """

    def __init__(
        self,
        inner: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext,
        *,
        kafka: Callable[[], str | None],
        handshake_timeout_s: int = SNIFF_TIMEOUT_S,
    ) -> None:
        self._inner = inner
        self._context = context
        self._kafka = kafka
        self._handshake_timeout_s = handshake_timeout_s
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._handshake_timeout_s, transport.close)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        self._cancel_timer()
        kind = classify(data)
        if kind == "http":
            host, port = _host_port(transport)
            log.warning(
                "a plain HTTP request from %s reached tierlog's TLS port %d: answered 400, use https://",
                _peer(transport),
                port,
            )
            body = HTTP_ON_TLS_PORT.format(host=host, port=port).encode()
            head = (
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            transport.write(head.encode() + body)
            transport.close()
            return
        if kind == "kafka":
            kafka = self._kafka()
            log.warning(
                "a Kafka protocol client from %s reached tierlog's HTTPS port %d; point it at the Kafka "
                "listener%s (bootstrap.servers), not the HTTP API",
                _peer(transport),
                _port(transport),
                f" at {kafka}" if kafka else " (kafka.listener)",
            )
            transport.close()
            return
        # TLS (or bytes nothing else claims: the handshake fails as it would have without the look)
        tls = sslproto.SSLProtocol(
            asyncio.get_running_loop(),
            self._inner(),
            self._context,
            None,  # type: ignore[arg-type]  # no waiter: the guarded protocol learns of the handshake
            server_side=True,
            ssl_handshake_timeout=self._handshake_timeout_s,
        )
        transport.set_protocol(tls)
        tls.connection_made(transport)
        asyncio.protocols._feed_data_to_buffered_proto(tls, data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:
        self._cancel_timer()
        return None  # closes the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _host_port(transport: asyncio.BaseTransport) -> tuple[str, int]:
    sock = transport.get_extra_info("sockname")
    if isinstance(sock, tuple):
        host = str(sock[0])
        return (f"[{host}]" if ":" in host else host), int(sock[1])
    return "localhost", 0
