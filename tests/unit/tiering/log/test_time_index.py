"""The time index against a bisect reference model, Kafka's append rule, and its validation."""

from __future__ import annotations

import struct
from bisect import bisect_right
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.log.index_file import IndexCorruptError
from tierlog.tiering.log.time_index import ENTRY_SIZE, TimeIndex

BASE = 500


def fresh(tmp_path: Path, max_bytes: int = 1200) -> TimeIndex:
    index = TimeIndex(tmp_path / "00000000000000000500.timeindex", BASE, max_bytes)
    index.create()
    return index


@settings(max_examples=60, deadline=None)
@given(
    offers=st.lists(st.tuples(st.integers(-1, 10_000), st.integers(0, 50)), max_size=80),
    targets=st.lists(st.integers(-10, 10_010), max_size=30),
)
def test_appends_only_growth_and_lookup_matches_model(
    tmp_path_factory: pytest.TempPathFactory, offers: list[tuple[int, int]], targets: list[int]
) -> None:
    index = fresh(tmp_path_factory.mktemp("tidx"), max_bytes=(len(offers) + 2) * ENTRY_SIZE)
    model: list[tuple[int, int]] = []
    offset = BASE
    for timestamp, step in offers:
        offset += step
        index.maybe_append(timestamp, offset)
        if timestamp >= 0 and (not model or timestamp > model[-1][0]):
            model.append((timestamp, offset))
    assert list(zip(index.keys, [BASE + v for v in index.values], strict=True)) == model
    stamps = [ts for ts, _ in model]
    for target in targets:
        i = bisect_right(stamps, target) - 1
        assert index.lookup(target) == (model[i] if i >= 0 else (-1, BASE))


def test_file_bytes_are_kafka_layout(tmp_path: Path) -> None:
    index = fresh(tmp_path)
    index.maybe_append(1_700_000_000_123, BASE + 4)
    index.maybe_append(1_700_000_000_100, BASE + 9)
    index.maybe_append(1_700_000_000_200, BASE + 9)
    index.seal()
    assert index.path.read_bytes() == struct.pack(">qiqi", 1_700_000_000_123, 4, 1_700_000_000_200, 9)


def test_last_slot_is_kept_for_the_final_entry(tmp_path: Path) -> None:
    index = fresh(tmp_path, max_bytes=3 * ENTRY_SIZE)
    index.maybe_append(10, BASE)
    index.maybe_append(20, BASE + 1)
    assert index.is_full
    index.maybe_append(30, BASE + 2)
    assert len(index) == 2
    index.maybe_append(30, BASE + 2, final=True)
    assert index.last_entry == (30, BASE + 2)


def test_zero_padding_accepted_and_disorder_rejected(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000500.timeindex"
    path.write_bytes(struct.pack(">qiqi", 100, 1, 200, 3) + bytes(5 * ENTRY_SIZE))
    index = TimeIndex(path, BASE, 4096)
    index.load(limit_key=2**31, limit_value=10)
    assert index.last_entry == (200, BASE + 3)
    path.write_bytes(struct.pack(">qiqi", 200, 1, 100, 3))
    with pytest.raises(IndexCorruptError):
        TimeIndex(path, BASE, 4096).load(limit_key=2**31, limit_value=10)
    path.write_bytes(struct.pack(">qi", 200, 12))
    with pytest.raises(IndexCorruptError):
        TimeIndex(path, BASE, 4096).load(limit_key=2**31, limit_value=10)


def test_truncate_to_offset(tmp_path: Path) -> None:
    index = fresh(tmp_path)
    for i in range(5):
        index.maybe_append(100 * (i + 1), BASE + 10 * i)
    index.truncate_to_offset(BASE + 20)
    assert index.last_entry == (200, BASE + 10)
    assert index.path.read_bytes()[2 * ENTRY_SIZE : 5 * ENTRY_SIZE] == bytes(3 * ENTRY_SIZE)
