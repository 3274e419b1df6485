"""The flush policy: flush.messages and flush.ms, group commit under concurrency, the recovery point."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

from tests.unit.tiering.log.support import NOW, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog


class CountingFsync:
    """Counts the fsyncs of segment files in ``calls`` and those of directories in ``directories``."""

    def __init__(self) -> None:
        self.calls = 0
        self.directories = 0
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        with self.lock:
            if is_dir:
                self.directories += 1
            else:
                self.calls += 1


def test_no_fsync_unless_the_policy_asks(tmp_path: Path) -> None:
    fsync = CountingFsync()
    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW), fsync=fsync)
    for i in range(20):
        log.append(make_batch([b"%d" % i]))
    assert fsync.calls == 0
    assert log.recovery_point == 0
    log.flush()
    assert fsync.calls >= 1 and log.recovery_point == 20
    calls = fsync.calls
    log.flush()
    assert fsync.calls == calls


def test_a_new_log_is_made_durable_by_its_first_flush(tmp_path: Path) -> None:
    """Opening a new partition directory fsyncs nothing and writes no checkpoint (an empty log lost in a
    crash loses no record); the first flush syncs the segment, the directory and the data directory
    that holds it, once; reopened, the log is the same empty log."""
    fsync = CountingFsync()
    path = tmp_path / "p"
    log = PartitionLog.open(path, LogConfig(), clock=ManualClock(NOW), fsync=fsync)
    assert (fsync.calls, fsync.directories) == (0, 0)
    assert sorted(os.listdir(path)) == [
        ".tierlog.lock",
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    log.append(make_batch([b"a"]))
    log.flush()
    assert (fsync.calls, fsync.directories) == (1, 2)
    log.append(make_batch([b"b"]))
    log.flush()
    assert (fsync.calls, fsync.directories) == (2, 2)
    log.close()
    again = PartitionLog.open(path, LogConfig(), clock=ManualClock(NOW), fsync=fsync)
    assert (again.log_start_offset, again.log_end_offset) == (0, 2)
    again.close()
    empty = PartitionLog.open(tmp_path / "q", LogConfig(), clock=ManualClock(NOW))
    reopened = tmp_path / "q-copy"  # what a crash right after the open may leave: no checkpoint
    shutil.copytree(tmp_path / "q", reopened)
    copy = PartitionLog.open(reopened, LogConfig(), clock=ManualClock(NOW))
    assert (copy.log_start_offset, copy.log_end_offset, copy.recovery_point) == (0, 0, 0)
    copy.close()
    empty.close()


def test_flush_messages_counts_records(tmp_path: Path) -> None:
    fsync = CountingFsync()
    log = PartitionLog.open(tmp_path / "p", LogConfig(flush_messages=5), clock=ManualClock(NOW), fsync=fsync)
    log.append(make_batch([b"a", b"b"]))
    log.append(make_batch([b"c", b"d"]))
    assert fsync.calls == 0 and log.recovery_point == 0
    log.append(make_batch([b"e"]))
    assert fsync.calls == 1 and log.recovery_point == 5


def test_flush_ms_with_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    fsync = CountingFsync()
    log = PartitionLog.open(tmp_path / "p", LogConfig(flush_ms=1000), clock=clock, fsync=fsync)
    log.append(make_batch([b"a"]))
    log.maybe_flush()
    assert fsync.calls == 0
    clock.advance(1000)
    log.maybe_flush()
    assert fsync.calls == 1 and log.recovery_point == 1
    clock.advance(5000)
    log.maybe_flush()
    assert fsync.calls == 1
    log.append(make_batch([b"b"]))
    assert log.recovery_point == 2


def test_group_commit_one_fsync_covers_waiting_appenders(tmp_path: Path) -> None:
    appenders = 8
    calls: list[int] = []
    logs: list[PartitionLog] = []

    def slow_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return  # the directory and its parent, at the first flush of a new log: not group-committed
        calls.append(fd)
        if len(calls) == 1:
            # hold the first fsync until every appender has written and waits for a flush
            while logs[0].log_end_offset < appenders:
                threading.Event().wait(0.001)

    log = PartitionLog.open(
        tmp_path / "p", LogConfig(flush_messages=1), clock=ManualClock(NOW), fsync=slow_fsync
    )
    logs.append(log)
    acknowledged: list[tuple[int, int]] = []
    ack_lock = threading.Lock()

    def appender(i: int) -> None:
        info = log.append(make_batch([b"r%d" % i]))
        with ack_lock:
            acknowledged.append((info.last_offset, log.recovery_point))

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(offset for offset, _ in acknowledged) == list(range(appenders))
    assert all(durable > offset for offset, durable in acknowledged)
    assert len(calls) < appenders
    assert len(calls) <= 2
    assert log.recovery_point == appenders
