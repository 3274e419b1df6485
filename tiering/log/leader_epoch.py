"""The leader epoch cache of one partition: which leader epoch wrote the log from which offset on.

Kafka's ``LeaderEpochFileCache`` over the ``leader-epoch-checkpoint`` file, in Kafka's
``LeaderEpochCheckpointFile`` text format::

    0                       format version
    2                       number of entries
    0 0                     <epoch> <start offset>, one line per epoch, both strictly increasing
    3 120

An entry ``(epoch, start_offset)`` says the first batch stamped with ``epoch`` sits at ``start_offset``; the
epoch holds the offsets up to the next entry's start (the log end offset for the latest). Followers compare
these with the leader's to find where their logs diverge (KIP-101, KIP-279).

The file is rewritten atomically (``.tmp`` sibling, fsync, rename, directory fsync) only when an entry
changes: once per leader epoch on the append path, never per append. A malformed file is logged and read
as empty: a follower with no epochs truncates to its high watermark, which is safe.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.log.checkpoint import fsync_directory
from tierlog.tiering.log.naming import TMP_SUFFIX

__all__ = ["EpochEntry", "LeaderEpochCache", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]

_log = logging.getLogger(__name__)
_VERSION = "0"

UNDEFINED_EPOCH = -1
"""Kafka's ``UNDEFINED_EPOCH``: no epoch known (the ``partition_leader_epoch`` of an unstamped batch)."""
UNDEFINED_EPOCH_OFFSET = -1
"""Kafka's ``UNDEFINED_EPOCH_OFFSET``: the end offset of an epoch the cache cannot place."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The first offset written under one leader epoch."""

    epoch: int
    start_offset: int


def _parse(text: str) -> list[EpochEntry]:
    """The entries of a checkpoint's text. Pure.

    Raises:
        ValueError: wrong version, a count that disagrees with the lines, a malformed line, a negative
            value, or entries whose epochs or start offsets do not strictly increase.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or lines[0].strip() != _VERSION:
        raise ValueError("missing or unknown version line")
    count = int(lines[1])
    if count != len(lines) - 2:
        raise ValueError(f"header says {count} entries, the file holds {len(lines) - 2}")
    entries: list[EpochEntry] = []
    for line in lines[2:]:
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"malformed entry {line!r}")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"negative entry {line!r}")
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset):
            raise ValueError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append(entry)
    return entries


def _format(entries: Sequence[EpochEntry]) -> bytes:
    body = [_VERSION, str(len(entries))]
    body.extend(f"{entry.epoch} {entry.start_offset}" for entry in entries)
    return ("\n".join(body) + "\n").encode("ascii")


class LeaderEpochCache:
    """Kafka's LeaderEpochFileCache over ``path``.

    Thread-safe: every method takes the cache's own lock (never any other lock, so callers may hold
    theirs). Each method that changes an entry rewrites the file before changing what readers see. If the
    write fails the ``OSError`` propagates; :meth:`assign` and :meth:`replace` then leave the cache as it
    was, while the truncations (which follow a log that already changed) keep the new entries in memory
    and rewrite the file at the next change (open also drops entries past the log end).
    """

    def __init__(self, path: Path, *, topic: str = "", partition: int = 0) -> None:
        """Load ``path`` (missing: empty). A malformed file is logged as a warning and read as empty;
        it is rewritten at the next change. Never raises on the file's content.

        Raises:
            OSError: the file exists but cannot be read (other than missing).
        """
        self._path = Path(path)
        self.topic = topic
        self.partition = partition
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] = ()
        self._stale = False  # the file lags self._entries (a truncation's write failed)
        try:
            text = self._path.read_text(encoding="ascii")
        except FileNotFoundError:
            return
        except UnicodeDecodeError as err:
            self._warn_malformed(err)
            return
        try:
            self._entries = tuple(_parse(text))
        except ValueError as err:
            self._warn_malformed(err)

    def _warn_malformed(self, err: Exception) -> None:
        _log.warning(
            "leader epoch checkpoint %s of %s-%d is malformed (%s); starting with no epochs",
            self._path,
            self.topic,
            self.partition,
            err,
        )

    @property
    def path(self) -> Path:
        return self._path

    def entries(self) -> tuple[EpochEntry, ...]:
        """Every entry, oldest first. Lock-free read of an immutable snapshot."""
        return self._entries

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the latest entry, ``None`` when there is none. Lock-free."""
        entries = self._entries
        return entries[-1].epoch if entries else None

    def _store_locked(self, entries: tuple[EpochEntry, ...], *, publish_on_failure: bool = False) -> bool:
        """Write ``entries`` to the file, then publish them; False (nothing written) when unchanged and
        the file is up to date. With ``publish_on_failure`` (truncations: the log already changed) a
        failed write still publishes them, and the file is rewritten at the next call."""
        if entries == self._entries and not self._stale:
            return False
        try:
            self._write(entries)
        except OSError:
            if publish_on_failure:
                self._entries, self._stale = entries, True
            raise
        self._entries, self._stale = entries, False
        return True

    def _write(self, entries: Sequence[EpochEntry]) -> None:
        tmp = self._path.with_name(self._path.name + TMP_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, _format(entries))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path)
        fsync_directory(self._path.parent)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True when the file changed.

        Ignored (False) when ``epoch`` is below the latest epoch, when ``start_offset`` is below the latest
        entry's, or when ``epoch`` is the latest epoch already (its start does not move forward). Otherwise
        entries whose epoch is >= ``epoch`` or whose start is >= ``start_offset`` are dropped (an epoch that
        wrote nothing) and the entry appended. Cheap when nothing changes (no lock, no I/O): the append path
        calls it for every batch. Thread-safe; idempotent.

        Raises:
            ValueError: a negative epoch or offset.
            OSError: the file cannot be written (the cache is unchanged).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if not self._needs_update(epoch, start_offset):
            return False
        with self._lock:
            if not self._needs_update(epoch, start_offset):
                return False
            kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
            dropped = len(self._entries) - len(kept)
            if dropped and self._entries[-1].start_offset != start_offset:
                _log.warning(
                    "epoch %d at offset %d of %s-%d drops conflicting entries %s",
                    epoch,
                    start_offset,
                    self.topic,
                    self.partition,
                    self._entries[len(kept) :],
                )
            return self._store_locked((*kept, EpochEntry(epoch, start_offset)))

    def _needs_update(self, epoch: int, start_offset: int) -> bool:
        entries = self._entries
        if not entries:
            return True
        latest = entries[-1]
        return epoch > latest.epoch and start_offset >= latest.start_offset

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch found, end offset)`` for a requested ``epoch``.

        For the latest epoch: ``(epoch, log_end_offset)``. For an older epoch E: the largest known epoch
        <= E and the start offset of the first known epoch after E; below the first entry, as Kafka does,
        ``(E, start offset of the first entry)`` (nothing of E can be here past that). ``(-1, -1)``
        (undefined: the caller falls back to its high watermark) when E is negative, above the latest, or
        the cache is empty. Thread-safe (lock-free snapshot); idempotent.
        """
        entries = self._entries
        if epoch < 0 or not entries or epoch > entries[-1].epoch:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch < entries[0].epoch:
            return epoch, entries[0].start_offset
        if epoch == entries[-1].epoch:
            return epoch, log_end_offset
        i = bisect.bisect_right([e.epoch for e in entries], epoch)
        return entries[i - 1].epoch, entries[i].start_offset

    def epoch_for(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the latest entry starting at or below it; ``None`` below the
        first entry or with no entry. Thread-safe (lock-free snapshot); idempotent."""
        entries = self._entries
        i = bisect.bisect_right([e.start_offset for e in entries], offset)
        return entries[i - 1].epoch if i else None

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries whose start offset is >= ``end_offset`` (the log was truncated to it).
        Thread-safe; idempotent; no I/O when nothing is dropped.

        Raises:
            OSError: the file cannot be written (the entries are dropped in memory anyway).
        """
        if end_offset < 0:
            return
        with self._lock:
            kept = tuple(e for e in self._entries if e.start_offset < end_offset)
            self._store_locked(kept, publish_on_failure=True)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop the entries that start at or below it except the
        last of them, which is moved to start at ``start_offset`` (it still holds the offsets from there).
        Thread-safe; idempotent; no I/O when nothing changes.

        Raises:
            OSError: the file cannot be written (the entries change in memory anyway).
        """
        with self._lock:
            entries = self._entries
            below = [e for e in entries if e.start_offset <= start_offset]
            if not below:
                return
            first = EpochEntry(below[-1].epoch, start_offset)
            self._store_locked((first, *entries[len(below) :]), publish_on_failure=True)

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Replace every entry with ``entries`` (KIP-405 bootstrap from remote metadata, or a reset).
        Thread-safe; idempotent.

        Raises:
            ValueError: negative values, or epochs or start offsets that do not strictly increase.
            OSError: the file cannot be written (the cache is unchanged).
        """
        new = tuple(EpochEntry(int(e.epoch), int(e.start_offset)) for e in entries)
        for prev, cur in itertools.pairwise(new):
            if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
                raise ValueError(f"leader epoch entries out of order: {prev} then {cur}")
        if any(e.epoch < 0 or e.start_offset < 0 for e in new):
            raise ValueError(f"negative leader epoch entry in {new}")
        with self._lock:
            self._store_locked(new)

    def flush(self) -> None:
        """Rewrite the file from memory even if unchanged (e.g. after a malformed one was read).
        Thread-safe; idempotent.

        Raises:
            OSError: the file cannot be written.
        """
        with self._lock:
            self._write(self._entries)
            self._stale = False

    def __repr__(self) -> str:
        return f"LeaderEpochCache({str(self._path)!r}, {list(self._entries)})"
