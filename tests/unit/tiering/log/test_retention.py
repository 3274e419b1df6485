"""Local retention by time and by size, whole sealed segments only, with the remote tier's veto; records
deleted before an offset (DeleteRecords)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, SegmentInfo
from tierlog.wire.errors import OffsetOutOfRangeError


def three_segments(path: Path, clock: ManualClock, **config: object) -> PartitionLog:
    """Segments [0,2) with timestamps NOW+0..1, [2,4) with NOW+10..11, [4,6) with NOW+20..21, active [6,7)."""
    log = PartitionLog.open(path, LogConfig(**config), clock=clock)  # type: ignore[arg-type]
    for seg in range(3):
        for i in range(2):
            log.append(make_batch([b"%d-%d" % (seg, i) * 20], [NOW + 10 * seg + i]))
        log.roll()
    log.append(make_batch([b"active"], [NOW]))
    return log


def test_retention_by_time_uses_the_segment_max_timestamp(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_segments(tmp_path / "p", clock, retention_ms=100)
    clock.set(NOW + 1 + 100)
    assert log.apply_retention() == []
    clock.set(NOW + 1 + 101)
    deleted = log.apply_retention()
    assert [s.base_offset for s in deleted] == [0]
    assert not deleted[0].log_path.exists() and not deleted[0].index_path.exists()
    assert not [n for n in os.listdir(tmp_path / "p") if n.endswith(".deleted")]
    assert log.log_start_offset == 2
    clock.set(NOW + 10_000)
    assert [s.base_offset for s in log.apply_retention()] == [2, 4]
    assert [s.base_offset for s in log.segments()] == [6]
    assert log.apply_retention() == []
    assert log.log_start_offset == 6 and log.log_end_offset == 7


def test_retention_by_bytes_keeps_at_least_the_limit(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_segments(tmp_path / "p", clock, retention_ms=-1)
    sizes = [s.size_bytes for s in log.segments()]
    total = sum(sizes)
    limit = total - sizes[0] - sizes[1] // 2
    deleted = log.apply_retention(retention_bytes=limit)
    assert [s.base_offset for s in deleted] == [0]
    assert log.size_bytes >= limit
    deleted = log.apply_retention(retention_bytes=sizes[-1])
    assert [s.base_offset for s in deleted] == [2, 4]
    assert log.size_bytes == sizes[-1]


def test_retention_bytes_from_config_and_unlimited(tmp_path: Path) -> None:
    clock = ManualClock(NOW + 10**9)
    log = three_segments(tmp_path / "p", clock, retention_ms=-1, retention_bytes=-1)
    assert log.apply_retention() == []
    log.update_config(LogConfig(retention_ms=-1, retention_bytes=1))
    assert [s.base_offset for s in log.apply_retention()] == [0, 2, 4]


def test_veto_stops_retention_at_the_first_kept_segment(tmp_path: Path) -> None:
    clock = ManualClock(NOW + 10**9)
    log = three_segments(tmp_path / "p", clock, retention_ms=1)
    asked: list[int] = []

    def not_uploaded(info: SegmentInfo) -> bool:
        asked.append(info.base_offset)
        return info.base_offset == 2

    assert [s.base_offset for s in log.apply_retention(not_uploaded)] == [0]
    assert asked == [0, 2]
    assert [s.base_offset for s in log.segments()] == [2, 4, 6]
    assert log.log_start_offset == 2
    assert [s.base_offset for s in log.apply_retention(lambda info: False)] == [2, 4]


def test_reads_below_the_new_start_are_out_of_range(tmp_path: Path) -> None:
    clock = ManualClock(NOW + 10**9)
    log = three_segments(tmp_path / "p", clock, retention_ms=1)
    log.apply_retention()
    try:
        log.read(5, 100)
    except Exception as err:
        assert getattr(err, "log_start_offset", None) == 6
    else:
        raise AssertionError("read below the log start offset succeeded")


def test_delete_records_moves_the_start_mid_segment_and_deletes_the_segments_below(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = three_segments(tmp_path / "p", clock, retention_ms=-1)
    log.update_high_watermark(7)
    assert log.delete_records_before(3) == 3
    assert [s.base_offset for s in log.segments()] == [2, 4, 6]  # [2,4) still holds offset 3
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1024)
    assert log.delete_records_before(1) == 3  # below the start: no change
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(8)  # past the high watermark
    assert log.delete_records_before(7) == 7
    assert [s.base_offset for s in log.segments()] == [6]  # never the active segment
    log.close()
    reopened = PartitionLog.open(tmp_path / "p", LogConfig(retention_ms=-1), clock=clock)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (7, 7)
    reopened.close()
