"""What new partitions will cost this broker, checked before a topic create or a partition growth writes
anything (issue 34).

An open partition holds, measured on a fresh partition (``tests/unit/service/topics/test_resources.py``
measures it again, so this table cannot drift from the log):

* 4 file descriptors: the active segment's ``.log``, ``.index`` and ``.timeindex`` and the directory's
  ``.tierlog.lock``;
* about 7 inodes: the directory, those four files and two checkpoint files;
* little disk: the indexes are preallocated to ``segment.index.bytes`` (10 MiB each) as *sparse* files, so
  they take blocks only as they fill; the directory and the small files take a few KiB.

A create asks for its share on this broker (the replicas placed here) and is refused, naming the limit,
when that share does not fit what is free now: file descriptors under ``RLIMIT_NOFILE`` (``ulimit -n``)
after keeping a reserve for connections, segment rolls and reads; inodes and bytes on the data directory's
filesystem. Without the check a create of 10,000 partitions ran into EMFILE part way, took 181 s to fail
and left a partition directory behind.

The numbers are estimates with margins, not a reservation: two creates racing each other both pass a
check that only one of them fits (the second then fails as before, on EMFILE, nothing acknowledged).
"""

from __future__ import annotations

import asyncio
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from tierlog.wire.errors import InsufficientStorageError, ResourceLimitError

__all__ = [
    "FDS_PER_PARTITION",
    "INODES_PER_PARTITION",
    "BYTES_PER_PARTITION",
    "Headroom",
    "check_room_for_partitions",
    "headroom",
]

FDS_PER_PARTITION = 4
INODES_PER_PARTITION = 8  # 7 measured, one spare for the next segment roll
BYTES_PER_PARTITION = 64 * 1024  # directory, lock, checkpoints and the first blocks of the log and indexes
FD_RESERVE_MIN = 256  # connections, segment rolls, reads, the metadata store


@dataclass(frozen=True)
class Headroom:
    """What the broker process and its data directory have free now."""

    fd_limit: int  # RLIMIT_NOFILE's soft limit; -1 when unlimited
    fds_open: int
    inodes_free: int  # -1 when the filesystem does not count inodes
    bytes_free: int

    @property
    def fd_reserve(self) -> int:
        """Descriptors kept back for everything that is not a partition: a tenth of the limit, at least
        FD_RESERVE_MIN."""
        return max(FD_RESERVE_MIN, self.fd_limit // 10)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: count the descriptors below the limit that answer fstat
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        count = 0
        for fd in range(min(limit, 65536) if limit != resource.RLIM_INFINITY else 65536):
            try:
                os.fstat(fd)
            except OSError:
                continue
            count += 1
        return count


def headroom(data_dir: Path) -> Headroom:
    """Read the limits and current use. Blocking (``/proc``, ``statvfs``): call in a worker thread."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    stats = os.statvfs(data_dir)
    return Headroom(
        fd_limit=-1 if soft == resource.RLIM_INFINITY else int(soft),
        fds_open=_open_fds(),
        inodes_free=int(stats.f_favail) if stats.f_files > 0 else -1,
        bytes_free=int(stats.f_bavail) * int(stats.f_frsize),
    )


def check_headroom(room: Headroom, partitions: int, action: str) -> None:
    """Refuse ``partitions`` new local partitions that ``room`` cannot hold. Pure.

    Raises:
        ResourceLimitError: (40004; Kafka POLICY_VIOLATION) not enough file descriptors or inodes.
        InsufficientStorageError: (50701; Kafka KAFKA_STORAGE_ERROR) not enough disk space.
    """
    if partitions <= 0:
        return
    if room.fd_limit >= 0:
        needed = partitions * FDS_PER_PARTITION
        free = room.fd_limit - room.fds_open - room.fd_reserve
        if needed > free:
            raise ResourceLimitError(
                f"{action} would open {partitions} partitions on this broker, about {needed} file "
                f"descriptors ({FDS_PER_PARTITION} per partition), but only {max(free, 0)} are free: the "
                f"open-files limit (RLIMIT_NOFILE, `ulimit -n`) is {room.fd_limit}, {room.fds_open} are open "
                f"and {room.fd_reserve} are kept for connections. Raise the limit (LimitNOFILE= in a systemd "
                f"unit, `ulimit -n` in a shell) or ask for at most {max(free, 0) // FDS_PER_PARTITION} "
                "partitions."
            )
    if room.inodes_free >= 0:
        needed = partitions * INODES_PER_PARTITION
        if needed > room.inodes_free:
            raise ResourceLimitError(
                f"{action} would create {partitions} partition directories, about {needed} files, but the "
                f"data directory's filesystem has {room.inodes_free} free inodes: free some or ask for at "
                f"most {room.inodes_free // INODES_PER_PARTITION} partitions."
            )
    needed = partitions * BYTES_PER_PARTITION
    if needed > room.bytes_free:
        raise InsufficientStorageError(
            f"{action} would create {partitions} partition directories, about {needed // 1024} KiB, but "
            f"the data directory's filesystem has {room.bytes_free // 1024} KiB free: free space on the "
            "data disk."
        )


async def check_room_for_partitions(data_dir: Path, partitions: int, action: str) -> None:
    """Read the headroom off the event loop and refuse ``partitions`` new local partitions that do not fit
    (see :func:`check_headroom`). ``action`` starts the message ("creating topic 'x'"). Safe to call
    concurrently; writes nothing."""
    if partitions <= 0:
        return
    room = await asyncio.to_thread(headroom, data_dir)
    check_headroom(room, partitions, action)
