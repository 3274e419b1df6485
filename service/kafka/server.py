"""The Kafka protocol listener: a TCP server speaking Kafka's request/response protocol over the same
topics, partitions and groups as the HTTP APIs (one system, two doors).

Each connection is served in order, one request at a time, as Kafka's own broker does (it stops reading a
connection while a request of it is in flight): frames are read with the size bound
``socket.request.max.bytes``, decoded with :mod:`.frames` and :mod:`.messages`, answered by the handler
:mod:`.apis` registers for the API key, and written back. A client that asks for a version we do not
serve gets ApiVersions' answer (error UNSUPPORTED_VERSION and the versions we serve, in v0's layout, as
Kafka answers); any other unknown key or version, an undecodable body, an oversized frame or a handler
failure is logged and the connection closed, never a crash of the listener. An HTTP request or a TLS
handshake sent to this port is named in the log (and an HTTP client gets a plain 400 saying where the HTTP
API is), since that mix-up is the common one.

Idle connections are closed after ``connections.max.idle.ms``; at most ``max.connections`` are open. A
frame not wholly received ``request.read.timeout.ms`` after its first byte, or an answer the client does
not read within ``connections.max.idle.ms``, closes the connection (logged as a warning): a stalled client
holds at most one request and one answer in memory.

The API handlers (and kio's schemas under them) are imported in a worker thread when the first request
arrives, not at start: a broker's start-up does not pay for them, the first request waits for them once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierlog.service.kafka.apis import (
    API_VERSIONS_KEY,
    REGISTRY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    CloseConnection,
)
from tierlog.service.kafka.context import KafkaRequest, Session
from tierlog.service.kafka.frames import FrameError, RequestHeader, parse_request_header, response_frame
from tierlog.service.kafka.spliced import Outgoing, SplicedAnswer, splice
from tierlog.service.metrics import Sample
from tierlog.service.security.acl import canonical_host
from tierlog.service.security.model import ANONYMOUS, Principal
from tierlog.service.security.principal_rules import PrincipalMapper, subject_name
from tierlog.service.topics.send_region import sendfile_region
from tierlog.wire.errors import CorruptRecordError, TierlogError

if TYPE_CHECKING:
    from aiohttp import web

    from tierlog.service.metrics import Metrics
    from tierlog.service.security.authn import Authenticator
    from tierlog.service.security.authz import Authorizer
    from tierlog.service.security.tls import ServerTls
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.broker import Broker

__all__ = ["KafkaListener"]

log = logging.getLogger("tierlog.kafka")

_SIZE_BYTES = 4
# imported on the first request (registers every API with :mod:`.apis`)
_HANDLERS = "tierlog.service.kafka.handlers"
PRE_AUTHENTICATION_MAX_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size default
# What other protocols' first bytes look like, to name a mix-up in the log.
_HTTP_STARTS = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"PATC", b"OPTI", b"HTTP", b"CONN")
_TLS_HANDSHAKE = b"\x16\x03"
#: Answered before a connection has authenticated: ApiVersions, SaslHandshake, SaslAuthenticate.
_BEFORE_AUTHENTICATION = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
_SASL_KEYS = frozenset({SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
#: What a bare SASL token (after SaslHandshake v0) is handled as: a SaslHandshake v0's step.
_RAW_TOKEN_HEADER = RequestHeader(SASL_HANDSHAKE_KEY, 0, 0, None, 0)
#: The SASL mechanisms each ``authentication.methods`` entry offers on the Kafka listener.
_MECHANISMS = {"basic": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), "bearer": ("OAUTHBEARER",)}


class _Close(Exception):
    """End this connection (after logging why)."""


class KafkaListener:
    """The listener of one broker. :meth:`start` binds; :meth:`close` stops accepting, cancels every
    connection's task and waits for them. Owned by the app (a cleanup context)."""

    def __init__(
        self,
        broker: Broker,
        settings: Settings,
        metrics: Metrics,
        address: tuple[str, int],
        *,
        tls: ServerTls | None = None,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.metrics = metrics
        self.tls = tls
        self.authenticator = authenticator
        self.authorizer = authorizer
        security = settings.security
        self.sasl_mechanisms: tuple[str, ...] = tuple(
            m for method in security.authentication_methods for m in _MECHANISMS.get(method, ())
        )
        self._mapper = (
            PrincipalMapper.parse(security.ssl_principal_mapping_rules)
            if "mtls" in security.authentication_methods and tls is not None
            else None
        )
        #: Kafka's name of what this listener speaks: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        self.security_protocol = ("SASL_" if self.sasl_mechanisms else "") + (
            "SSL" if tls is not None else "PLAINTEXT"
        )
        self._address = address
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False  # set by close(): cancelled connections then end quietly
        self._handlers_loaded = False
        self.bound: tuple[str, int] | None = None
        # The app this listener serves in (set by :mod:`.setup`): the group machinery lives in it.
        self.app: web.Application | None = None
        metrics.describe("tierlog_kafka_requests_total", "counter", "Kafka protocol requests, by API")
        metrics.describe(
            "tierlog_kafka_connections_closed_total", "counter", "Kafka connections closed, by reason"
        )
        metrics.describe("tierlog_kafka_connections_open", "gauge", "Kafka connections open now")
        metrics.describe(
            "tierlog_kafka_zero_copy_bytes_total",
            "counter",
            "Record bytes of Fetch answers sent with sendfile, not copied through the broker",
        )
        metrics.add_collector(
            lambda: [Sample("tierlog_kafka_connections_open", float(len(self._connections)))]
        )

    @property
    def open_connections(self) -> int:
        """Connections being served now (refused ones never count). Read-only; for metrics and tests."""
        return len(self._connections)

    @property
    def advertised(self) -> tuple[str, int]:
        """The ``(host, port)`` clients are told to connect to: ``kafka.advertised.listener``, else the
        bound address."""
        configured = self.settings.kafka_advertised_listener
        if configured is not None:
            return configured
        assert self.bound is not None, "the listener is not bound yet"
        return self.bound

    async def start(self) -> None:
        """Bind and start accepting. Raises OSError when the address cannot be bound."""
        host, port = self._address
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=None if self.tls is None else self.tls.listening,
            ssl_handshake_timeout=None if self.tls is None else self.settings.request_read_timeout_ms / 1000,
        )
        sockname = self._server.sockets[0].getsockname()
        self.bound = (host, int(sockname[1]))
        log.info(
            "Kafka protocol listener on %s:%d (%s%s)",
            host,
            self.bound[1],
            self.security_protocol,
            f", SASL mechanisms {','.join(self.sasl_mechanisms)}" if self.sasl_mechanisms else "",
        )

    async def close(self) -> None:
        """Stop accepting and end every connection. Idempotent."""
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if server is not None:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    # ---- connections ----------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername") or ("?", 0)
        peer = (str(peername[0]), int(peername[1]))
        if self._closing:  # accepted as the listener closed: close() will not see this task
            writer.close()
            return
        if len(self._connections) >= self.settings.max_connections:
            self._closed("max_connections")
            log.warning(
                "Kafka connection from %s:%d refused: max.connections=%d reached",
                *peer,
                self.settings.max_connections,
            )
            writer.close()
            return
        self._connections.add(task)
        session: Session | None = None
        try:
            session = self._session(writer, peer)
            await self._serve(reader, writer, peer, session)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # cancelled by close(): this task is the top of its connection, and asyncio would report the
            # cancellation from the server's callback as an error; end quietly instead
            self._closed("shutdown")
        except _Close:
            pass
        except (ConnectionError, asyncio.IncompleteReadError):
            self._closed("peer")
        except Exception:
            self._closed("error")
            log.exception("Kafka connection from %s:%d failed", *peer)
        finally:
            if session is not None and self._handlers_loaded:  # else no SASL exchange ever started
                from tierlog.service.kafka.handlers.sasl import abandon_scram

                abandon_scram(self.authenticator, session)
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _session(self, writer: asyncio.StreamWriter, peer: tuple[str, int]) -> Session:
        """A new connection's security state: anonymous with authentication off; on a listener without
        SASL, authenticated by its client certificate (``mtls``); else unauthenticated until SASL (on a
        SASL_SSL listener the SASL user is the principal, as in Kafka, whatever certificate was presented).
        Raises _Close (after logging) when the connection can never authenticate."""
        session = Session(host=canonical_host(peer[0]))
        if not self.settings.security.enabled:
            return session
        session.principal = (
            None if self.sasl_mechanisms else self._certificate_principal(writer, session.host)
        )
        if session.principal is None and not self.sasl_mechanisms:
            self._closed("authentication")
            log.warning(
                "Kafka connection from %s:%d closed: it presented no client certificate mapped to a user, "
                "and this listener (%s) offers no SASL mechanism",
                *peer,
                self.security_protocol,
            )
            raise _Close
        return session

    def _certificate_principal(self, writer: asyncio.StreamWriter, host: str) -> Principal | None:
        if self._mapper is None:
            return None
        ssl_object = writer.get_extra_info("ssl_object")
        der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
        if der is None:
            return None
        try:
            return Principal.user(self._mapper.map(subject_name(der)))
        except ValueError:
            return None

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: tuple[str, int],
        session: Session,
    ) -> None:
        idle_s = self.settings.connections_max_idle_ms / 1000
        first = True
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    start = await reader.readexactly(1)
            except TimeoutError:
                self._closed("idle")
                raise _Close from None
            except asyncio.IncompleteReadError:
                if not first:
                    self._closed("peer")
                raise _Close from None
            # from a frame's first byte, all of it within request.read.timeout.ms
            read_deadline = asyncio.get_running_loop().time() + self.settings.request_read_timeout_ms / 1000
            try:
                async with asyncio.timeout_at(read_deadline):
                    prefix = start + await reader.readexactly(_SIZE_BYTES - 1)
                    if first:
                        first = False
                        if self.tls is None:
                            self._check_protocol(prefix, writer, peer)
                    size = self._frame_size(prefix, peer, authenticated=session.principal is not None)
                    frame = await reader.readexactly(size)
            except TimeoutError:
                self._closed("read_timeout")
                log.warning(
                    "Kafka connection from %s:%d closed: a frame not received within "
                    "request.read.timeout.ms=%d",
                    *peer,
                    self.settings.request_read_timeout_ms,
                )
                raise _Close from None
            answer = await self.process(frame, peer, session, zero_copy=self.tls is None)
            if answer is not None:
                await self._send(writer, answer, peer, idle_s)
            if session.close_after_answer:
                self._closed("authentication")
                raise _Close

    async def _send(
        self, writer: asyncio.StreamWriter, answer: bytes | Outgoing, peer: tuple[str, int], idle_s: float
    ) -> None:
        """Write ``answer`` (its regions with ``sendfile``) and wait until the transport took it all.
        Closes the answer's regions. Raises _Close (after logging) when the client reads none of it for
        ``connections.max.idle.ms``, or a region's file ended early (the frame can only be cut short)."""
        try:
            async with asyncio.timeout(idle_s):
                if isinstance(answer, bytes):
                    writer.write(answer)
                else:
                    zero_copied = await _write_parts(writer, answer)
                    self.metrics.inc("tierlog_kafka_zero_copy_bytes_total", float(zero_copied))
                await writer.drain()
        except TimeoutError:
            writer.transport.abort()  # close() would wait for the unread bytes forever
            self._closed("write_timeout")
            log.warning(
                "Kafka connection from %s:%d closed: it read no answer for connections.max.idle.ms=%d",
                *peer,
                self.settings.connections_max_idle_ms,
            )
            raise _Close from None
        except CorruptRecordError as err:
            writer.transport.abort()
            self._closed("short_region")
            log.warning("Kafka connection from %s:%d closed midway through an answer: %s", *peer, err)
            raise _Close from None
        finally:
            if not isinstance(answer, bytes):
                answer.close()

    def _frame_size(self, prefix: bytes, peer: tuple[str, int], *, authenticated: bool) -> int:
        """The size a frame's prefix declares. Raises _Close (after logging) when it is negative or past
        ``socket.request.max.bytes`` (past 512 KiB before a SASL listener's client has authenticated, as
        Kafka's ``sasl.server.max.receive.size`` bounds it: strangers do not get 100 MiB buffers)."""
        size = int.from_bytes(prefix, "big", signed=True)
        limit = self.settings.socket_request_max_bytes
        if not authenticated and self.sasl_mechanisms:
            limit = min(limit, PRE_AUTHENTICATION_MAX_BYTES)
        if size < 0 or size > limit:
            self._closed("oversized")
            log.warning(
                "Kafka connection from %s:%d closed: a frame of %d bytes (limit %d%s)",
                *peer,
                size,
                limit,
                "" if limit == self.settings.socket_request_max_bytes else " before authentication",
            )
            raise _Close
        return size

    def _check_protocol(self, prefix: bytes, writer: asyncio.StreamWriter, peer: tuple[str, int]) -> None:
        if prefix.startswith(_TLS_HANDSHAKE):
            self._closed("protocol")
            log.warning(
                "a TLS handshake from %s:%d reached the plaintext Kafka listener on port %d: the client "
                "uses SSL but this listener is PLAINTEXT",
                *peer,
                self.bound[1] if self.bound else 0,
            )
            raise _Close
        if prefix in _HTTP_STARTS:
            self._closed("protocol")
            http = self.broker.advertised_url
            log.warning(
                "an HTTP request from %s:%d reached the Kafka protocol listener; the HTTP API is at %s",
                *peer,
                http,
            )
            text = f"This is tierlog's Kafka protocol listener. The HTTP API is at {http}\n".encode()
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(text)}\r\n\r\n".encode()
                + text
            )
            raise _Close

    def _closed(self, reason: str) -> None:
        self.metrics.inc("tierlog_kafka_connections_closed_total", 1.0, reason=reason)

    # ---- one request ----------------------------------------------------------------------------------

    async def _raw_token(self, frame: bytes, peer: tuple[str, int], session: Session) -> bytes:
        """The answer to a bare SASL token after a SaslHandshake v0. Raises _Close (after logging) when
        authentication fails or cannot go on."""
        from tierlog.service.kafka.handlers.sasl import raw_token

        request = KafkaRequest(_RAW_TOKEN_HEADER, self, peer, session)
        try:
            return await raw_token(request, frame)
        except (CloseConnection, TierlogError) as err:
            self._closed(err.reason if isinstance(err, CloseConnection) else "authentication")
            log.warning("Kafka connection from %s:%d closed: %s", *peer, err)
            raise _Close from None

    async def _load_handlers(self) -> None:
        """Import every API's handler (which registers it) in a worker thread; the import system's module
        locks make concurrent first requests wait for the one import."""
        await asyncio.to_thread(importlib.import_module, _HANDLERS)
        self._handlers_loaded = True

    async def process(
        self, frame: bytes, peer: tuple[str, int], session: Session | None = None, *, zero_copy: bool = False
    ) -> bytes | Outgoing | None:
        """The answer frame to one request frame, or None when the request has no answer. ``session``
        is the connection's (None: an anonymous one). With ``zero_copy`` (a plaintext connection), an
        answer may come as an :class:`~.spliced.Outgoing` whose record bytes stay in files: the caller
        sends its parts in order and closes it.

        Raises _Close (after logging) when the connection must end: an unreadable header or body, an API
        key or version not served (other than ApiVersions), a request other than ApiVersions and SASL's
        before the connection authenticated (as Kafka does), a handler failure.
        """
        if not self._handlers_loaded:
            await self._load_handlers()
        from tierlog.service.kafka.handlers.api_versions import unsupported_version_answer
        from tierlog.service.kafka.handlers.sasl import session_expired
        from tierlog.service.kafka.messages import (
            DecodeError,
            decode_request,
            is_flexible,
        )

        if session is None:
            session = Session(host=canonical_host(peer[0]), principal=ANONYMOUS)
        if session.raw_tokens and session.mechanism is not None:
            return await self._raw_token(frame, peer, session)
        try:
            fixed = parse_request_header(frame, flexible=None)
        except FrameError as err:
            self._closed("malformed")
            log.warning("Kafka connection from %s:%d closed: %s", *peer, err)
            raise _Close from None
        served = REGISTRY.get(fixed.api_key)
        if served is None or not served.serves(fixed.api_version):
            if fixed.api_key == API_VERSIONS_KEY:
                body = unsupported_version_answer()
                return response_frame(fixed.correlation_id, body, flexible_header=False)
            self._closed("unsupported")
            what = f"API key {fixed.api_key}" if served is None else f"{served.name} v{fixed.api_version}"
            log.warning(
                "Kafka connection from %s:%d (client %r) closed: %s is not served",
                *peer,
                fixed.client_id,
                what,
            )
            raise _Close
        if fixed.api_key not in _SASL_KEYS and session_expired(session):
            self._closed("session_expired")
            log.info(
                "Kafka connection from %s:%d (client %r) closed: its SASL session expired and it did not "
                "re-authenticate (connections.max.reauth.ms=%d, or its token's expiry)",
                *peer,
                fixed.client_id,
                self.settings.connections_max_reauth_ms,
            )
            raise _Close
        if session.principal is None and fixed.api_key not in _BEFORE_AUTHENTICATION:
            self._closed("unauthenticated")
            log.warning(
                "Kafka connection from %s:%d (client %r) closed: %s before authenticating (this listener "
                "is %s)",
                *peer,
                fixed.client_id,
                served.name,
                self.security_protocol,
            )
            raise _Close
        flexible = is_flexible(fixed.api_key, fixed.api_version)
        try:
            header = parse_request_header(frame, flexible=flexible)
            body = decode_request(fixed.api_key, fixed.api_version, frame, header.body_offset)
        except (FrameError, DecodeError) as err:
            self._closed("malformed")
            log.warning(
                "Kafka connection from %s:%d closed: %s v%d request does not decode: %s",
                *peer,
                served.name,
                fixed.api_version,
                err,
            )
            raise _Close from None
        self.metrics.inc("tierlog_kafka_requests_total", 1.0, api=served.name)
        request = KafkaRequest(header, self, peer, session, zero_copy)
        started = time.perf_counter()
        try:
            answer = await served.handler(request, body)
            if answer is None:
                return None
            return _encode(fixed.api_key, fixed.api_version, header.correlation_id, answer)
        except asyncio.CancelledError:
            raise
        except CloseConnection as err:
            self._closed(err.reason)
            log.warning("Kafka connection from %s:%d closed: %s", *peer, err)
            raise _Close from None
        except Exception as err:
            if isinstance(err, TierlogError) and err.retriable:
                # a passing refusal with no field for it in this API's answer (a broker that is starting
                # or stopping): the client reconnects and retries, as after Kafka's disconnect
                self._closed("retriable")
                log.warning(
                    "Kafka %s v%d from %s:%d not served, closing the connection: %s",
                    served.name,
                    fixed.api_version,
                    *peer,
                    err,
                )
            else:  # a bug: whatever the domain refuses belongs in the answer
                self._closed("error")
                log.exception(
                    "Kafka %s v%d from %s:%d failed; closing the connection",
                    served.name,
                    fixed.api_version,
                    *peer,
                )
            raise _Close from None
        finally:
            elapsed = time.perf_counter() - started
            if elapsed > 5:
                log.info("Kafka %s took %.1f s", served.name, elapsed)


def _encode(
    api_key: int, version: int, correlation_id: int, answer: Mapping[str, Any] | SplicedAnswer
) -> bytes | Outgoing:
    """The answer frame of a handler's ``answer``: bytes, or the parts of a spliced one (whose regions it
    then owns; they are closed here when encoding fails). Raises what encoding raises (a handler's bug)."""
    from tierlog.service.kafka.messages import encode_response, is_flexible, response_class, shape

    spliced = answer if isinstance(answer, SplicedAnswer) else None
    try:
        data = answer.answer if isinstance(answer, SplicedAnswer) else answer
        entity = shape(response_class(api_key, version), data)
        encoded = encode_response(entity)
        flexible = is_flexible(api_key, version)
        flexible_header = flexible and api_key != API_VERSIONS_KEY
        if spliced is None:
            return response_frame(correlation_id, encoded, flexible_header=flexible_header)
        return splice(
            correlation_id, encoded, spliced.regions, flexible=flexible, flexible_header=flexible_header
        )
    except BaseException:
        if spliced is not None:
            spliced.close()
        raise


async def _write_parts(writer: asyncio.StreamWriter, answer: Outgoing) -> int:
    """Write ``answer``'s bytes and ``sendfile`` its regions, in order (a region is copied in a worker
    thread when the transport cannot sendfile); the bytes sent with sendfile. Raises ConnectionError,
    CorruptRecordError (a region's file ended early), OSError."""
    zero_copied = 0
    for part in answer.parts:
        if isinstance(part, bytes):
            writer.write(part)
        elif await sendfile_region(writer.transport, part):
            zero_copied += part.size
        else:
            data = await asyncio.to_thread(part.read)
            if len(data) < part.size:
                raise CorruptRecordError(f"a segment file ended {part.size - len(data)} bytes early")
            writer.write(data)
    return zero_copied
