"""Where a produced record goes when the producer names no partition.

Keyed records land exactly where a Kafka producer's default partitioner would put them: Kafka's
32-bit murmur2 of the key bytes (seed ``0x9747b28c``), made non-negative by masking the sign bit
(``& 0x7fffffff``, not ``abs``), modulo the partition count. Keyless records are *sticky*: every
keyless record of one request (one batch) goes to the same partition, and the next request moves
to a different one, so batches stay large while load still spreads across partitions.

This module is pure (no I/O, no aiohttp) so the Python client can import the same functions.
"""

from __future__ import annotations

import random
import struct
import threading

__all__ = ["SEED", "murmur2", "to_positive", "partition_for_key", "StickyPartitioner"]

SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit integer (what Java's ``int`` holds).

    Pure, idempotent and safe to call concurrently.
    """
    length = len(data)
    h = (SEED ^ length) & _MASK32
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", memoryview(data)[:whole]):
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Clear the sign bit of a 32-bit value, as Kafka's ``Utils.toPositive`` does (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition a Kafka producer's default partitioner picks for ``key``.

    Pure, idempotent and safe to call concurrently.

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Chooses one partition per batch of keyless records, switching to another one for the next batch.

    The state is one "current" partition per topic. :meth:`next_partition` returns a partition
    different from the previous one for that topic whenever the topic has more than one partition.
    Safe to call from several threads (a lock guards the table); not idempotent by design.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def next_partition(self, topic: str, num_partitions: int) -> int:
        """The partition for the next keyless batch of ``topic``.

        Raises:
            ValueError: ``num_partitions`` is not positive.
        """
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        with self._lock:
            previous = self._last.get(topic)
            if num_partitions == 1:
                choice = 0
            elif previous is None or previous >= num_partitions:
                choice = self._rng.randrange(num_partitions)
            else:
                choice = (previous + 1 + self._rng.randrange(num_partitions - 1)) % num_partitions
            self._last[topic] = choice
            return choice

    def forget(self, topic: str) -> None:
        """Drop the state kept for ``topic`` (after it is deleted). Idempotent."""
        with self._lock:
            self._last.pop(topic, None)
