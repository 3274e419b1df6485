"""I/O failures: a failed write leaves nothing behind, a failed fsync is reported and retried, a failed
close leaves no clean-shutdown marker."""

from __future__ import annotations

import os
import resource
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, decode, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, naming
from tierlog.tiering.log.log_core import RECOVERY_BACKOFF_MS
from tierlog.wire.errors import ConflictError, UnavailableError


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


@contextmanager
def no_free_descriptors() -> Iterator[None]:
    """Every new descriptor fails with EMFILE: the soft RLIMIT_NOFILE is set to the lowest free one."""
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_roll_that_fails_on_emfile_goes_offline_then_recovers_by_itself(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=200), clock=clock)
    acked = [b"a" * 100, b"b" * 100]
    for value in acked:
        log.append(make_batch([value]))
    with no_free_descriptors():
        with pytest.raises(UnavailableError) as first:
            for _ in range(3):  # the first append that needs a new segment fails
                log.append(make_batch([b"c" * 100]))
                acked.append(b"c" * 100)
        assert first.value.retriable
        assert "EMFILE" in str(first.value.message)
        assert log.offline_reason is not None and "EMFILE" in log.offline_reason
        with pytest.raises(UnavailableError) as again:
            log.append(make_batch([b"lost"]))
        assert "offline" in again.value.message and "EMFILE" in again.value.message
        clock.advance(RECOVERY_BACKOFF_MS)
        with pytest.raises(UnavailableError):
            log.append(make_batch([b"lost"]))
    assert log.failure_count == 1
    clock.advance(RECOVERY_BACKOFF_MS)
    log.append(make_batch([b"after"]))
    assert log.offline_reason is None
    values = [r[1] for r in decode(b"".join(read_all(log)))]
    assert values == [*acked, b"after"]
    log.close()
    again_open = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=200), clock=clock)
    assert [r[1] for r in decode(b"".join(read_all(again_open)))] == [*acked, b"after"]


def test_an_offline_log_closes_with_an_error_and_no_clean_marker(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=200), clock=ManualClock(NOW))
    log.append(make_batch([b"a" * 100]))
    with no_free_descriptors(), pytest.raises(UnavailableError):
        log.append(make_batch([b"b" * 100]))
        log.append(make_batch([b"c" * 100]))
    with pytest.raises(UnavailableError, match="offline"):
        log.close()
    assert not (tmp_path / "p" / naming.CLEAN_SHUTDOWN_FILE).exists()
    reopened = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW))
    assert decode(reopened.read(0, 10_000).data)[0][1] == b"a" * 100


def read_all(log: PartitionLog) -> Iterator[bytes]:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        yield result.data
        offset = decode(result.data)[-1][0] + 1


def test_offsets_are_read_while_a_disk_writer_holds_the_lock(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow_fsync(fd: int) -> None:
        entered.set()
        assert release.wait(30)

    log = PartitionLog.open(tmp_path / "p", LogConfig(), clock=ManualClock(NOW), fsync=slow_fsync)
    log.append(make_batch([b"a", b"b"]))
    closer = threading.Thread(target=log.close)  # close fsyncs with the log's lock held
    closer.start()
    try:
        assert entered.wait(30)
        seen: list[tuple[int, int, int]] = []
        reader = threading.Thread(
            target=lambda: seen.append((log.log_start_offset, log.log_end_offset, log.size_bytes))
        )
        reader.start()
        reader.join(10)  # with a lock on the read path this waits until the writer lets go
        assert seen and seen[0][:2] == (0, 2) and seen[0][2] == log.offsets.size_bytes > 0
    finally:
        release.set()
        closer.join(30)
    assert not closer.is_alive()
