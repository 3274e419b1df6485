"""The client's own errors, and the one place that turns a broker answer into a typed error.

Every error the broker sends is a class of :mod:`tierlog.tiering.errors` (``UnknownTopicError``,
``OffsetOutOfRangeError`` ...), the same class the broker raised; the errors here happen in the client only
(a connection refused, a timeout, a full buffer, a closed client) and are subclasses of the same kinds, with
codes from the same table. Callers match on the kind (``NotFoundError``, ``ConflictError``,
``UnavailableError`` ...), the class or ``err.code``, never on a message. ``retriable`` decides whether the
producer's retry loop (and the consumer's fetch loop) tries again: connection failures, timeouts, ``503``
(50301) and ``500`` (50001) are retriable, as ``docs/native-api.md`` says. All of them are importable from
:mod:`tierlog.client`.

:func:`error_from_response` is the single mapping from ``(HTTP status, JSON body)`` to an exception; nothing
else in the client inspects error codes of an answer.
"""

from __future__ import annotations

import json
from typing import Any

from tierlog.tiering.errors import (
    ConflictError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TierlogError,
    UnavailableError,
    error_for_code,
    registered_errors,
)

__all__ = [
    "BrokerUnavailableError",
    "RequestTimeoutError",
    "DeliveryTimeoutError",
    "BufferExhaustedError",
    "ClientClosedError",
    "NoOffsetForPartitionError",
    "CommitFailedError",
    "error_from_response",
]


class BrokerUnavailableError(UnavailableError):
    """The broker could not be reached (connection refused or reset). Retriable."""

    code = 50302


class RequestTimeoutError(UnavailableError):
    """The broker did not answer within ``request_timeout_ms``. Retriable."""

    code = 50401


class DeliveryTimeoutError(UnavailableError):
    """A record was not acknowledged within ``delivery_timeout_ms``; it may or may not have been stored."""

    code = 50402
    retriable = False


class BufferExhaustedError(UnavailableError):
    """``send`` waited ``max_block_ms`` for room in ``buffer_memory`` (or for metadata) and gave up."""

    code = 50403
    retriable = False


class ClientClosedError(InvalidRequestError):
    """The producer or consumer was closed."""

    code = 40004


class NoOffsetForPartitionError(InvalidRequestError):
    """``auto_offset_reset="none"`` and the partition has no committed offset to start from."""

    code = 40005


class CommitFailedError(ConflictError):
    """A commit was refused because the group rebalanced: the partitions now belong to another member."""

    code = 40912


def _int_field(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def error_from_response(status: int, payload: bytes) -> TierlogError:
    """The typed error for a broker answer with HTTP ``status`` and body ``payload``.

    The body's ``error_code`` picks the class through :func:`tierlog.tiering.errors.error_for_code` (an
    unknown code falls back on its status family and keeps its number); without a usable code the status
    itself is the code. An out-of-range answer carries the valid range from the body. Pure, idempotent and
    safe to call from any thread.
    """
    body: dict[str, Any] = {}
    try:
        decoded = json.loads(payload) if payload else {}
        if isinstance(decoded, dict):
            body = decoded
    except (ValueError, UnicodeDecodeError):
        pass
    code = _int_field(body, "error_code")
    if code < 0:
        code = status
    message = body.get("message")
    if not isinstance(message, str) or not message:
        message = payload[:200].decode("utf-8", "replace") or f"HTTP {status}"
    if code == OffsetOutOfRangeError.code or status == 416:
        return OffsetOutOfRangeError(
            message,
            log_start_offset=_int_field(body, "log_start_offset"),
            log_end_offset=_int_field(body, "log_end_offset"),
        )
    kind = registered_errors().get(code)
    if kind is not None and issubclass(kind, NotLeaderOrFollowerError):
        url = body.get("leader_url")
        return kind(
            message,
            leader_id=_int_field(body, "leader_id"),
            leader_url=url if isinstance(url, str) else "",
            leader_epoch=_int_field(body, "leader_epoch"),
        )
    return error_for_code(code, message)
