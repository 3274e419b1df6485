"""The partition log's high watermark: published with the offsets, clamped to [log start, log end] by
every change, checkpointed to ``replication-offset-checkpoint`` and reloaded on open."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, naming
from tierlog.tiering.log.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tierlog.wire.errors import UnavailableError


def open_log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**config), clock=ManualClock(NOW), topic="t")  # type: ignore[arg-type]


def hw_file(tmp_path: Path) -> Path:
    return tmp_path / "t-0" / naming.HIGH_WATERMARK_FILE


def fill(log: PartitionLog, count: int) -> None:
    for i in range(count):
        log.append(make_batch([b"v%d" % i]))


def test_appends_do_not_move_it_and_updates_are_clamped(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    assert log.high_watermark == 0 and log.offsets.high_watermark == 0
    assert log.update_high_watermark(3) == 3
    assert log.high_watermark == 3 and log.offsets.high_watermark == 3
    assert log.update_high_watermark(99) == 5  # above the log end
    assert log.update_high_watermark(-4) == 0  # below the log start
    assert log.update_high_watermark(2) == 2  # it may move back (a follower follows its leader)
    log.close()


def test_reads_carry_the_published_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 4)
    log.update_high_watermark(2)
    result = log.read(0, 1 << 20)
    assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (2, 0, 4)
    assert log.read(4, 100).high_watermark == 2  # an empty read at the end too
    with log.read_slice(1, 1 << 20) as piece:
        assert (piece.high_watermark, piece.log_end_offset) == (2, 4)
    log.close()


def test_truncation_clamps_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 6)
    log.update_high_watermark(6)
    log.truncate_to(4)
    assert (log.log_end_offset, log.high_watermark) == (4, 4)
    log.truncate_to(5)  # past the end: nothing changes
    assert log.high_watermark == 4
    log.truncate_fully_and_start_at(20)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (20, 20, 20)
    log.close()


def test_retention_raises_it_to_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_bytes=0)
    for value in (b"a", b"b", b"c", b"d"):
        log.append(make_batch([value * 60]))
    assert log.high_watermark == 0
    assert log.apply_retention()
    assert log.high_watermark == log.log_start_offset > 0
    log.close()


def test_checkpoint_and_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 5)
    log.update_high_watermark(3)
    log.checkpoint_high_watermark()
    assert hw_file(tmp_path).read_text() == "0\n1\nt 0 3\n"
    log.update_high_watermark(4)
    log.close()  # close writes it too
    assert read_offset_checkpoint(hw_file(tmp_path)) == 4
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 4
    reopened.close()


def test_checkpoint_skips_an_unchanged_value(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    log.update_high_watermark(1)
    log.checkpoint_high_watermark()
    inode = hw_file(tmp_path).stat().st_ino
    log.checkpoint_high_watermark()
    assert hw_file(tmp_path).stat().st_ino == inode
    log.update_high_watermark(2)
    log.checkpoint_high_watermark()
    assert hw_file(tmp_path).stat().st_ino != inode
    log.close()


def test_checkpoint_of_a_closed_log_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    with pytest.raises(UnavailableError):
        log.checkpoint_high_watermark()


def test_missing_checkpoint_opens_at_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.update_high_watermark(3)
    log.close()
    hw_file(tmp_path).unlink()
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == reopened.log_start_offset == 0
    reopened.close()


def test_reopen_clamps_a_checkpoint_past_the_log_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.close()
    write_offset_checkpoint(hw_file(tmp_path), "t", 0, 500)  # e.g. the tail was lost
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 3
    reopened.close()


def test_reopen_clamps_a_checkpoint_below_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.truncate_fully_and_start_at(40)
    fill(log, 2)
    log.close()
    write_offset_checkpoint(hw_file(tmp_path), "t", 0, 7)
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 40
    reopened.close()


def test_malformed_checkpoint_opens_at_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.close()
    hw_file(tmp_path).write_text("garbage\n")
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 0
    reopened.close()


def test_concurrent_updates_and_appends_keep_the_invariant(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    stop = threading.Event()
    bad: list[tuple[int, int, int]] = []

    def watch() -> None:
        while not stop.is_set():
            offsets = log.offsets
            if not offsets.log_start_offset <= offsets.high_watermark <= offsets.log_end_offset:
                bad.append((offsets.log_start_offset, offsets.high_watermark, offsets.log_end_offset))

    def advance() -> None:
        while not stop.is_set():
            log.update_high_watermark(log.log_end_offset)

    threads = [threading.Thread(target=watch), threading.Thread(target=advance)]
    for thread in threads:
        thread.start()
    try:
        for round_ in range(30):
            fill(log, 3)
            if round_ % 5 == 4:
                log.truncate_to(log.log_end_offset - 2)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not bad
    end = log.log_end_offset
    assert log.update_high_watermark(end) == end and log.high_watermark == end
    log.close()
