"""Typed client errors, and the one place that turns a broker answer into one of them.

Every error is a subclass of a :mod:`tierlog.tiering.errors` kind, so callers match on the kind
(``NotFoundError``, ``ConflictError``, ``UnavailableError`` ...) or on ``err.code``, never on a message.
``retriable`` decides whether the producer's retry loop (and the consumer's fetch loop) tries again: only
connection failures, ``503`` (50301) and ``500`` (50001) are retriable, as ``docs/native-api.md`` says.

:func:`error_from_response` is the single mapping from ``(HTTP status, JSON body)`` to an exception; nothing
else in the client inspects error codes of an answer.
"""

from __future__ import annotations

import json
from typing import Any

from tierlog.tiering.errors import (
    ConflictError,
    CorruptRecordError,
    IllegalGenerationError,
    InternalError,
    InvalidRequestError,
    NotFoundError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
    RecordTooLargeError,
    TierlogError,
    UnauthorizedError,
    UnavailableError,
    UnknownGroupError,
    UnknownMemberError,
    error_for_code,
)

__all__ = [
    "TierlogError",
    "InvalidRequestError",
    "NotFoundError",
    "ConflictError",
    "UnavailableError",
    "CorruptRecordError",
    "UnauthorizedError",
    "InternalError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "BadRequestError",
    "TopicExistsError",
    "CorruptBatchError",
    "NotAcceptableError",
    "UnsupportedMediaTypeError",
    "UnknownTopicError",
    "UnknownPartitionError",
    "UnknownMemberError",
    "UnknownGroupError",
    "IllegalGenerationError",
    "RebalanceInProgressError",
    "BrokerInternalError",
    "BrokerUnavailableError",
    "RequestTimeoutError",
    "DeliveryTimeoutError",
    "BufferExhaustedError",
    "ClientClosedError",
    "CommitFailedError",
    "IllegalStateError",
    "NoOffsetForPartitionError",
    "error_from_response",
]


class BadRequestError(InvalidRequestError):
    """A malformed query parameter, body or topic name (40001)."""

    code = 40001
    http_status = 400


class TopicExistsError(InvalidRequestError):
    """The v3 admin API refused a topic change: invalid name, config or count, or it exists (40002)."""

    code = 40002
    http_status = 400


class CorruptBatchError(InvalidRequestError):
    """The broker rejected a produced batch (CRC, framing); nothing was appended (40003)."""

    code = 40003
    http_status = 400


class NotAcceptableError(InvalidRequestError):
    """The broker cannot answer in the media type asked for (40601)."""

    code = 40601
    http_status = 406


class UnsupportedMediaTypeError(InvalidRequestError):
    """The broker does not accept the body's media type (41501)."""

    code = 41501
    http_status = 415


class UnknownTopicError(NotFoundError):
    """The topic does not exist (40401)."""

    code = 40401


class UnknownPartitionError(NotFoundError):
    """The partition does not exist (40402)."""

    code = 40402


class BrokerInternalError(InternalError):
    """The broker failed unexpectedly (50001); the native API documents it as retriable with backoff."""

    code = 50001
    retriable = True


class BrokerUnavailableError(UnavailableError):
    """The broker could not be reached (connection refused or reset). Retriable."""

    code = 50302


class RequestTimeoutError(UnavailableError):
    """The broker did not answer within ``request_timeout_ms``. Retriable."""

    code = 50401
    http_status = 504


class DeliveryTimeoutError(UnavailableError):
    """A record was not acknowledged within ``delivery_timeout_ms``; it may or may not have been stored."""

    code = 50402
    http_status = 504
    retriable = False


class BufferExhaustedError(UnavailableError):
    """``send`` waited ``max_block_ms`` for room in ``buffer_memory`` (or for metadata) and gave up."""

    code = 50403
    http_status = 504
    retriable = False


class ClientClosedError(InvalidRequestError):
    """The producer or consumer was closed."""

    code = 40004
    http_status = 400


class IllegalStateError(InvalidRequestError):
    """The call does not fit the client's state (subscribe and assign mixed, seek on an unassigned one)."""

    code = 40903
    http_status = 409


class CommitFailedError(ConflictError):
    """A commit was refused because the group rebalanced: the partitions now belong to another member."""

    code = 40912


_REGISTRY: dict[int, type[TierlogError]] = {
    kind.code: kind
    for kind in (
        BadRequestError,
        TopicExistsError,
        CorruptBatchError,
        NotAcceptableError,
        UnsupportedMediaTypeError,
        UnknownTopicError,
        UnknownPartitionError,
        UnknownMemberError,
        UnknownGroupError,
        IllegalGenerationError,
        RebalanceInProgressError,
        BrokerInternalError,
        RecordTooLargeError,
    )
}


def _int_field(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def error_from_response(status: int, payload: bytes) -> TierlogError:
    """The typed error for a broker answer with HTTP ``status`` and body ``payload``.

    The body's ``error_code`` picks the class (the client's registry first, then
    :func:`tierlog.tiering.errors.error_for_code`); without a usable code the status decides. An out-of-range
    answer carries the valid range from the body. Pure, idempotent and safe to call from any thread.
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
        code = status * 100 + 1 if status < 1000 else status
    message = body.get("message")
    if not isinstance(message, str) or not message:
        message = payload[:200].decode("utf-8", "replace") or f"HTTP {status}"
    if code == OffsetOutOfRangeError.code or status == 416:
        err = OffsetOutOfRangeError(
            message,
            log_start_offset=_int_field(body, "log_start_offset"),
            log_end_offset=_int_field(body, "log_end_offset"),
        )
        return err
    kind = _REGISTRY.get(code)
    if kind is not None:
        return kind(message, code=code)
    if code < 1000:
        # v3 admin answers plain HTTP codes (404 for an unknown cluster or config).
        return error_for_code(code * 100 + 1, message).__class__(message, code=code)
    return error_for_code(code, message)


class NoOffsetForPartitionError(InvalidRequestError):
    """``auto_offset_reset="none"`` and the partition has no committed offset to start from."""

    code = 40005
    http_status = 400
