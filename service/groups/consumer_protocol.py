"""The bytes of Kafka's ``consumer`` group protocol that the broker reads or writes (the members' own
format, which Kafka's brokers pass through): enough to name a group's subscribed topics (OffsetDelete) and
to describe HTTP consumers to Kafka's tools as Kafka consumers (DescribeGroups). Pure; no I/O.

Subscription (ConsumerProtocolSubscription), version 0 as written here, any version read::

    int16  version
    int32  topic count, then per topic: int16 length + UTF-8 name
    int32  user data length (-1: null) + bytes                     (later versions add fields after)

Assignment (ConsumerProtocolAssignment), version 0::

    int16  version
    int32  topic count, then per topic: int16 length + UTF-8 name, int32 partition count + int32 each
    int32  user data length (-1: null) + bytes
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["decode_subscription_topics", "encode_assignment", "encode_subscription"]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def encode_subscription(topics: Sequence[str]) -> bytes:
    """A version-0 ``consumer`` protocol Subscription of ``topics`` (no user data). Pure."""
    return _INT16.pack(0) + _INT32.pack(len(topics)) + b"".join(_string(t) for t in topics) + _INT32.pack(-1)


def encode_assignment(partitions: Sequence[tuple[str, int]]) -> bytes:
    """A version-0 ``consumer`` protocol Assignment of ``partitions`` (no user data). Pure."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    body = b"".join(
        _string(topic) + _INT32.pack(len(parts)) + b"".join(_INT32.pack(p) for p in sorted(parts))
        for topic, parts in sorted(by_topic.items())
    )
    return _INT16.pack(0) + _INT32.pack(len(by_topic)) + body + _INT32.pack(-1)


def decode_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ``consumer`` protocol Subscription (Kafka's ConsumerProtocolSubscription: int16
    version, then an int32 count of int16-length strings); None when the bytes do not decode. Pure."""
    try:
        (version,) = _INT16.unpack_from(metadata, 0)
        (count,) = _INT32.unpack_from(metadata, 2)
        if version < 0 or count < 0:
            return None
        pos, topics = 6, []
        for _ in range(count):
            (size,) = _INT16.unpack_from(metadata, pos)
            if size < 0 or pos + 2 + size > len(metadata):
                return None
            topics.append(metadata[pos + 2 : pos + 2 + size].decode())
            pos += 2 + size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
