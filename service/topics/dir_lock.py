"""One broker per data directory: ``tierlog serve`` holds an exclusive lock on
``<data-dir>/.tierlog-broker.lock`` for as long as it runs, as a Kafka broker holds the ``.lock`` file of
each log directory.

A second broker pointed at the same directory stops at once with one error naming the lock file and the
process holding it (its id is written into the file), instead of failing later on the metadata file's and
the partition logs' own locks. The lock is an ``flock``: the kernel drops it when the holder exits, however
it exits, so a crashed broker never leaves a stale lock behind (the file itself stays, harmlessly).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_NAME", "DataDirInUseError", "lock_data_dir", "unlock_data_dir"]

LOCK_NAME = ".tierlog-broker.lock"


class DataDirInUseError(Exception):
    """Another process holds the data directory's lock; the message names the file and that process."""


def lock_data_dir(data_dir: Path) -> int:
    """Take the data directory's lock (making the directory if missing); returns the open descriptor, to
    pass to :func:`unlock_data_dir`. Blocking I/O; not idempotent within a process (a second call fails as
    another process's would).

    Raises:
        DataDirInUseError: another process (or another call in this one) holds the lock.
        OSError: the directory cannot be made or the lock file opened.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = data_dir / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise DataDirInUseError(
            f"data.dir {data_dir} is in use by another broker: {holder} holds its lock {lock} "
            "(stop that broker, or give this one another --data-dir)"
        ) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_data_dir(fd: int) -> None:
    """Release the lock :func:`lock_data_dir` took (closing its descriptor). Blocking I/O."""
    os.close(fd)


def _holder(fd: int) -> str:
    """``process <pid>`` as the holder wrote it in the lock file, or ``another process``."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"process {text}" if text.isdigit() else "another process"
