"""Round-trip properties of build_batch / decode_batch, and the building rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import (
    Compression,
    Record,
    build_batch,
    decode_batch,
    iter_decoded_batches,
    iter_records,
    set_base_offset,
    verify_batch,
)
from tierlog.tiering.codec.header import CRC_OFFSET, HEADER_SIZE, crc32c
from tierlog.wire.errors import InvalidRequestError

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NOW = 1_750_000_000_000

maybe_bytes = (
    st.none()
    | st.binary(max_size=40)
    | st.binary(max_size=4).map(lambda b: b * 100)
    | st.binary(min_size=3, max_size=3).map(lambda b: b * 3000)  # a three-byte length varint
)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3).map(tuple)
records = st.builds(
    Record,
    key=maybe_bytes,
    value=maybe_bytes,
    headers=headers,
    timestamp=st.just(-1) | st.integers(0, 2**41) | st.integers(0, 2**62),
    offset=st.integers(-1, 10),
)


@settings(max_examples=250, deadline=None)
@given(
    batch=st.lists(records, min_size=1, max_size=25),
    codec=st.sampled_from(Compression),
    base_offset=st.integers(0, 2**62),
    producer_id=INT64,
    producer_epoch=INT16,
    base_sequence=INT32,
    leader_epoch=INT32,
    transactional=st.booleans(),
    control=st.booleans(),
)
def test_batch_roundtrip(
    batch: list[Record],
    codec: Compression,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    leader_epoch: int,
    transactional: bool,
    control: bool,
) -> None:
    data = build_batch(
        batch,
        base_offset=base_offset,
        compression=codec,
        now_ms=NOW,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch,
        is_transactional=transactional,
        is_control=control,
    )
    decoded = decode_batch(data)
    h = decoded.header
    timestamps = [NOW if r.timestamp == -1 else r.timestamp for r in batch]
    assert decoded.records == [
        Record(r.key, r.value, r.headers, ts, base_offset + i)
        for i, (r, ts) in enumerate(zip(batch, timestamps, strict=True))
    ]
    assert (h.base_offset, h.partition_leader_epoch, h.magic) == (base_offset, leader_epoch, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (producer_id, producer_epoch, base_sequence)
    assert (h.is_transactional, h.is_control, h.log_append_time) == (transactional, control, False)
    assert h.compression == codec
    assert (h.records_count, h.last_offset) == (len(batch), base_offset + len(batch) - 1)
    assert (h.base_timestamp, h.max_timestamp) == (timestamps[0], max(timestamps))
    assert h.size == len(data)
    assert verify_batch(data) == h
    # Decoding then re-encoding gives the same bytes: nothing is lost or reordered.
    again = build_batch(
        decoded.records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch,
        is_transactional=transactional,
        is_control=control,
    )
    assert again == data


@settings(max_examples=50, deadline=None)
@given(st.lists(records, min_size=1, max_size=5), st.sampled_from(Compression), st.integers(0, 2**50))
def test_log_append_time_batches_report_the_append_time(
    batch: list[Record], codec: Compression, append_time: int
) -> None:
    data = build_batch(batch, compression=codec, now_ms=append_time, log_append_time=True)
    decoded = decode_batch(data)
    assert decoded.header.log_append_time
    assert decoded.header.max_timestamp == append_time
    assert [r.timestamp for r in decoded.records] == [append_time] * len(batch)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(records, min_size=1, max_size=4), min_size=1, max_size=5), st.data())
def test_iterating_many_batches(batches: list[list[Record]], data: st.DataObject) -> None:
    stream = bytearray()
    offset = 0
    for batch in batches:
        codec = data.draw(st.sampled_from(Compression))
        stream += build_batch(batch, base_offset=offset, compression=codec, now_ms=NOW)
        offset += len(batch)
    flat = [r for batch in batches for r in batch]
    pairs = list(iter_records(bytes(stream)))
    assert [r.offset for _, r in pairs] == list(range(offset))
    assert [(r.key, r.value, r.headers) for _, r in pairs] == [(r.key, r.value, r.headers) for r in flat]
    positions = [pos for pos, _ in iter_decoded_batches(memoryview(stream))]
    assert len(positions) == len(batches) and positions[0] == 0


def test_decode_at_a_position_inside_a_larger_buffer() -> None:
    one = build_batch([Record(b"a", b"1")], now_ms=NOW)
    two = bytearray(build_batch([Record(b"b", b"2"), Record(None, None)], now_ms=NOW))
    set_base_offset(two, 0, 1)
    buf = b"junk" + one + bytes(two)
    batch = decode_batch(buf, 4 + len(one))
    assert [(r.offset, r.key) for r in batch.records] == [(1, b"b"), (2, None)]


def test_empty_record_list_is_rejected() -> None:
    with pytest.raises(InvalidRequestError):
        build_batch([])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"producer_epoch": 2**15},
        {"base_sequence": 2**31},
        {"partition_leader_epoch": -(2**31) - 1},
        {"producer_id": 2**63},
        {"base_offset": -1},
        {"base_offset": 2**63 - 1},  # the second record's offset would overflow
    ],
)
def test_out_of_range_fields_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidRequestError):
        build_batch([Record(b"k", b"v"), Record(b"k", b"v")], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("timestamp", [-2, -(2**40)])
def test_negative_timestamps_are_rejected(timestamp: int) -> None:
    with pytest.raises(InvalidRequestError):
        build_batch([Record(b"k", b"v", timestamp=timestamp)])


def test_header_keys_must_be_strings() -> None:
    with pytest.raises(InvalidRequestError):
        build_batch([Record(b"k", b"v", ((b"bytes-key", b"v"),))])  # type: ignore[arg-type]


def test_now_defaults_to_the_wall_clock() -> None:
    stamped = decode_batch(build_batch([Record(b"k", b"v", timestamp=5)])).records[0].timestamp
    assert stamped == 5
    header = decode_batch(build_batch([Record(b"k", b"v")])).header
    assert header.base_timestamp == header.max_timestamp > NOW - 10**12


def test_an_empty_compacted_batch_decodes_to_no_records() -> None:
    data = bytearray(build_batch([Record(b"k", b"v")], compression=Compression.GZIP))
    # Compaction keeps a header-only batch (records_count 0, no records section) for producer state.
    del data[HEADER_SIZE:]
    data[8:12] = (HEADER_SIZE - 12).to_bytes(4, "big")
    data[57:61] = bytes(4)
    data[CRC_OFFSET : CRC_OFFSET + 4] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    batch = decode_batch(bytes(data))
    assert batch.records == [] and batch.header.records_count == 0
    assert batch.header.compression == Compression.GZIP


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_many_records_use_multi_byte_deltas(codec: Compression) -> None:
    batch = [Record(None, b"%d" % i, timestamp=NOW + i * 1000) for i in range(20_000)]
    decoded = decode_batch(build_batch(batch, compression=codec, base_offset=7))
    assert decoded.header.last_offset_delta == 19_999
    last = decoded.records[-1]
    assert (last.offset, last.value, last.timestamp) == (20_006, b"19999", NOW + 19_999_000)
    assert [r.offset for r in decoded.records] == list(range(7, 20_007))
