"""The Kafka APIs this listener serves: each API key's version range and its handler, in one registry.

A handler is ``async def handle(request: KafkaRequest, body) -> Mapping | None``: ``body`` is the kio
request entity of the version the client sent; the answer is a mapping :func:`~.messages.shape` turns into
that version's response entity (None: send no answer, as for an ``acks=0`` produce; a
:class:`~.spliced.SplicedAnswer`: a mapping whose record bytes the listener sends from files). Handlers
live in :mod:`tierlog.service.kafka.handlers` and register with :func:`api`. They answer per-partition
errors in their answer; an exception that escapes one is logged and closes the connection (Kafka's
clients then reconnect and retry), never answered with bytes that could be misread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlog.service.kafka.context import KafkaRequest
    from tierlog.service.kafka.spliced import SplicedAnswer

__all__ = [
    "API_VERSIONS_KEY",
    "REGISTRY",
    "SASL_AUTHENTICATE_KEY",
    "SASL_HANDSHAKE_KEY",
    "Api",
    "CloseConnection",
    "Handler",
    "api",
]

API_VERSIONS_KEY = 18
# The keys served before a connection authenticates (with ApiVersions); the listener knows them before it
# loads the handlers.
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36

Handler = Callable[["KafkaRequest", Any], Awaitable["Mapping[str, Any] | SplicedAnswer | None"]]


@dataclass(frozen=True, slots=True)
class Api:
    """One served API: Kafka's key and name, the versions served, the handler."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


REGISTRY: dict[int, Api] = {}


class CloseConnection(Exception):
    """A handler's expected end of the connection (Kafka's answer to some failures, such as a failed
    ``acks=0`` produce): the listener logs the message at WARNING, counts ``reason`` and closes."""

    reason = "handler"


def api(key: int, name: str, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Register the decorated handler for ``key``. Raises ValueError for a key registered twice."""

    def register(handler: Handler) -> Handler:
        if key in REGISTRY:
            raise ValueError(f"Kafka API {key} ({name}) is registered twice")
        REGISTRY[key] = Api(key, name, min_version, max_version, handler)
        return handler

    return register
