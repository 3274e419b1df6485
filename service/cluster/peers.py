"""One broker's HTTP client to the other brokers: one pooled ``aiohttp.ClientSession`` per broker process.

Brokers call each other for three things, each a thin user of the one :class:`PeerClient` (its own request
shapes only):

- replication (:class:`~tierlog.service.replication.client.ReplicationClient`: replica fetch, epoch end
  offset, alter partition),
- the REST v2 proxy (:class:`~tierlog.service.cluster.proxy.LeaderClient`: a partition's operation sent to
  its leader's native API),
- group forwarding (:class:`~tierlog.service.groups.routing.Forwarder`: a group request relayed whole to
  the group's coordinator).

The app owns the client (:data:`PEERS`): :func:`setup_peers` opens it before the broker opens its logs and
closes it after the broker closed them (an aiohttp cleanup context), so every peer call of the broker's
lifetime finds it open.

**Identity.** Every call is made as this broker (:func:`~tierlog.service.security.tls.broker_client_security`:
its TLS trust and client certificate, and its own ``Authorization``, sent by the session on every request),
never with a client's credentials.

**Timeouts.** A :class:`Budget` per kind of call: connecting within ``broker.session.timeout.ms`` (a
broker that cannot accept a connection within its session is as good as gone; ``None``: no limit of its
own) and the whole exchange within ``request.read.timeout.ms``, plus the long-poll wait the call asks the
peer for. Replication keeps its own budget (:data:`~tierlog.service.replication.manager.CLIENT_TIMEOUT_S`,
Kafka's ``replica.socket.timeout.ms``), forwarding its own (a forwarded join waits for its generation).

**Errors.** An error answer comes back as the broker's typed error
(:func:`~tierlog.wire.errors.error_from_answer`, by ``error_code``: a not-leader answer keeps the leader
it names, an out-of-range one the valid range). A peer that refuses the connection, or does not accept one
in time, is the caller's ``unreachable`` class (retriable: :class:`~tierlog.wire.errors.UnavailableError`
by default, :class:`~tierlog.wire.errors.LeaderNotAvailableError` for the proxy); one that accepted but
did not answer in time is :class:`~tierlog.wire.errors.UnavailableError` (50301). Each message names
the peer as the caller describes it.

**Forwarded requests** (:meth:`PeerClient.forwarded_headers`) carry the client's end-to-end headers
without its credentials, :data:`FORWARDED_BY` (this broker's id) and who the request is for
(:data:`~tierlog.service.security.authn.FORWARDED_PRINCIPAL`,
:data:`~tierlog.service.security.authn.FORWARDED_HOST`); the receiver honours those only from a broker.

The session's connector holds up to :data:`MAX_CONNECTIONS` connections (the three pools it replaces held
up to aiohttp's default of 100 each), kept alive and reused by every caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy
from yarl import URL

from tierlog.client.security import ClientSecurity
from tierlog.service.security.authn import CLIENT_HOST, FORWARDED_HOST, FORWARDED_PRINCIPAL, PRINCIPAL
from tierlog.service.security.tls import broker_client_security
from tierlog.service.web.keys import SETTINGS
from tierlog.wire.errors import TierlogError, UnavailableError, error_from_answer

if TYPE_CHECKING:
    from tierlog.service.settings.config import Settings

__all__ = [
    "FORWARDED_BY",
    "HOP_BY_HOP",
    "MAX_CONNECTIONS",
    "PEERS",
    "Budget",
    "PeerAnswer",
    "PeerClient",
    "relayed_headers",
    "setup_peers",
]

FORWARDED_BY = "Tierlog-Forwarded-By"
# RFC 9110 7.6.1 hop-by-hop fields, and what aiohttp sets itself for the new hop
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# The client's credentials and claims about who it forwards for never travel on: the broker sends its own.
NOT_FORWARDED = HOP_BY_HOP | {"authorization", FORWARDED_PRINCIPAL.lower(), FORWARDED_HOST.lower()}
MAX_CONNECTIONS = 300


@dataclass(frozen=True, slots=True)
class Budget:
    """How long one exchange may take: ``request_s`` for the whole of it (before the long-poll wait the
    call adds), of which ``connect_s`` for connecting (``None``: no limit of its own)."""

    request_s: float
    connect_s: float | None = None
    _no_wait: aiohttp.ClientTimeout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_no_wait", self._timeout(0))

    def timeout(self, wait_ms: int) -> aiohttp.ClientTimeout:
        """The timeout of a call that asks the peer to wait up to ``wait_ms`` (made once for no wait)."""
        return self._no_wait if wait_ms <= 0 else self._timeout(wait_ms)

    def _timeout(self, wait_ms: int) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.request_s + wait_ms / 1000, sock_connect=self.connect_s)


@dataclass(frozen=True, slots=True)
class PeerAnswer:
    """A peer's answer, read whole."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


class PeerClient:
    """This broker's one HTTP client to the others (see the module doc).

    :meth:`start` and :meth:`close` run in the app's cleanup context (:func:`setup_peers`); requests
    between them are safe to make concurrently from the event loop. ``broker_id``: this broker's id (read
    on each use: a broker learns it when it opens). ``security``: this broker's identity towards the
    others (default: plaintext, no credentials).
    """

    def __init__(
        self,
        broker_id: Callable[[], int],
        *,
        connect_ms: int,
        request_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self._broker_id = broker_id
        #: The default budget: connecting within ``connect_ms``, the whole exchange within ``request_ms``.
        self.budget = Budget(request_ms / 1000, connect_ms / 1000)
        self._security = security if security is not None else ClientSecurity()
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        #: Told the URL of every call refused, reset or unanswered in time, and of every call a caller
        #: finds overdue (:meth:`report_unresponsive`): the failure detector's evidence. Must not raise.
        self.on_unresponsive: Callable[[str], None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, broker_id: Callable[[], int]) -> PeerClient:
        """Connect within ``broker.session.timeout.ms``, answer within ``request.read.timeout.ms``, as
        :func:`~tierlog.service.security.tls.broker_client_security` says."""
        return cls(
            broker_id,
            connect_ms=settings.broker_session_timeout_ms,
            request_ms=settings.request_read_timeout_ms,
            security=broker_client_security(settings),
        )

    @property
    def broker_id(self) -> int:
        return self._broker_id()

    async def start(self) -> None:
        """Open the session on the app's event loop (the SSL context's PEM files are read in a worker
        thread). Idempotent. Raises InvalidRequestError: a TLS file of the broker cannot be used."""
        if self._session is None and not self._closed:
            ssl = await asyncio.to_thread(self._security.connector_ssl)
            if self._session is None and not self._closed:
                self._session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=ssl, limit=MAX_CONNECTIONS),
                    headers=self._security.headers(),
                    raise_for_status=False,
                )

    async def close(self) -> None:
        """Close the session and its connections for good (a later request fails with UnavailableError).
        Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def call(
        self,
        method: str,
        url: str | URL,
        *,
        peer: str,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        wait_ms: int = 0,
        budget: Budget | None = None,
        unreachable: type[TierlogError] = UnavailableError,
    ) -> PeerAnswer:
        """One exchange whose 2xx answer the caller reads: :meth:`exchange`, and an error answer raised.

        Raises:
            TierlogError: the error the peer answered (its class by ``error_code``), and as :meth:`exchange`.
        """
        answer = await self.exchange(
            method,
            url,
            peer=peer,
            params=params,
            headers=headers,
            data=data,
            wait_ms=wait_ms,
            budget=budget,
            unreachable=unreachable,
        )
        if answer.status >= 300:
            raise error_from_answer(answer.status, answer.body)
        return answer

    async def exchange(
        self,
        method: str,
        url: str | URL,
        *,
        peer: str,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        wait_ms: int = 0,
        budget: Budget | None = None,
        unreachable: type[TierlogError] = UnavailableError,
        relay: bool = False,
    ) -> PeerAnswer:
        """Send one request to ``url`` (a peer described as ``peer`` in errors) and read its answer whole,
        whatever its status. ``wait_ms``: the long poll the request asks for (added to the budget's whole
        exchange); ``budget``: default :attr:`budget`. ``relay``: the body as it came (still encoded) and
        redirects not followed, for an answer passed on unchanged. Idempotent when the request is.

        Raises:
            ``unreachable``: the peer refused the connection or did not accept one in time.
            UnavailableError: (50301) the peer did not answer in time, or this broker is not serving
                (not started, or closing).
        """
        session = self._session
        if session is None:
            raise UnavailableError(self._not_serving())
        timeout = (self.budget if budget is None else budget).timeout(wait_ms)
        try:
            async with session.request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout=timeout,
                allow_redirects=not relay,
                auto_decompress=not relay,
            ) as response:
                return PeerAnswer(response.status, response.headers, await response.read())
        except aiohttp.ConnectionTimeoutError as err:
            self.report_unresponsive(str(url))
            raise unreachable(
                f"{peer} did not accept a connection within {timeout.sock_connect or timeout.total:.0f} s"
            ) from err
        except TimeoutError:
            self.report_unresponsive(str(url))
            raise UnavailableError(f"{peer} did not answer within {timeout.total:.1f} s") from None
        except aiohttp.ClientError as err:
            if isinstance(err, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
                self.report_unresponsive(str(url))
            raise unreachable(f"{peer} is unreachable: {err or type(err).__name__}") from err

    def report_unresponsive(self, url: str) -> None:
        """Pass on that the peer at ``url`` refused, dropped or did not answer a call (see
        :attr:`on_unresponsive`). Never raises."""
        listener = self.on_unresponsive
        if listener is not None and not self._closed:
            listener(url)

    def forwarded_headers(self, request: web.Request) -> dict[str, str]:
        """The headers of ``request`` forwarded to another broker: the client's end-to-end headers without
        its credentials (the session sends this broker's own ``Authorization``), :data:`FORWARDED_BY`,
        and who the request is for when authentication named anyone. Pure."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED}
        headers[FORWARDED_BY] = str(self._broker_id())
        principal = request.get(PRINCIPAL)
        if principal is not None:
            headers[FORWARDED_PRINCIPAL] = str(principal)
        host = request.get(CLIENT_HOST)
        if host is not None:
            headers[FORWARDED_HOST] = host
        return headers

    def _not_serving(self) -> str:
        if self._closed:
            return f"broker {self._broker_id()} is closing: it no longer calls its peers"
        return f"broker {self._broker_id()} is not serving yet: it cannot call its peers"


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A peer's answer headers as passed on to the client: without the hop-by-hop ones and those the
    answering server sets itself (``Date``, ``Server``). Pure."""
    kept = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
    kept.pop("Date", None)
    kept.pop("Server", None)
    return kept


PEERS: web.AppKey[PeerClient] = web.AppKey("tierlog.cluster.peers", PeerClient)


def setup_peers(app: web.Application, broker_id: Callable[[], int]) -> PeerClient:
    """Give ``app`` its :class:`PeerClient` (from ``app[SETTINGS]``), opened on startup and closed on
    cleanup. Call once, before any other cleanup context that calls peers is added (the broker's), so the
    client opens before and closes after it."""
    peers = app[PEERS] = PeerClient.from_settings(app[SETTINGS], broker_id)

    async def peers_ctx(app: web.Application) -> AsyncIterator[None]:
        await peers.start()
        try:
            yield
        finally:
            await peers.close()

    app.cleanup_ctx.append(peers_ctx)
    return peers
