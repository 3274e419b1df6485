"""The tierlog Python client: Kafka-style producers and consumers over tierlog's native batch path.

::

    from tierlog.client import Producer, AsyncProducer, Consumer, AsyncConsumer

The asyncio classes are the implementation; ``Producer`` and ``Consumer`` run them on a background thread
for synchronous code. See docs/client.md.
"""

from tierlog.client.admin import AsyncAdmin
from tierlog.client.consumer import AsyncConsumer, ConsumerRebalanceListener
from tierlog.client.errors import (
    BrokerUnavailableError,
    BufferExhaustedError,
    ClientClosedError,
    CommitFailedError,
    DeliveryTimeoutError,
    IllegalStateError,
    NoOffsetForPartitionError,
    RecordTooLargeError,
    TierlogError,
    UnknownTopicError,
)
from tierlog.client.producer import AsyncProducer
from tierlog.client.sync_consumer import Consumer
from tierlog.client.sync_producer import Producer, RecordFuture
from tierlog.client.types import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "BrokerUnavailableError",
    "BufferExhaustedError",
    "ClientClosedError",
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DeliveryTimeoutError",
    "IllegalStateError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "TierlogError",
    "TopicPartition",
    "UnknownTopicError",
]
