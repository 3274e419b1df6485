"""The per-partition costs the create check assumes, measured on real partition logs, and the check's
arithmetic (issue 34)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tierlog.service.topics.resources import (
    BYTES_PER_PARTITION,
    FDS_PER_PARTITION,
    INODES_PER_PARTITION,
    Headroom,
    check_headroom,
    headroom,
)
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.wire.errors import InsufficientStorageError, ResourceLimitError


def disk_usage(path: Path) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in path.rglob("*")) + os.stat(path).st_blocks * 512


def test_an_open_partition_costs_what_the_check_assumes(tmp_path: Path) -> None:
    before = headroom(tmp_path)
    count = 20
    logs = [PartitionLog.open(tmp_path / f"t-{i}", LogConfig(), clock=ManualClock(1)) for i in range(count)]
    try:
        for log in logs:
            log.append(build_batch([Record(key=None, value=b"x", timestamp=1)], now_ms=1))
        after = headroom(tmp_path)
        assert (after.fds_open - before.fds_open) / count <= FDS_PER_PARTITION
        inodes = sum(1 for _ in tmp_path.rglob("*"))
        assert inodes / count <= INODES_PER_PARTITION
        assert disk_usage(tmp_path) / count <= BYTES_PER_PARTITION
    finally:
        for log in logs:
            log.close()


def room(**changes: int) -> Headroom:
    values = {"fd_limit": 1024, "fds_open": 100, "inodes_free": 10_000, "bytes_free": 2**30, **changes}
    return Headroom(**values)


def test_fds_past_the_limit_minus_the_reserve_are_refused_naming_the_limit() -> None:
    fitting = (1024 - 100 - 256) // FDS_PER_PARTITION
    check_headroom(room(), fitting, "Creating topic 't'")
    with pytest.raises(ResourceLimitError, match=r"RLIMIT_NOFILE.*is 1024.*at most 167 partitions"):
        check_headroom(room(), fitting + 1, "Creating topic 't'")
    check_headroom(room(fd_limit=-1), 1000, "unlimited")


def test_inodes_and_disk_space_are_checked() -> None:
    with pytest.raises(ResourceLimitError, match="free inodes"):
        check_headroom(room(inodes_free=10), 2, "x")
    check_headroom(room(inodes_free=-1), 2, "a filesystem without an inode count")
    with pytest.raises(InsufficientStorageError, match="KiB free"):
        check_headroom(room(bytes_free=1024), 1, "x")
