"""The tierlog Python client: Kafka-style producers and consumers over tierlog's native batch path.

::

    from tierlog.client import Producer, AsyncProducer, Consumer, AsyncConsumer

The asyncio classes are the implementation; ``Producer`` and ``Consumer`` run them on a background thread
for synchronous code. Every error a client call raises is importable from here: the kinds, the errors the
broker answers (the classes of :mod:`tierlog.wire.errors`, the ones the broker raised) and the client's
own (:mod:`tierlog.client.errors`). TLS and credentials are options of every client (``security_protocol``,
``ssl_cafile``, ``sasl_plain_username`` ...; :mod:`tierlog.client.security`). See docs/client.md.
"""

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
