"""The flush policy: flush.messages and flush.ms, group commit under concurrency, the recovery point."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.unit.tiering.log.support import NOW, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog


class CountingFsync:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self.lock:
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
