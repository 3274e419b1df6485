"""The trimmed copy of a straddling segment (on a real partition log): its bytes, offsets and rebuilt
indexes, and the cases where cutting is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, SegmentInfo
from tierlog.tiering.log.offset_index import OffsetIndex
from tierlog.tiering.log.scan import scan_batches
from tierlog.tiering.log.segment import LogSegment
from tierlog.tiering.log.time_index import TimeIndex
from tierlog.tiering.remote.trim import TRIM_DIR, remove_trimmed, trimmed_copy
from tierlog.wire.errors import InvalidRequestError

START = 1_700_000_000_000


@pytest.fixture
def plog(tmp_path: Path) -> Iterator[PartitionLog]:
    config = LogConfig(segment_bytes=8192, index_interval_bytes=200)
    opened = PartitionLog.open(tmp_path / "t-0", config, clock=ManualClock(START), topic="t")
    yield opened
    opened.close()


def fill(plog: PartitionLog, count: int, *, per_batch: int = 1) -> None:
    for n in range(count):
        records = [
            Record(b"k", bytes([n % 256]) * 60, timestamp=START + 10 * n + i) for i in range(per_batch)
        ]
        plog.append(build_batch(records))


def batches(path: Path, base: int) -> list[tuple[int, int, int, int]]:
    """``(position, base offset, last offset, max timestamp)`` of every batch of a segment file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return [
            (pos, h.base_offset, h.last_offset, h.max_timestamp)
            for pos, h in scan_batches(fd, base_offset=base, end=os.fstat(fd).st_size)
        ]
    finally:
        os.close(fd)


def first_sealed(plog: PartitionLog) -> SegmentInfo:
    info = plog.sealed_segments()[0]
    assert info.next_offset - info.base_offset > 20
    return info


def trim(plog: PartitionLog, info: SegmentInfo, offset: int) -> SegmentInfo | None:
    config = plog.config
    return trimmed_copy(
        info,
        offset,
        plog.path / TRIM_DIR,
        index_bytes=config.segment_index_bytes,
        index_interval=config.index_interval_bytes,
    )


def test_the_copy_holds_the_batches_from_the_offset_on(plog: PartitionLog) -> None:
    fill(plog, 120)
    info = first_sealed(plog)
    cut = info.base_offset + 17
    trimmed = trim(plog, info, cut)
    assert trimmed is not None
    assert trimmed.base_offset == cut and trimmed.next_offset == info.next_offset and trimmed.sealed
    assert trimmed.log_path.parent == plog.path / TRIM_DIR
    original = batches(info.log_path, info.base_offset)
    position = next(pos for pos, base, _, _ in original if base == cut)
    assert trimmed.log_path.read_bytes() == info.log_path.read_bytes()[position:]
    assert trimmed.size_bytes == info.size_bytes - position
    copied = batches(trimmed.log_path, cut)
    assert [b[1:] for b in copied] == [b[1:] for b in original if b[1] >= cut]
    assert trimmed.max_timestamp == max(b[3] for b in copied)


def test_the_rebuilt_indexes_point_at_the_right_batches(plog: PartitionLog) -> None:
    fill(plog, 120)
    info = first_sealed(plog)
    cut = info.base_offset + 9
    trimmed = trim(plog, info, cut)
    assert trimmed is not None
    copied = batches(trimmed.log_path, cut)
    by_position = {pos: (base, last) for pos, base, last, _ in copied}
    span = trimmed.next_offset - trimmed.base_offset
    index = OffsetIndex(trimmed.index_path, cut, 4096)
    index.load(limit_key=span, limit_value=trimmed.size_bytes)
    assert len(index.keys) >= 3  # index.interval.bytes=200 over ~100-byte batches
    for relative, position in zip(index.keys, index.values, strict=True):
        assert by_position[position][1] == cut + relative  # the entry is the batch's last offset
    time_index = TimeIndex(trimmed.timeindex_path, cut, 4096)
    time_index.load(limit_key=2**31, limit_value=span)
    assert time_index.keys[-1] == trimmed.max_timestamp
    for timestamp, relative in zip(time_index.keys, time_index.values, strict=True):
        holder = next(b for b in copied if b[1] <= cut + relative <= b[2])
        assert holder[3] <= timestamp
    # the engine reads the copy like any segment: every offset is found at its batch
    segment = LogSegment.open_existing(
        trimmed.log_path.parent, cut, index_bytes=4096, index_interval=200, created_ms=0
    )
    try:
        segment.next_offset = trimmed.next_offset
        for pos, base, last, _ in copied:
            found = segment.locate(last)
            assert found is not None and found[:2] == (pos, base)
    finally:
        segment.close()


def test_a_batch_holding_the_offset_without_starting_there_is_refused(plog: PartitionLog) -> None:
    fill(plog, 60, per_batch=3)
    info = first_sealed(plog)
    with pytest.raises(InvalidRequestError):
        trim(plog, info, info.base_offset + 4)  # batches hold 3 offsets each: 4 is inside the second
    trimmed = trim(plog, info, info.base_offset + 6)
    assert trimmed is not None and trimmed.base_offset == info.base_offset + 6


def test_an_offset_outside_the_segment_is_refused(plog: PartitionLog) -> None:
    fill(plog, 120)
    info = first_sealed(plog)
    for offset in (info.base_offset, info.next_offset, info.next_offset + 5):
        with pytest.raises(InvalidRequestError):
            trim(plog, info, offset)


def test_a_leftover_copy_is_replaced_and_removed(plog: PartitionLog) -> None:
    fill(plog, 120)
    info = first_sealed(plog)
    leftover = plog.path / TRIM_DIR
    leftover.mkdir()
    (leftover / "00000000000000000003.log").write_bytes(b"junk")
    trimmed = trim(plog, info, info.base_offset + 3)
    assert trimmed is not None
    assert sorted(p.name for p in leftover.iterdir()) == sorted(
        p.name for p in (trimmed.log_path, trimmed.index_path, trimmed.timeindex_path)
    )
    assert trimmed.log_path.read_bytes() != b"junk"
    remove_trimmed(leftover)
    remove_trimmed(leftover)  # idempotent
    assert not leftover.exists()


def test_the_log_reopens_with_a_leftover_copy_in_its_directory(plog: PartitionLog, tmp_path: Path) -> None:
    fill(plog, 120)
    info = first_sealed(plog)
    assert trim(plog, info, info.base_offset + 3) is not None
    end = plog.log_end_offset
    plog.close()
    reopened = PartitionLog.open(tmp_path / "t-0", plog.config, clock=ManualClock(START), topic="t")
    try:
        assert reopened.log_end_offset == end
        assert reopened.segments()[0].base_offset == 0  # the copy is not taken for a segment
    finally:
        reopened.close()
