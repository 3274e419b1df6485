"""The 61-byte batch header and batch framing: offsets rewritten in place, torn tails, size limits."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import (
    BatchHeader,
    Record,
    build_batch,
    decode_batch,
    decode_header,
    encode_header,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    valid_prefix,
    verify_batch,
)
from tierlog.tiering.codec.header import HEADER_SIZE
from tierlog.wire.errors import CorruptRecordError, RecordTooLargeError

GOLDEN = (pathlib.Path(__file__).parent / "data" / "small-none.bin").read_bytes()
NOW = 1_750_000_000_000


def test_golden_header_fields() -> None:
    header = decode_header(GOLDEN)
    assert encode_header(header) == GOLDEN[:HEADER_SIZE]
    assert (header.base_offset, header.magic, header.records_count, header.last_offset) == (0, 2, 5, 4)
    assert header.size == len(GOLDEN) and header.next_offset == 5
    assert header.crc == 0xBEDAA2D5


@settings(max_examples=100, deadline=None)
@given(
    st.builds(
        BatchHeader,
        base_offset=st.integers(-(2**63), 2**63 - 1),
        batch_length=st.integers(HEADER_SIZE - 12, 2**31 - 1),
        partition_leader_epoch=st.integers(-(2**31), 2**31 - 1),
        magic=st.just(2),
        crc=st.integers(0, 2**32 - 1),
        attributes=st.integers(-(2**15), 2**15 - 1),
        last_offset_delta=st.integers(0, 2**31 - 1),
        base_timestamp=st.integers(-(2**63), 2**63 - 1),
        max_timestamp=st.integers(-(2**63), 2**63 - 1),
        producer_id=st.integers(-(2**63), 2**63 - 1),
        producer_epoch=st.integers(-(2**15), 2**15 - 1),
        base_sequence=st.integers(-(2**31), 2**31 - 1),
        records_count=st.integers(0, 2**31 - 1),
    )
)
def test_header_roundtrip(header: BatchHeader) -> None:
    assert decode_header(b"pad" + encode_header(header), 3) == header


def test_set_base_offset_keeps_the_crc_valid() -> None:
    data = bytearray(GOLDEN)
    set_base_offset(data, 0, 123_456)
    assert verify_batch(data).base_offset == 123_456
    assert decode_batch(bytes(data)).records[-1].offset == 123_460


def test_set_log_append_time_rewrites_the_crc() -> None:
    data = bytearray(GOLDEN)
    set_log_append_time(data, 0, NOW)
    assert verify_batch(data).log_append_time
    assert {r.timestamp for r in decode_batch(bytes(data)).records} == {NOW}
    with pytest.raises(CorruptRecordError):
        set_log_append_time(bytearray(GOLDEN[:-1]), 0, NOW)


def test_verify_batch_enforces_max_size() -> None:
    assert verify_batch(GOLDEN, max_size=len(GOLDEN)).size == len(GOLDEN)
    with pytest.raises(RecordTooLargeError):
        verify_batch(GOLDEN, max_size=len(GOLDEN) - 1)


def _batches(n: int) -> bytes:
    out = bytearray()
    for i in range(n):
        batch = bytearray(build_batch([Record(b"k", b"v%d" % i)], now_ms=NOW))
        set_base_offset(batch, 0, i)
        out += batch
    return bytes(out)


def test_iter_batches_and_valid_prefix() -> None:
    stream = _batches(3)
    found = list(iter_batches(stream))
    assert [h.base_offset for _, h in found] == [0, 1, 2]
    assert valid_prefix(stream) == (len(stream), found)
    torn = stream[:-3]
    assert valid_prefix(torn) == (found[2][0], found[:2])
    with pytest.raises(CorruptRecordError):
        list(iter_batches(torn, verify=False))


def test_valid_prefix_stops_at_corruption_and_going_backwards() -> None:
    stream = bytearray(_batches(3))
    second = decode_header(stream).size
    flipped = bytearray(stream)
    flipped[second + 40] ^= 1
    assert valid_prefix(flipped)[0] == second
    set_base_offset(stream, second, 0)  # offsets must increase
    assert valid_prefix(stream)[0] == second
