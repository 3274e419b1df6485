"""The tierlog Python client: Kafka-style producers and consumers over tierlog's native batch path.

::

    from tierlog.client import Producer, AsyncProducer, Consumer, AsyncConsumer

The asyncio classes are the implementation; ``Producer`` and ``Consumer`` run them on a background thread
for synchronous code. Every error a client call raises is importable from here: the kinds, the errors the
broker answers (the classes of :mod:`tierlog.wire.errors`, the ones the broker raised) and the client's
own (:mod:`tierlog.client.errors`). TLS and credentials are options of every client (``security_protocol``,
``ssl_cafile``, ``sasl_plain_username`` ...; :mod:`tierlog.client.security`). See docs/client.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tierlog.wire.errors import (
    AuthorizationError,
    BadRequestError,
    ConflictError,
    CorruptBatchError,
    CorruptRecordError,
    DuplicateSequenceError,
    IllegalGenerationError,
    IllegalStateError,
    InternalError,
    InvalidConfigError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotAcceptableError,
    NotFoundError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RebalanceInProgressError,
    RecordTooLargeError,
    ThrottledError,
    TierlogError,
    UnauthorizedError,
    UnavailableError,
    UnknownGroupError,
    UnknownMemberError,
    UnknownPartitionError,
    UnknownProducerIdError,
    UnknownTopicError,
    UnsupportedMediaTypeError,
)

if TYPE_CHECKING:
    from tierlog.client.admin import AsyncAdmin
    from tierlog.client.consumer import AsyncConsumer, ConsumerRebalanceListener
    from tierlog.client.errors import (
        BrokerUnavailableError,
        BufferExhaustedError,
        ClientClosedError,
        CommitFailedError,
        DeliveryTimeoutError,
        NoOffsetForPartitionError,
        RequestTimeoutError,
    )
    from tierlog.client.exit_close import UnclosedProducerWarning
    from tierlog.client.producer import AsyncProducer
    from tierlog.client.security import ClientSecurity
    from tierlog.client.sync_consumer import Consumer
    from tierlog.client.sync_producer import Producer, RecordFuture
    from tierlog.client.types import (
        ConsumerRecord,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        RecordMetadata,
        TopicPartition,
    )

# The client's own names load on first use (PEP 562): the broker imports only tierlog.client.security
# (its peers' TLS settings), and importing this package must not pull in the producers, consumers and
# admin client (a quarter of a second of a broker's start-up).
_LAZY = {
    "AsyncAdmin": "admin",
    "AsyncConsumer": "consumer",
    "ConsumerRebalanceListener": "consumer",
    "BrokerUnavailableError": "errors",
    "BufferExhaustedError": "errors",
    "ClientClosedError": "errors",
    "CommitFailedError": "errors",
    "DeliveryTimeoutError": "errors",
    "NoOffsetForPartitionError": "errors",
    "RequestTimeoutError": "errors",
    "UnclosedProducerWarning": "exit_close",
    "AsyncProducer": "producer",
    "ClientSecurity": "security",
    "Consumer": "sync_consumer",
    "Producer": "sync_producer",
    "RecordFuture": "sync_producer",
    "ConsumerRecord": "types",
    "OffsetAndMetadata": "types",
    "OffsetAndTimestamp": "types",
    "RecordMetadata": "types",
    "TopicPartition": "types",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # clients
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ClientSecurity",
    "Consumer",
    "ConsumerRebalanceListener",
    "Producer",
    "RecordFuture",
    # records and positions
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "TopicPartition",
    # error kinds
    "TierlogError",
    "InvalidRequestError",
    "NotFoundError",
    "ConflictError",
    "UnavailableError",
    "CorruptRecordError",
    "UnauthorizedError",
    "InternalError",
    # errors the broker answers
    "BadRequestError",
    "InvalidConfigError",
    "CorruptBatchError",
    "NotAcceptableError",
    "UnsupportedMediaTypeError",
    "RecordTooLargeError",
    "OffsetOutOfRangeError",
    "UnknownTopicError",
    "UnknownPartitionError",
    "UnknownMemberError",
    "UnknownGroupError",
    "IllegalStateError",
    "RebalanceInProgressError",
    "IllegalGenerationError",
    "NotLeaderOrFollowerError",
    "LeaderNotAvailableError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "DuplicateSequenceError",
    "UnknownProducerIdError",
    "AuthorizationError",
    "ThrottledError",
    # errors of the client itself
    "BrokerUnavailableError",
    "RequestTimeoutError",
    "DeliveryTimeoutError",
    "BufferExhaustedError",
    "ClientClosedError",
    "NoOffsetForPartitionError",
    "CommitFailedError",
    # warnings
    "UnclosedProducerWarning",
]
