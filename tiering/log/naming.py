"""File names inside a partition directory, exactly as Kafka names them.

A segment with base offset 42 is three files, the base offset zero-padded to 20 digits so that ``ls``
sorts them in offset order::

    00000000000000000042.log         the record batches
    00000000000000000042.index       sparse offset index
    00000000000000000042.timeindex   sparse time index

Lifecycle states are suffixes added by an atomic rename: ``.deleted`` (being removed by retention),
``.cleaned`` and ``.swap`` (left by a log cleaner; tierlog never writes them). Beside the segments live
three one-entry offset checkpoint files (recovery point, log start offset, high watermark), the leader
epoch checkpoint, the clean-shutdown marker and the producer state snapshots ``%020d.snapshot`` (see
``docs/format-segments.md``).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "DELETED_SUFFIX",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "TMP_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "CLEAN_SHUTDOWN_FILE",
    "LOCK_FILE",
    "LOG_START_OFFSET_FILE",
    "RECOVERY_POINT_FILE",
    "HIGH_WATERMARK_FILE",
    "LEADER_EPOCH_FILE",
    "filename_prefix",
    "log_path",
    "index_path",
    "timeindex_path",
    "snapshot_path",
    "parse_segment_file",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
SNAPSHOT_SUFFIX = ".snapshot"

CLEAN_SHUTDOWN_FILE = ".tierlog_cleanshutdown"
LOCK_FILE = ".tierlog.lock"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)((?:\.deleted|\.cleaned|\.swap)?)$")


def filename_prefix(base_offset: int) -> str:
    """The 20-digit zero-padded decimal form of ``base_offset``. Pure.

    Raises:
        ValueError: ``base_offset`` is negative.
    """
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:020d}"


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + LOG_SUFFIX)


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + INDEX_SUFFIX)


def timeindex_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + TIMEINDEX_SUFFIX)


def snapshot_path(directory: Path, offset: int) -> Path:
    """The producer state snapshot describing the state below ``offset``: ``<offset, 20 digits>.snapshot``."""
    return directory / (filename_prefix(offset) + SNAPSHOT_SUFFIX)


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """``(base_offset, kind_suffix, state_suffix)`` for a segment file name, else ``None``. Pure.

    ``parse_segment_file("00000000000000000042.index.deleted") == (42, ".index", ".deleted")``.
    """
    match = _SEGMENT_FILE.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)
