"""One broker per data directory: a second ``tierlog serve`` on it stops at once, naming the lock and the
process holding it (not two indirect errors about the metadata file and the partition logs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tierlog.service.topics.dir_lock import LOCK_NAME, DataDirInUseError, lock_data_dir, unlock_data_dir


def test_the_lock_names_its_holder_and_is_free_again_once_released(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    fd = lock_data_dir(data_dir)  # makes the directory
    try:
        assert (data_dir / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(
            DataDirInUseError, match=f"process {os.getpid()} holds its lock {data_dir / LOCK_NAME}"
        ):
            lock_data_dir(data_dir)
    finally:
        unlock_data_dir(fd)
    unlock_data_dir(lock_data_dir(data_dir))


def test_a_second_broker_on_the_same_data_dir_fails_at_once_with_one_clear_error(tmp_path: Path) -> None:
    fd = lock_data_dir(tmp_path)  # this process stands for the running broker
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tierlog", "serve", "--data-dir", str(tmp_path), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "TIERLOG_KAFKA_LISTENER": "127.0.0.1:0"},
            check=False,
        )
    finally:
        unlock_data_dir(fd)
    assert done.returncode == 1
    assert done.stderr == (
        f"tierlog serve: error: data.dir {tmp_path} is in use by another broker: process {os.getpid()} holds "
        f"its lock {tmp_path / LOCK_NAME} (stop that broker, or give this one another --data-dir)\n"
    )
    assert not (tmp_path / "cluster-metadata.json").exists()  # nothing of the broker started
