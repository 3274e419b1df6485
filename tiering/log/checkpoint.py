"""The per-partition offset checkpoint files, in Kafka's checkpoint text format.

Kafka keeps one such file per data directory listing every partition; tierlog keeps one per partition
directory holding a single entry, in the same format so the files read the same way::

    0                       format version
    1                       number of entries
    <topic> <partition> <offset>

Written atomically: a ``.tmp`` sibling is written and fsynced, renamed over the file, and the directory
is fsynced, so a crash leaves either the old or the new file.
"""

from __future__ import annotations

import os
from pathlib import Path

from tierlog.tiering.log.naming import TMP_SUFFIX

__all__ = ["read_offset_checkpoint", "write_offset_checkpoint", "fsync_directory"]

_VERSION = "0"


def fsync_directory(directory: Path) -> None:
    """fsync a directory so renames and creations inside it survive a crash. Idempotent.

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offset_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    """Atomically replace ``path`` with a one-entry checkpoint. Idempotent; not thread-safe per path.

    Raises:
        OSError: the file cannot be written.
    """
    body = f"{_VERSION}\n1\n{topic or '-'} {partition} {offset}\n".encode()
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_offset_checkpoint(path: Path) -> int | None:
    """The offset stored in ``path``; ``None`` if the file is missing or malformed. Never raises.

    A malformed checkpoint is treated as absent: both checkpoints are hints that only make recovery
    faster or keep a log start offset, and the safe fallback is a full rescan from the first segment.
    """
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) < 3 or lines[0].strip() != _VERSION or lines[1].strip() != "1":
        return None
    fields = lines[2].split()
    if len(fields) != 3:
        return None
    try:
        offset = int(fields[2])
    except ValueError:
        return None
    return offset if offset >= 0 else None
