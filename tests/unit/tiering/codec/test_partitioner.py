"""Kafka-compatible key partitioning and the sticky partitioner for keyless records."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.codec.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# Expected hashes of Kafka's own murmur2 (Utils.murmur2): the vectors of Kafka's UtilsTest plus
# short numeric strings whose hashes other Kafka-compatible clients check against Kafka's code.
KAFKA_MURMUR2_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
    ("1", -1993445489),
    ("12", 126087238),
    ("123", -267702483),
    ("1234", -1614185708),
    ("12345", -1188365604),
]


@pytest.mark.parametrize(("text", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


@pytest.mark.parametrize(("text", "expected"), KAFKA_MURMUR2_VECTORS)
def test_partition_uses_sign_masking_not_abs(text: str, expected: int) -> None:
    for partitions in (1, 3, 7, 12, 100):
        assert partition_for_key(text.encode(), partitions) == (expected & 0x7FFFFFFF) % partitions


def test_to_positive_masks_the_sign_bit() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_memoryview_and_bytearray_hash_like_bytes() -> None:
    data = b"a-little-bit-long-string"
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == murmur2(data)


def test_empty_key_hash() -> None:
    assert partition_for_key(b"", 10) == to_positive(murmur2(b"")) % 10


@given(key=st.binary(max_size=64), partitions=st.integers(min_value=1, max_value=10_000))
def test_partition_in_range_and_deterministic(key: bytes, partitions: int) -> None:
    first = partition_for_key(key, partitions)
    assert 0 <= first < partitions
    assert partition_for_key(bytes(key), partitions) == first


@given(key=st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(key: bytes) -> None:
    assert -(2**31) <= murmur2(key) < 2**31


def test_partition_for_key_rejects_no_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_switches_between_batches() -> None:
    sticky = StickyPartitioner(random.Random(7))
    picks = [sticky.next_partition("t", 4) for _ in range(200)]
    assert all(0 <= p < 4 for p in picks)
    assert all(a != b for a, b in itertools.pairwise(picks))
    assert set(picks) == {0, 1, 2, 3}


def test_sticky_single_partition_and_topics_independent() -> None:
    sticky = StickyPartitioner(random.Random(1))
    assert [sticky.next_partition("one", 1) for _ in range(3)] == [0, 0, 0]
    assert 0 <= sticky.next_partition("other", 5) < 5


def test_sticky_handles_shrinking_partition_count_and_forget() -> None:
    sticky = StickyPartitioner(random.Random(3))
    for _ in range(20):
        sticky.next_partition("t", 50)
    assert 0 <= sticky.next_partition("t", 2) < 2
    sticky.forget("t")
    sticky.forget("t")
    assert 0 <= sticky.next_partition("t", 2) < 2
    with pytest.raises(ValueError):
        sticky.next_partition("t", 0)
