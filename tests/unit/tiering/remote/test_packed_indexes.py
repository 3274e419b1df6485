"""The packed ``.indexes`` object: golden bytes, round trip, every malformed shape rejected, and where
each index of either layout is read from."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.remote import packed_indexes as pi
from tierlog.tiering.remote.layout import parse_segment_key, segment_keys
from tierlog.wire.errors import CorruptRecordError

U = uuid.UUID("5f0c2a8e-0000-4000-8000-000000000001")


def test_golden_bytes() -> None:
    offsets, times = b"\x00\x00\x00\x05\x00\x00\x10\x00", b"\x00" * 7 + b"\x09" + b"\x00\x00\x00\x05"
    assert (
        pi.pack(offsets, times) == b"TLIX\x00\x00\x00\x01\x00\x00\x00\x08\x00\x00\x00\x0c" + offsets + times
    )
    assert pi.HEADER_SIZE == 16


@given(st.binary(max_size=200), st.binary(max_size=300))
def test_round_trip(offsets: bytes, times: bytes) -> None:
    data = pi.pack(offsets, times)
    assert pi.unpack(data) == (offsets, times)
    assert pi.unpack_header(data[: pi.HEADER_SIZE]) == (len(offsets), len(times))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "shorter than its header"),
        (b"TLIX\x00\x00\x00\x01\x00\x00", "shorter than its header"),
        (b"KAFK" + struct.pack(">III", 1, 0, 0), "starts with"),
        (b"TLIX" + struct.pack(">III", 2, 0, 0), "format 2 is not supported"),
        (b"TLIX" + struct.pack(">III", 1, 8, 0) + b"\x00" * 7, "header says 24"),
        (b"TLIX" + struct.pack(">III", 1, 0, 0) + b"\x00", "header says 16"),
    ],
    ids=["empty", "short-header", "magic", "format", "short-body", "long-body"],
)
def test_malformed_objects_are_rejected(data: bytes, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        pi.unpack(data)


def test_refs_of_a_packed_segment_are_ranges_of_one_object() -> None:
    offset_ref, time_ref = pi.index_refs("t", 3, 40, U, (80, 120))
    key = segment_keys("t", 3, 40, U)["indexes"]
    assert key.endswith(".indexes") and parse_segment_key(key) is not None
    assert (offset_ref.object_key, offset_ref.start, offset_ref.end) == (key, 16, 96)
    assert (time_ref.object_key, time_ref.start, time_ref.end) == (key, 96, 216)
    assert offset_ref.cache_key != time_ref.cache_key  # one object, two cached indexes
    assert not offset_ref.empty and pi.index_refs("t", 3, 40, U, (0, 12))[0].empty


def test_refs_of_an_older_segment_are_its_two_objects() -> None:
    keys = segment_keys("t", 3, 40, U)
    offset_ref, time_ref = pi.index_refs("t", 3, 40, U, None)
    assert (offset_ref.object_key, offset_ref.start, offset_ref.end) == (keys["index"], 0, None)
    assert (time_ref.cache_key, time_ref.object_key) == (keys["timeindex"], keys["timeindex"])
    assert not offset_ref.empty
