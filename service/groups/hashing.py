"""Which ``__consumer_offsets`` partition coordinates a group: Kafka's rule, bit for bit. Pure.

Kafka's ``GroupCoordinator.partitionFor(groupId)`` is
``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``:

- ``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over the string's UTF-16 code units, in signed
  32-bit arithmetic (it wraps). A character outside the Basic Multilingual Plane counts as its two
  surrogates.
- ``Utils.abs`` is ``Math.abs`` except for ``Integer.MIN_VALUE``, which gives 0 (``Math.abs`` would leave it
  negative). It is not the ``x & 0x7fffffff`` of the record partitioner: for a negative hash they differ.

A tierlog cluster and a Kafka cluster with the same partition count therefore put a group on the same
partition.
"""

from __future__ import annotations

__all__ = ["coordinator_partition", "java_string_hash", "kafka_abs"]

_MASK32 = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: a signed 32-bit int. Pure."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & _MASK32
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs`` of a 32-bit int: ``Math.abs``, except that ``Integer.MIN_VALUE`` (whose
    ``Math.abs`` is itself, negative) gives 0. Not the ``& 0x7fffffff`` the record partitioner uses: for a
    negative hash the two differ. Pure."""
    return 0 if value == -(2**31) else abs(value)


def coordinator_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``. Pure.

    Raises:
        ValueError: ``partitions`` is not positive.
    """
    if partitions < 1:
        raise ValueError(f"the offsets topic needs at least one partition, not {partitions}")
    return kafka_abs(java_string_hash(group_id)) % partitions
