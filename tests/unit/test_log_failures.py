"""I/O failures: a failed write leaves nothing behind, a failed fsync is reported and retried, a failed
close leaves no clean-shutdown marker."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.unit.test_log_support import NOW, decode, make_batch
from tierlog.tiering.errors import ConflictError, UnavailableError
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, naming


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)


def test_a_write_that_fails_midway_is_undone(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    log.append(make_batch([b"first"]))
    size = log.size_bytes
    with file_size_limit(size + 100), pytest.raises(UnavailableError):
        log.append(make_batch([b"x" * 2000]))
    assert log.size_bytes == size == log.segments()[-1].log_path.stat().st_size
    assert log.log_end_offset == 1
    log.append(make_batch([b"second"]))
    assert [r[1] for r in decode(log.read(0, 10_000).data)] == [b"first", b"second"]


def test_failed_fsync_is_reported_then_retried(tmp_path: Path) -> None:
    failures = [1]

    def flaky_fsync(fd: int) -> None:
        if failures:
            failures.pop()
            raise OSError(5, "Input/output error")

    log = PartitionLog.open(
        tmp_path / "p", LogConfig(flush_messages=1), clock=ManualClock(NOW), fsync=flaky_fsync
    )
    with pytest.raises(UnavailableError) as err:
        log.append(make_batch([b"a"]))
    assert err.value.retriable
    assert log.recovery_point == 0
    log.append(make_batch([b"b"]))
    assert log.recovery_point == 2


def test_failed_close_leaves_no_clean_marker(tmp_path: Path) -> None:
    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW), fsync=broken_fsync)
    log.append(make_batch([b"a"]))
    with pytest.raises(UnavailableError):
        log.close()
    assert not (tmp_path / "p" / naming.CLEAN_SHUTDOWN_FILE).exists()
    log.close()
    again = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    assert [r[1] for r in decode(again.read(0, 1000).data)] == [b"a"]


def test_deleted_log_is_gone(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    log.append(make_batch([b"a"]))
    log.delete()
    log.delete()
    assert not (tmp_path / "p").exists()
    with pytest.raises(Exception) as err:
        log.read(0, 10)
    assert getattr(err.value, "code", None) == 40401


def test_a_directory_is_open_once(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    with pytest.raises(ConflictError):
        PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    log.close()
    again = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    again.delete()
    third = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    assert third.log_end_offset == 0
    third.close()
