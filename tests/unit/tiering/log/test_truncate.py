"""Truncation: whole batches at and after an offset go, across segments, and the log stays consistent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, Model, decode, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, naming
from tierlog.wire.errors import InvalidRequestError

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=80)


def filled(path: Path, batches: int = 24) -> tuple[PartitionLog, Model]:
    log = PartitionLog.open(path, CONFIG, clock=ManualClock(NOW))
    model = Model()
    for i in range(batches):
        values = [b"v%d-a" % i, b"v%d-b" % i, b"v%d-c" % i]
        stamps = [NOW + 100 - i, NOW + i, NOW + 2 * i]
        log.append(make_batch(values, stamps))
        model.append(values, stamps)
    return log, model


def contents(log: PartitionLog) -> list[tuple[int, bytes | None, int]]:
    out: list[tuple[int, bytes | None, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = decode(log.read(offset, 1 << 20).data)
        out.extend(r for r in records if r[0] >= offset)
        offset = records[-1][0] + 1
    return out


def flat(model: Model) -> list[tuple[int, bytes | None, int]]:
    return [(model.start + i, v, t) for i, (v, t) in enumerate(model.records)]


@pytest.mark.parametrize("offset", [0, 1, 3, 7, 14, 15, 30, 37, 45, 60, 71, 72, 100])
def test_truncate_matches_model_and_survives_reopen(tmp_path: Path, offset: int) -> None:
    log, model = filled(tmp_path / "p")
    assert len(log.segments()) > 3
    log.truncate_to(offset)
    model.truncate_to(offset)
    assert log.log_end_offset == model.end <= max(offset, 0) or offset >= 72
    assert contents(log) == flat(model)
    assert all(s.base_offset < log.log_end_offset for s in log.sealed_segments())
    assert log.segments()[-1].base_offset <= log.log_end_offset
    assert log.recovery_point <= log.log_end_offset
    expected_ts = max((t for _, t in model.records), default=-1)
    assert max(s.max_timestamp for s in log.segments()) == expected_ts
    log.append(make_batch([b"new"], [NOW + 500]))
    model.append([b"new"], [NOW + 500])
    assert contents(log) == flat(model)
    assert log.offset_for_timestamp(NOW + 499) == (model.end - 1, NOW + 500)
    before = [(s.base_offset, s.next_offset, s.max_timestamp) for s in log.segments()]
    log.close()
    again = PartitionLog.open(tmp_path / "p", CONFIG, clock=ManualClock(NOW))
    assert contents(again) == flat(model)
    assert [(s.base_offset, s.next_offset, s.max_timestamp) for s in again.segments()] == before
    again.close()
    (tmp_path / "p" / naming.CLEAN_SHUTDOWN_FILE).unlink()
    (tmp_path / "p" / naming.RECOVERY_POINT_FILE).unlink()
    third = PartitionLog.open(tmp_path / "p", CONFIG, clock=ManualClock(NOW))
    assert contents(third) == flat(model)


def test_truncated_indexes_equal_rebuilt_ones(tmp_path: Path) -> None:
    log, _ = filled(tmp_path / "p")
    middle = log.sealed_segments()[1]
    assert middle.next_offset - middle.base_offset >= 12
    log.truncate_to(middle.base_offset + 10)
    active = log.segments()[-1].index_path
    assert active == middle.index_path
    log.close()
    kept = active.read_bytes()
    active.unlink()
    again = PartitionLog.open(tmp_path / "p", CONFIG, clock=ManualClock(NOW))
    again.close()
    assert kept and active.read_bytes() == kept


def test_truncate_below_start_resets_and_bad_offsets_are_rejected(tmp_path: Path) -> None:
    log, _ = filled(tmp_path / "p")
    log.roll()
    log.apply_retention(retention_bytes=0)
    start = log.log_start_offset
    assert start > 0
    with pytest.raises(InvalidRequestError):
        log.truncate_to(-1)
    end = log.log_end_offset
    log.truncate_to(end + 10)
    assert log.log_end_offset == end
    log.truncate_to(start - 1)
    assert (log.log_start_offset, log.log_end_offset) == (start - 1, start - 1)
    assert log.append(make_batch([b"x"])).base_offset == start - 1
