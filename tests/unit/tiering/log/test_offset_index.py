"""The offset index against a bisect reference model, its Kafka byte layout, and its validation rules."""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.log.index_file import IndexCorruptError
from tierlog.tiering.log.offset_index import ENTRY_SIZE, OffsetIndex

BASE = 1_000


@st.composite
def entries(draw: st.DrawFn) -> list[tuple[int, int]]:
    offsets = sorted(set(draw(st.lists(st.integers(0, 2**31 - 1), max_size=60))))
    positions = sorted(set(draw(st.lists(st.integers(0, 2**31 - 1), min_size=len(offsets), max_size=200))))
    pairs = list(zip(offsets, positions[: len(offsets)], strict=False))
    # (0, 0) reads as preallocation padding; it is never written: the first batch is never indexed
    return [pair for pair in pairs if pair != (0, 0)]


def fresh(tmp_path: Path, max_bytes: int = 4096) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, max_bytes)
    index.create()
    return index


@settings(max_examples=60, deadline=None)
@given(pairs=entries(), targets=st.lists(st.integers(-5, 2**31 + 5), max_size=30))
def test_lookup_matches_bisect_model(
    tmp_path_factory: pytest.TempPathFactory, pairs: list[tuple[int, int]], targets: list[int]
) -> None:
    index = fresh(tmp_path_factory.mktemp("idx"), max_bytes=len(pairs) * ENTRY_SIZE + 8)
    for rel, pos in pairs:
        index.append(BASE + rel, pos)
    keys = [BASE + rel for rel, _ in pairs]
    for target in targets:
        i = bisect_right(keys, BASE + target) - 1
        expected = (keys[i], pairs[i][1]) if i >= 0 else (BASE, 0)
        assert index.lookup(BASE + target) == expected


@settings(max_examples=40, deadline=None)
@given(pairs=entries())
def test_sealed_file_round_trips_and_is_kafka_layout(
    tmp_path_factory: pytest.TempPathFactory, pairs: list[tuple[int, int]]
) -> None:
    index = fresh(tmp_path_factory.mktemp("idx"), max_bytes=len(pairs) * ENTRY_SIZE + 20)
    for rel, pos in pairs:
        index.append(BASE + rel, pos)
    index.seal()
    assert index.path.read_bytes() == b"".join(struct.pack(">ii", rel, pos) for rel, pos in pairs)
    again = OffsetIndex(index.path, BASE, 4096)
    again.load(limit_key=2**31, limit_value=2**31)
    assert list(zip(again.keys, again.values, strict=True)) == pairs


def test_preallocated_to_whole_entries_and_zero_filled(tmp_path: Path) -> None:
    index = fresh(tmp_path, max_bytes=1003)
    assert index.path.stat().st_size == 1000
    assert index.max_entries == 125
    index.append(BASE + 7, 4200)
    data = index.path.read_bytes()
    assert data[:8] == bytes.fromhex("0000000700001068")
    assert data[8:] == bytes(992)


def test_trailing_zero_padding_is_accepted_as_empty_slots(tmp_path: Path) -> None:
    index = fresh(tmp_path, max_bytes=800)
    index.append(BASE + 3, 100)
    index.append(BASE + 9, 250)
    index.close()
    padded = index.path.read_bytes() + bytes(64)
    index.path.write_bytes(padded)
    loaded = OffsetIndex(index.path, BASE, 800)
    loaded.load(limit_key=10, limit_value=300)
    assert list(loaded.keys) == [3, 9]
    assert list(loaded.values) == [100, 250]


@pytest.mark.parametrize(
    "raw, why",
    [
        (struct.pack(">iiii", 5, 100, 5, 200), "offsets not increasing"),
        (struct.pack(">iiii", 5, 100, 6, 100), "positions not increasing"),
        (struct.pack(">ii", 50, 100), "offset past the log"),
        (struct.pack(">ii", 5, 5000), "position past the log"),
        (struct.pack(">ii", 5, 100) + b"\x00\x01", "partial entry"),
        (struct.pack(">iiii", 5, 100, 0, 0) + struct.pack(">ii", 7, 300), "zero entry inside"),
    ],
)
def test_inconsistent_files_are_rejected(tmp_path: Path, raw: bytes, why: str) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(raw)
    with pytest.raises(IndexCorruptError):
        OffsetIndex(path, BASE, 4096).load(limit_key=20, limit_value=1000)


def test_missing_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(IndexCorruptError):
        OffsetIndex(tmp_path / "00000000000000001000.index", BASE, 4096).load(limit_key=1, limit_value=1)


def test_truncate_to_position_drops_later_entries_and_zeroes_them(tmp_path: Path) -> None:
    index = fresh(tmp_path)
    for i in range(1, 6):
        index.append(BASE + i * 10, i * 100)
    index.truncate_to_position(300)
    assert list(index.values) == [100, 200]
    assert index.path.read_bytes()[16:40] == bytes(24)
    assert index.floor_position(250) == 200
    assert index.floor_position(50) == 0
    index.append(BASE + 30, 300)
    assert index.lookup(BASE + 35) == (BASE + 30, 300)


def test_full_and_reopen_active_reallocates(tmp_path: Path) -> None:
    index = fresh(tmp_path, max_bytes=16)
    index.append(BASE + 1, 10)
    assert not index.is_full
    index.append(BASE + 2, 20)
    assert index.is_full
    index.seal()
    assert index.path.stat().st_size == 16
    index.max_entries = 4
    index.open_active()
    assert index.path.stat().st_size == 32
    index.append(BASE + 3, 30)
    index.seal()
    assert index.path.read_bytes() == struct.pack(">iiiiii", 1, 10, 2, 20, 3, 30)
