"""The remote read path's index decoding: golden bytes, a Hypothesis property against ``bisect`` on sorted
lists, and invalid objects (which the reader answers with a scan, never with a wrong position).
"""

from __future__ import annotations

import bisect
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.remote.read_index import IndexInvalid, decode_offset_index, decode_time_index
from tierlog.wire.errors import CorruptRecordError


def offset_entries(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_entries(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def test_offset_index_golden_bytes() -> None:
    data = bytes.fromhex("00000009 00000200 00000013 00000433".replace(" ", ""))
    index = decode_offset_index(data, base_offset=1000, last_offset=1030, log_size=2000)
    assert list(index.offsets) == [1009, 1019] and list(index.positions) == [0x200, 0x433]
    assert index.lookup(999) == (1000, 0)
    assert index.lookup(1009) == (1009, 0x200)
    assert index.lookup(1018) == (1009, 0x200)
    assert index.lookup(5000) == (1019, 0x433)
    assert not index.missing


def test_time_index_golden_bytes() -> None:
    data = bytes.fromhex("0000018bcfe56800 00000004 0000018bcfe56c00 0000000a".replace(" ", ""))
    index = decode_time_index(data, base_offset=50, last_offset=70)
    assert list(index.timestamps) == [1700000000000, 1700000001024]
    assert index.lookup(1) == 50
    assert index.lookup(1700000000500) == 54
    assert index.lookup(1700000001024) == 60


def test_zero_padding_is_dropped() -> None:
    data = offset_entries([(3, 100), (0, 0), (0, 0)])
    with pytest.raises(IndexInvalid):  # padding only at the end
        decode_offset_index(data + offset_entries([(5, 200)]), 0, 10, 1000)
    assert list(decode_offset_index(data, 0, 10, 1000).offsets) == [3]
    assert len(decode_time_index(time_entries([(7, 1), (0, 0)]), 0, 10).timestamps) == 1


@pytest.mark.parametrize(
    "entries",
    [
        [(3, 100), (3, 200)],  # offsets not increasing
        [(3, 100), (4, 100)],  # positions not increasing
        [(11, 100)],  # past the segment's last offset
        [(3, 1000)],  # past the .log object
        [(-1, 5)],
    ],
)
def test_invalid_offset_index(entries: list[tuple[int, int]]) -> None:
    with pytest.raises(IndexInvalid) as caught:
        decode_offset_index(offset_entries(entries), 0, 10, 1000)
    assert isinstance(caught.value, CorruptRecordError)


@pytest.mark.parametrize("entries", [[(5, 1), (5, 2)], [(5, 3), (6, 2)], [(5, 11)], [(5, -1)]])
def test_invalid_time_index(entries: list[tuple[int, int]]) -> None:
    with pytest.raises(IndexInvalid):
        decode_time_index(time_entries(entries), 0, 10)


def test_truncated_entry_is_invalid() -> None:
    with pytest.raises(IndexInvalid):
        decode_offset_index(offset_entries([(3, 100)])[:-1], 0, 10, 1000)
    with pytest.raises(IndexInvalid):
        decode_time_index(time_entries([(3, 1)])[:-2], 0, 10)


@given(
    base=st.integers(0, 2**40),
    gaps=st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 5000)), max_size=60),
    probes=st.lists(st.integers(-10, 80_000), max_size=30),
)
def test_offset_lookup_matches_bisect(base: int, gaps: list[tuple[int, int]], probes: list[int]) -> None:
    rel = pos = 0
    entries = []
    for d_offset, d_position in gaps:
        rel, pos = rel + d_offset, pos + d_position
        entries.append((rel, pos))
    index = decode_offset_index(offset_entries(entries), base, base + rel, pos + 1)
    keys = [base + r for r, _ in entries]
    for probe in probes:
        i = bisect.bisect_right(keys, base + probe) - 1
        expected = (keys[i], entries[i][1]) if i >= 0 else (base, 0)
        assert index.lookup(base + probe) == expected


@given(
    steps=st.lists(st.tuples(st.integers(1, 10_000), st.integers(0, 50)), max_size=60),
    probes=st.lists(st.integers(0, 700_000), max_size=30),
)
def test_time_lookup_matches_bisect(steps: list[tuple[int, int]], probes: list[int]) -> None:
    ts, rel = 0, 0
    entries = []
    for d_ts, d_rel in steps:
        ts, rel = ts + d_ts, rel + d_rel
        entries.append((ts, rel))
    index = decode_time_index(time_entries(entries), 100, 100 + rel)
    stamps = [t for t, _ in entries]
    for probe in probes:
        i = bisect.bisect_right(stamps, probe) - 1
        assert index.lookup(probe) == (100 + entries[i][1] if i >= 0 else 100)
