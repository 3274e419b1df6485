"""The client's own errors, and the one place that turns a broker answer into a typed error.

Every error the broker sends is a class of :mod:`tierlog.wire.errors` (``UnknownTopicError``,
``OffsetOutOfRangeError`` ...), the same class the broker raised; the errors here happen in the client only
(a connection refused, a timeout, a full buffer, a closed client) and are subclasses of the same kinds, with
codes from the same table (``docs/errors.md`` lists them with the broker's). Callers match on the kind
(``NotFoundError``, ``ConflictError``, ``UnavailableError`` ...), the class or ``err.code``, never on a
message. ``retriable`` decides whether the producer's retry loop (and the consumer's fetch loop) tries again:
connection failures, timeouts, ``503`` (50301) and ``500`` (50001) are retriable, as ``docs/native-api.md``
says. All of them are importable from :mod:`tierlog.client`. Their Kafka errors are the codes Kafka's
clients get in the same situation (``NETWORK_EXCEPTION``, ``REQUEST_TIMED_OUT``), or
:data:`~tierlog.wire.errors.NO_KAFKA_EQUIVALENT` for the ones Kafka's clients raise without a wire code.

:func:`error_from_response` is the single mapping from ``(HTTP status, JSON body)`` to an exception; nothing
else in the client inspects error codes of an answer.
"""

from __future__ import annotations

from tierlog.wire.errors import (
    NO_KAFKA_EQUIVALENT,
    ConflictError,
    InvalidRequestError,
    KafkaError,
    TierlogError,
    UnavailableError,
    error_from_answer,
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
    kafka = KafkaError(13, "NETWORK_EXCEPTION")


class RequestTimeoutError(UnavailableError):
    """The broker did not answer within ``request_timeout_ms``. Retriable."""

    code = 50401
    kafka = KafkaError(7, "REQUEST_TIMED_OUT")


class DeliveryTimeoutError(UnavailableError):
    """A record was not acknowledged within ``delivery_timeout_ms``; it may or may not have been stored."""

    code = 50402
    kafka = NO_KAFKA_EQUIVALENT
    retriable = False


class BufferExhaustedError(UnavailableError):
    """``send`` waited ``max_block_ms`` for room in ``buffer_memory`` (or for metadata) and gave up."""

    code = 50403
    kafka = NO_KAFKA_EQUIVALENT
    retriable = False


class ClientClosedError(InvalidRequestError):
    """The producer or consumer was closed."""

    code = 40004
    kafka = NO_KAFKA_EQUIVALENT


class NoOffsetForPartitionError(InvalidRequestError):
    """``auto_offset_reset="none"`` and the partition has no committed offset to start from."""

    code = 40005
    kafka = NO_KAFKA_EQUIVALENT


class CommitFailedError(ConflictError):
    """A commit was refused because the group rebalanced: the partitions now belong to another member."""

    code = 40912
    kafka = NO_KAFKA_EQUIVALENT


def error_from_response(status: int, payload: bytes) -> TierlogError:
    """The typed error for a broker answer with HTTP ``status`` and body ``payload``: see
    :func:`tierlog.wire.errors.error_from_answer` (the one reader, shared with the broker). Pure."""
    return error_from_answer(status, payload)
