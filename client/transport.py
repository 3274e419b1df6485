"""One HTTP session to one broker, and the native data-path calls on it.

:class:`BrokerClient` owns an aiohttp ``ClientSession`` (connection pooling, keep-alive) and turns every
failure into a typed error: an error answer through :func:`tierlog.client.errors.error_from_response`, a
refused or reset connection into :class:`~tierlog.client.errors.BrokerUnavailableError`, no answer within the
request timeout into :class:`~tierlog.client.errors.RequestTimeoutError`. Both are retriable; nothing here
retries (callers decide). A TLS handshake refused over a certificate (the broker's does not verify, or the
broker wants one from the client) is :class:`~tierlog.wire.errors.UnauthorizedError`, not retriable, as
Kafka's ``SslAuthenticationException``; but under TLS 1.3 a broker refuses a missing client certificate after
the handshake and the client sees only a closed connection, a BrokerUnavailableError whose message says so.
A :class:`~tierlog.client.security.ClientSecurity` gives the session its SSL context and ``Authorization``
header.

All methods are coroutines for the event loop the client was started on; concurrent calls are safe (aiohttp
pools connections). None of them is idempotent unless it says so.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import quote

import aiohttp

from tierlog.client.errors import BrokerUnavailableError, RequestTimeoutError, error_from_response
from tierlog.client.security import ClientSecurity
from tierlog.wire.errors import InvalidRequestError, UnauthorizedError
from tierlog.wire.native import (
    BATCHES_TYPE,
    HIGH_WATERMARK,
    HTTP_ON_TLS_PORT,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    partition_path,
    topic_path,
)

__all__ = ["BATCHES_TYPE", "BrokerClient", "FetchAnswer", "PartitionInfo", "TopicMetadata"]

Params: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]] | None


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """Raw batches from a native fetch and the partition's offsets at that moment."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic's partitions with their offsets. In a cluster a broker lists only the partitions it leads,
    but declares the topic's whole partition count."""

    topic: str
    partitions: list[PartitionInfo]
    declared_count: int | None = None

    @property
    def partition_count(self) -> int:
        return len(self.partitions) if self.declared_count is None else self.declared_count


_TLS_PORT_ANSWER = HTTP_ON_TLS_PORT.split(":", 1)[0].encode()


def _ca_hint(err: BaseException) -> str:
    """What to do when the broker's certificate did not verify (a private CA the client was not given)."""
    if "CERTIFICATE_VERIFY_FAILED" not in str(err) and "certificate verify failed" not in str(err):
        return ""
    return (
        " (the broker's certificate is not signed by a CA this client trusts: pass the CA that signed it, "
        "ssl_cafile=... in Python, `--ssl-cafile FILE` on the CLI)"
    )


def _certificate_refused(err: BaseException) -> bool:
    """Whether a connection failed over a certificate (not retriable), not a network fault."""
    if isinstance(err, aiohttp.ClientConnectorCertificateError):
        return True
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLError) and "CERTIFICATE" in (cause.reason or "").upper():
            return True
        cause = cause.__cause__ or cause.__context__
        if cause is err:
            break
    return False


def segment(value: str) -> str:
    """``value`` escaped as one URL path segment."""
    return quote(value, safe="")


class BrokerClient:
    """An HTTP client for one broker base URL (``http://host:port`` or ``https://host:port``).

    ``security`` says how to reach it (default: plaintext, no credentials). ``start()`` must run inside the
    event loop that will use the client (requests start it when needed); ``close()`` closes the session and
    is idempotent.
    """

    def __init__(
        self,
        base_url: str,
        *,
        request_timeout_ms: int = 30_000,
        connections: int = 100,
        security: ClientSecurity | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.request_timeout_ms = request_timeout_ms
        self.security = ClientSecurity() if security is None else security
        if self.security.tls and not self.base_url.lower().startswith("https://"):
            # a broker learned from metadata (its advertised.url) must not receive credentials in plaintext
            raise InvalidRequestError(
                f"broker {self.base_url} is not an https:// URL but security_protocol="
                f"{self.security.security_protocol}: refusing to connect in plaintext (check that broker's "
                "advertised.url)"
            )
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the session, loading the SSL context's files in a worker thread the first time. Idempotent.

        Raises:
            InvalidRequestError: a PEM file of the security settings cannot be used.
        """
        if not self.security.ssl_loaded:
            await asyncio.to_thread(self.security.ssl_context)
        self.open()

    def open(self) -> None:
        """Open the session from code running on the client's event loop. Idempotent. With TLS whose files
        are not loaded yet it does nothing (the first request opens it through :meth:`start`, so no file is
        read on the event loop)."""
        if self._session is None and self.security.ssl_loaded:
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self.security.connector_ssl())
            self._session = aiohttp.ClientSession(connector=connector, headers=self.security.headers())

    async def close(self) -> None:
        """Close the session and its connections. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("BrokerClient.start() was not called")
        return self._session

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        params: Params = None,
        headers: dict[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        """Send one request; answer ``(status, body, headers)`` for a 2xx answer.

        ``body`` is sent as JSON, ``data`` as raw bytes; ``params`` is a mapping or a sequence of pairs (a
        name may repeat). ``timeout_ms`` overrides the request timeout.

        Raises:
            TierlogError: the typed error of a non-2xx answer (see
            :func:`tierlog.client.errors.error_from_response`). BrokerUnavailableError: the connection failed.
            RequestTimeoutError: no answer in time.
        """
        if self._session is None:
            await self.start()
        seconds = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        send_headers = dict(headers or {})
        payload = data
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            send_headers["Content-Type"] = "application/json"
        try:
            async with self.session.request(
                method,
                self.base_url + path,
                data=payload,
                params=params,
                headers=send_headers,
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as response:
                raw = await response.read()
                if response.status >= 400:
                    if response.status == 400 and raw.startswith(_TLS_PORT_ANSWER):
                        raise InvalidRequestError(
                            f"{method} {path}: {self.base_url} is a TLS port: use https:// "
                            "(security_protocol SSL; with a private CA also ssl_cafile, "
                            "`--ssl-cafile` on the CLI)"
                        )
                    raise error_from_response(response.status, raw)
                return response.status, raw, dict(response.headers)
        except TimeoutError as err:
            raise RequestTimeoutError(f"{method} {path}: no answer within {seconds:g} s") from err
        except (aiohttp.ClientSSLError, aiohttp.ClientOSError) as err:
            if _certificate_refused(err):
                raise UnauthorizedError(
                    f"{method} {path}: TLS handshake with {self.base_url} refused: {err}{_ca_hint(err)}"
                ) from err
            raise BrokerUnavailableError(
                f"{method} {path}: broker {self.base_url} unreachable: {err}{self._hint(err)}"
            ) from err
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as err:
            raise BrokerUnavailableError(
                f"{method} {path}: broker {self.base_url} unreachable: {err}{self._hint(err)}"
            ) from err

    def _hint(self, err: BaseException) -> str:
        # TLS 1.3 sends "certificate required" after the handshake: a close or reset is all aiohttp shows
        tls_without_cert = self.security.tls and self.security.ssl_certfile is None
        after_connect = isinstance(
            err, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError)
        )
        if tls_without_cert and after_connect and not isinstance(err, aiohttp.ClientConnectorError):
            return " (a broker that requires a client certificate closes the connection so: set ssl_certfile)"
        return ""

    async def json(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Params = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """:meth:`call` and decode a JSON answer (``None`` for an empty one). Raises as :meth:`call`."""
        _, raw, _ = await self.call(method, path, body=body, params=params, timeout_ms=timeout_ms)
        return json.loads(raw) if raw.strip() else None

    # -- the native data path ---------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, batches: bytes, acks: str) -> dict[str, Any]:
        """Append raw batches; answer the broker's JSON (offsets with acks 1/all). Not idempotent."""
        path = partition_path(topic, partition) + "/batches"
        _, raw, _ = await self.call(
            "POST", path, data=batches, params={"acks": acks}, headers={"Content-Type": BATCHES_TYPE}
        )
        answer: dict[str, Any] = json.loads(raw)
        return answer

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_bytes: int, max_wait_ms: int, min_bytes: int
    ) -> FetchAnswer:
        """Raw batches from the batch holding ``offset``, long-polling up to ``max_wait_ms``. Idempotent.

        Raises OffsetOutOfRangeError with the valid range, and the errors of :meth:`call`.
        """
        path = partition_path(topic, partition) + "/batches"
        params = {
            "offset": str(offset),
            "max_bytes": str(max_bytes),
            "max_wait_ms": str(max_wait_ms),
            "min_bytes": str(min_bytes),
        }
        timeout = self.request_timeout_ms + max_wait_ms
        _, raw, headers = await self.call(
            "GET", path, params=params, headers={"Accept": BATCHES_TYPE}, timeout_ms=timeout
        )
        return FetchAnswer(
            raw,
            int(headers.get(HIGH_WATERMARK, "-1")),
            int(headers.get(LOG_START_OFFSET, "-1")),
            int(headers.get(LOG_END_OFFSET, "-1")),
        )

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """``(offset, timestamp)`` for -2 (earliest), -1 (latest) or a time in ms; ``(-1, -1)`` if none.

        Idempotent. Raises as :meth:`call`.
        """
        path = partition_path(topic, partition) + "/offsets"
        answer = await self.json("GET", path, params={"timestamp": str(timestamp)})
        return int(answer["offset"]), int(answer["timestamp"])

    async def topic_metadata(self, topic: str) -> TopicMetadata:
        """Partition count and offsets of ``topic`` (of the partitions this broker leads, in a cluster).
        Idempotent. Raises UnknownTopicError, as :meth:`call`."""
        answer = await self.json("GET", topic_path(topic))
        partitions = [
            PartitionInfo(p["partition"], p["log_start_offset"], p["high_watermark"], p["log_end_offset"])
            for p in answer["partitions"]
        ]
        count = answer.get("partition_count")
        return TopicMetadata(answer["topic"], partitions, count if isinstance(count, int) else None)
