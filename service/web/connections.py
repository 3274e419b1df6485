"""Client connections: read and idle timeouts, a cap on open connections, rate-limited accept errors.

aiohttp closes an idle keep-alive connection only after it has answered a request, and never closes one
that sent half a request line. :class:`ConnectionGuard` wraps each connection's protocol and owns one
timer per connection:

* **idle** (``connections.max.idle.ms``, Kafka's name): no request in progress and nothing received;
* **read** (``request.read.timeout.ms``): a request's line, headers and body must all arrive within this
  long of its first byte. The timer covers the header phase (first byte until the app sees the request)
  and the body phase (until the request's body is at EOF); a handler that is waiting, such as a long
  poll, is not timed.

At most ``max.connections`` are open; one more is answered ``503`` (error code 50301) and closed.
:func:`install_accept_error_handler` turns the event loop's ``socket.accept()`` failures (EMFILE, ENFILE)
into one WARNING per interval and the counter ``tierlog_accept_errors_total``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tierlog.service.metrics import Metrics, Sample
from tierlog.service.web.sniff import SniffingProtocol, refusal_on_plaintext

__all__ = ["ConnectionGuard", "GuardedSite", "install_accept_error_handler"]

log = logging.getLogger("tierlog.connections")

_IDLE, _HEADERS, _HANDLING = "idle", "headers", "handling"


class _GuardedProtocol(asyncio.Protocol):
    """Forwards every protocol call to aiohttp's request handler and keeps this connection's timer."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._phase = _IDLE
        self._request: web.BaseRequest | None = None
        self._admitted = False
        self._first = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if not self._guard.admit(self):
            self._refuse(transport)
            return
        self._admitted = True
        self._inner.connection_made(transport)
        self._arm(self._guard.idle_s)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if self._first:
            self._first = False
            transport = self._transport
            if (
                transport is not None
                and transport.get_extra_info("sslcontext") is None
                and refusal_on_plaintext(data, transport, self._guard.kafka_endpoint())
            ):
                transport.close()
                return
        if self._phase == _IDLE:
            self._phase = _HEADERS
            self._arm(self._guard.read_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._admitted:
            self._guard.release(self)
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def request_started(self, request: web.BaseRequest) -> None:
        """The app has the request's headers; the timer now waits for its body only."""
        self._phase = _HANDLING
        self._request = request
        if request.content.is_eof():
            self._cancel_timer()

    def request_finished(self) -> None:
        self._phase = _IDLE
        self._request = None
        self._arm(self._guard.idle_s)

    def _arm(self, delay: float) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        request = self._request
        if self._phase == _HANDLING and (request is None or request.content.is_eof()):
            return  # the whole request arrived; a handler that waits (a long poll) is not timed
        reason = "idle" if self._phase == _IDLE else "read"
        self._guard.count_timeout(reason)
        log.debug("closing a connection after its %s timeout", reason)
        if self._transport is not None:
            self._transport.close()

    def _refuse(self, transport: asyncio.Transport) -> None:
        body = json.dumps(
            {
                "error_code": 50301,
                "message": f"too many connections (max.connections={self._guard.max_connections}); retry",
            }
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Retry-After: 1\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        transport.write(head.encode() + body)
        transport.close()


class ConnectionGuard:
    """The timeouts and the connection cap of one listening server. Use from the event loop only."""

    def __init__(self, *, idle_ms: int, read_ms: int, max_connections: int, metrics: Metrics) -> None:
        self.idle_s = idle_ms / 1000
        self.read_s = read_ms / 1000
        self.max_connections = max_connections
        # where the Kafka listener is, for the log line when a Kafka client reaches an HTTP port
        self.kafka_endpoint: Callable[[], str | None] = lambda: None
        self._metrics = metrics
        self._open: dict[asyncio.BaseTransport, _GuardedProtocol] = {}
        metrics.describe("tierlog_connections_open", "gauge", "Client connections open now")
        metrics.describe(
            "tierlog_connections_rejected_total", "counter", "Connections answered 503 by max.connections"
        )
        metrics.describe(
            "tierlog_connection_timeouts_total", "counter", "Connections closed by an idle or read timeout"
        )
        metrics.add_collector(lambda: [Sample("tierlog_connections_open", float(len(self._open)))])

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` that guards what ``factory`` makes."""
        return lambda: _GuardedProtocol(self, factory())

    def admit(self, protocol: _GuardedProtocol) -> bool:
        if len(self._open) >= self.max_connections:
            self._metrics.inc("tierlog_connections_rejected_total")
            return False
        assert protocol._transport is not None
        self._open[protocol._transport] = protocol
        return True

    def release(self, protocol: _GuardedProtocol) -> None:
        if protocol._transport is not None:
            self._open.pop(protocol._transport, None)

    def count_timeout(self, reason: str) -> None:
        self._metrics.inc("tierlog_connection_timeouts_total", reason=reason)

    def middleware(self) -> Middleware:
        """Tell each connection's timer when its request reached the app and when it was answered."""

        @web.middleware
        async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            protocol = None if transport is None else self._open.get(transport)
            if protocol is None:
                return await handler(request)
            protocol.request_started(request)
            try:
                return await handler(request)
            finally:
                protocol.request_finished()

        return guard_middleware


class GuardedSite(web.TCPSite):
    """A :class:`aiohttp.web.TCPSite` whose connections go through a :class:`ConnectionGuard`; it speaks
    TLS with ``ssl_context`` (plaintext when None)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._guard = guard
        self._tls = ssl_context

    async def start(self) -> None:
        """Listen. On a TLS port every connection's first bytes are looked at before the handshake, so
        plain HTTP is answered in plain HTTP (:class:`~tierlog.service.web.sniff.SniffingProtocol`)."""
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guarded = self._guard.wrap(server)
        tls = self._tls
        factory: Callable[[], asyncio.Protocol] = guarded
        if tls is not None:

            def factory() -> asyncio.Protocol:
                return SniffingProtocol(guarded, tls, kafka=self._guard.kafka_endpoint)

        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )


def install_accept_error_handler(
    loop: asyncio.AbstractEventLoop,
    metrics: Metrics,
    interval_ms: int,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Count every ``socket.accept()`` failure the loop reports and log one WARNING per interval.

    asyncio reports each failed accept (with a traceback) through the loop's exception handler and retries
    a second later; at an fd limit that is a flood. Other reports go to the handler that was installed
    before (or the default one). Not idempotent: install once per loop.
    """
    previous = loop.get_exception_handler()
    metrics.describe("tierlog_accept_errors_total", "counter", "Failures to accept a client connection")
    state = {"last": float("-inf"), "suppressed": 0}

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if not message.startswith("socket.accept()"):
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        exc = context.get("exception")
        metrics.inc("tierlog_accept_errors_total")
        now = clock()
        if now - state["last"] < interval_ms / 1000:
            state["suppressed"] += 1
            return
        log.warning(
            "cannot accept connections: %s (%d more since the last report); lower max.connections or "
            "raise the file descriptor limit",
            exc if exc is not None else message,
            state["suppressed"],
        )
        state["last"], state["suppressed"] = now, 0

    loop.set_exception_handler(handler)
