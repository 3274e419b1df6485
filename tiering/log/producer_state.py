"""The idempotent producer state of one partition log (design note 0011, Kafka's ProducerStateManager).

For every producer id seen in the log: its epoch and the metadata of its last five batches (sequences,
offsets, max timestamp). A leader's append is checked against it (:meth:`ProducerStateManager.validate`,
Kafka's ``ProducerAppendInfo`` with client origin) and every stored batch updates it
(:meth:`ProducerStateManager.record`, any origin: followers and replay apply batches without checks).

Durable as ``%020d.snapshot`` files in Kafka's layout (big-endian)::

    int16   version (1)
    uint32  CRC-32C of everything after this field
    int32   entry count
    per producer:
        int64 producer id, int16 epoch, int32 last sequence, int64 last offset,
        int32 offset delta (last offset - first offset of its last batch), int64 timestamp,
        int32 coordinator epoch (-1), int64 current transaction first offset (-1)

A snapshot named ``N`` holds the state after every batch below offset ``N``; only the last batch of each
producer is in it, the five-batch cache refills from the log replayed after it. Only batch headers are
ever read (:func:`~tierlog.tiering.log.scan.scan_batches`), never records.

Not thread-safe: the partition log touches it only under its lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.codec.header import BatchHeader, crc32c
from tierlog.tiering.log.checkpoint import fsync_directory
from tierlog.tiering.log.naming import SNAPSHOT_SUFFIX, TMP_SUFFIX, snapshot_path
from tierlog.tiering.log.scan import scan_batches
from tierlog.tiering.log.segment import BatchMeta, LogSegment
from tierlog.tiering.log.types import AppendInfo, ProducerInfo
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)

__all__ = [
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
    "SNAPSHOT_SUFFIX",
    "decode_snapshot",
    "duplicate_info",
    "encode_snapshot",
    "snapshot_path",
    "last_sequence",
]

_log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # the CRC covers everything after version and CRC


def last_sequence(base_sequence: int, delta: int) -> int:
    """The sequence of a batch's last record: ``base_sequence + delta`` wrapping after 2**31-1 to 0."""
    seq = base_sequence + delta
    return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


def _first_sequence(last_seq: int, delta: int) -> int:
    seq = last_seq - delta
    return seq + INT32_MAX + 1 if seq < 0 else seq


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One stored batch of a producer: its sequences, offsets and max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    """A producer's epoch and its last (at most five) batches, oldest first. Not thread-safe."""

    __slots__ = ("batches", "epoch", "producer_id")

    def __init__(self, producer_id: int, epoch: int, batches: Iterable[BatchMetadata] = ()) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=MAX_CACHED_BATCHES)

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, self.batches)

    @property
    def last(self) -> BatchMetadata:
        return self.batches[-1]

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with the same epoch and sequence range, else ``None``."""
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def add(self, epoch: int, meta: BatchMetadata) -> None:
        """Record a batch: a higher epoch starts a fresh cache, the same epoch appends to it."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(meta)

    def info(self) -> ProducerInfo:
        last = self.last
        return ProducerInfo(self.producer_id, self.epoch, last.last_seq, last.last_offset, last.timestamp)


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """The snapshot file bytes for ``entries`` (the last batch of each). Pure."""
    body = bytearray(_HEAD.size)
    count = 0
    for entry in entries:
        last = entry.last
        body += _ENTRY.pack(
            entry.producer_id,
            entry.epoch,
            last.last_seq,
            last.last_offset,
            last.last_offset - last.first_offset,
            last.timestamp,
            -1,
            -1,
        )
        count += 1
    struct.pack_into(">i", body, _CRC_START, count)
    _HEAD.pack_into(body, 0, SNAPSHOT_VERSION, crc32c(memoryview(body)[_CRC_START:]), count)
    return bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    """The entries of a snapshot file, each with its one batch. Pure.

    Raises:
        ValueError: wrong version, bad CRC, wrong length or an impossible field.
    """
    if len(data) < _HEAD.size:
        raise ValueError(f"snapshot of {len(data)} bytes is truncated")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"unsupported snapshot version {version}")
    if crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise ValueError("snapshot CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError(f"snapshot length {len(data)} does not hold {count} entries")
    entries = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, _, _ in _ENTRY.iter_unpack(data[_HEAD.size :]):
        if pid < 0 or epoch < 0 or last_seq < 0 or delta < 0 or last_offset < delta:
            raise ValueError(f"impossible snapshot entry for producer {pid}")
        first_seq = _first_sequence(last_seq, delta)
        meta = BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, timestamp)
        entries.append(ProducerEntry(pid, epoch, (meta,)))
    return entries


def duplicate_info(originals: Sequence[BatchMetadata], record_count: int) -> AppendInfo:
    """The answer to an append whose every batch was stored before: the offsets of the first time (-1 for
    a batch older than the cache, whose offsets are unknown). Pure."""
    known = [meta for meta in originals if meta.first_offset >= 0]
    return AppendInfo(
        base_offset=known[0].first_offset if known else -1,
        last_offset=max((meta.last_offset for meta in known), default=-1),
        record_count=record_count,
        batch_base_offsets=[meta.first_offset for meta in originals],
        log_append_time=-1,
        duplicate=True,
    )


def _metadata(header: BatchHeader, meta: BatchMeta) -> BatchMetadata:
    delta = header.last_offset_delta
    return BatchMetadata(
        header.base_sequence, last_sequence(header.base_sequence, delta), meta[1], meta[2], meta[3]
    )


Batches = Sequence[tuple[int, BatchHeader]]


class ProducerStateManager:
    """The producer entries of one partition and its snapshot files. Not thread-safe (the log's lock)."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._producers: dict[int, ProducerEntry] = {}
        self._snapshots: list[int] = []  # offsets of the snapshot files, ascending

    @property
    def empty(self) -> bool:
        return not self._producers

    @property
    def snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files on disk, ascending."""
        return list(self._snapshots)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def producers(self) -> list[ProducerInfo]:
        """Every producer's last batch, sorted by producer id."""
        return [self._producers[pid].info() for pid in sorted(self._producers)]

    # ------------------------------------------------------------------ the rules
    def validate(self, headers: Batches, metas: Sequence[BatchMeta]) -> list[BatchMetadata] | None:
        """Check a leader's append against the state (design note 0011, "Rules at the leader").

        Batches are checked in order, each against the state the previous ones leave; nothing is changed.
        Returns the stored metadata of the leading duplicates: every batch when all are duplicates
        (nothing must be appended), a prefix when the append starts with batches stored before (a retry
        of which a new leader copied only the first batches: only the rest is appended), else ``None``
        (append, then :meth:`record`).

        Raises:
            InvalidRequestError: a duplicate after a new batch (or a batch without a producer id).
            ProducerFencedError: an epoch below the producer's.
            OutOfOrderSequenceError: a sequence that does not continue the producer's.
            DuplicateSequenceError: an already stored batch older than the five cached.
        """
        staged: dict[int, ProducerEntry] = {}
        duplicates: list[BatchMetadata] = []
        fresh = 0
        for (_, header), meta in zip(headers, metas, strict=True):
            pid = header.producer_id
            if pid < 0:
                fresh += 1
                continue
            entry = staged.get(pid)
            if entry is None:
                entry = self._producers.get(pid)
            epoch, first_seq = header.producer_epoch, header.base_sequence
            last_seq = last_sequence(first_seq, header.last_offset_delta)
            if entry is not None:
                original = entry.find_duplicate(epoch, first_seq, last_seq)
                if original is None and _check(entry, pid, epoch, first_seq, last_seq):
                    original = BatchMetadata(first_seq, last_seq, -1, -1, -1)  # stored, offsets unknown
                if original is not None:
                    if fresh:
                        raise InvalidRequestError(
                            f"batch of producer {pid} sequences {first_seq}..{last_seq} was stored "
                            f"before, but follows {fresh} new batches of this append"
                        )
                    duplicates.append(original)
                    continue
                entry = entry.copy()
            else:
                entry = ProducerEntry(pid, epoch)
            entry.add(epoch, _metadata(header, meta))
            staged[pid] = entry
            fresh += 1
        if duplicates and not fresh and all(d.first_offset < 0 for d in duplicates):
            first, last = duplicates[0], duplicates[-1]
            raise DuplicateSequenceError(
                f"sequences {first.first_seq}..{last.last_seq} are already stored (older than the "
                f"{MAX_CACHED_BATCHES} batches whose offsets this partition remembers)"
            )
        return duplicates or None

    def record(self, headers: Batches, metas: Sequence[BatchMeta]) -> None:
        """Apply stored batches without checks (any origin). A batch with an epoch below its producer's
        replaces nothing and is logged; batches without a producer id are skipped."""
        producers = self._producers
        for (_, header), meta in zip(headers, metas, strict=True):
            pid = header.producer_id
            if pid < 0:
                continue
            entry = producers.get(pid)
            epoch = header.producer_epoch
            if entry is None:
                producers[pid] = ProducerEntry(pid, epoch, (_metadata(header, meta),))
            elif epoch < entry.epoch:
                _log.warning(
                    "%s: batch at offset %d of producer %d has epoch %d below %d; state unchanged",
                    self._dir,
                    meta[1],
                    pid,
                    epoch,
                    entry.epoch,
                )
            else:
                entry.add(epoch, _metadata(header, meta))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drop the producers whose last batch timestamp is ``expiration_ms`` or more before ``now_ms``;
        returns how many. Idempotent."""
        doomed = [pid for pid, e in self._producers.items() if now_ms - e.last.timestamp >= expiration_ms]
        for pid in doomed:
            del self._producers[pid]
        return len(doomed)

    def clear(self) -> None:
        self._producers.clear()

    # ------------------------------------------------------------------ snapshots
    def take_snapshot(
        self,
        offset: int,
        pending: tuple[Batches, Sequence[BatchMeta]] | None = None,
        *,
        sync: bool = True,
    ) -> None:
        """Write ``<offset>.snapshot`` (temp file, fsync, rename, directory fsync). ``pending`` are batches
        of an append in progress: those ending below ``offset`` are included (a roll in the middle of an
        append), without changing the state. Logs a warning on an I/O error: the log replay recovers a
        missing snapshot, so a failure never takes the log offline.

        ``sync=False`` (a roll, under the partition lock on the produce path) skips both fsyncs, as Kafka
        does at a roll: a snapshot torn or lost by a power failure fails its CRC or is missing, is deleted
        at the next open, and the state is rebuilt from an older snapshot and the log."""
        entries = self._producers
        if pending is not None:
            headers, metas = pending
            ahead = [(h, m) for h, m in zip(headers, metas, strict=True) if m[2] < offset]
            if any(h[1].producer_id >= 0 for h, _ in ahead):
                overlay = ProducerStateManager(self._dir)
                overlay._producers = {pid: entry.copy() for pid, entry in entries.items()}
                overlay.record([h for h, _ in ahead], [m for _, m in ahead])
                entries = overlay._producers
        path = snapshot_path(self._dir, offset)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        try:
            with open(tmp, "wb") as f:
                f.write(encode_snapshot(entries[pid] for pid in sorted(entries)))
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            if sync:
                fsync_directory(self._dir)
        except OSError as err:
            _log.warning("could not write the producer snapshot %s: %s", path, err)
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            return
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()

    def delete_snapshots_above(self, offset: int) -> None:
        """Unlink every snapshot whose offset is greater than ``offset`` (truncation). Logs I/O errors."""
        while self._snapshots and self._snapshots[-1] > offset:
            self._unlink(self._snapshots.pop())

    def delete_snapshots_below(self, offset: int) -> None:
        """Unlink the snapshots below ``offset`` (retention deleted their segments), keeping the newest."""
        while len(self._snapshots) > 1 and self._snapshots[0] < offset:
            self._unlink(self._snapshots.pop(0))

    def delete_all_snapshots(self) -> None:
        for offset in self._snapshots:
            self._unlink(offset)
        self._snapshots.clear()

    def _unlink(self, offset: int) -> None:
        try:
            snapshot_path(self._dir, offset).unlink(missing_ok=True)
        except OSError as err:
            _log.warning("could not delete the producer snapshot %d of %s: %s", offset, self._dir, err)

    def _list_snapshots(self) -> list[int]:
        found = []
        for name in os.listdir(self._dir):
            match = _SNAPSHOT_NAME.match(name)
            if match is not None:
                found.append(int(match.group(1)))
        return sorted(found)

    # ------------------------------------------------------------------ load and replay
    def load(self, segments: Sequence[LogSegment], log_start: int, log_end: int) -> None:
        """Rebuild the state from disk: delete the snapshots above ``log_end``, load the newest readable
        one (a bad one is deleted and logged, the next older tried), then replay the batch headers from
        ``max(snapshot offset, log_start)`` to ``log_end``. Also the reload after a truncation.

        Raises:
            OSError: the directory or a segment cannot be read.
        """
        self._snapshots = self._list_snapshots()
        self.delete_snapshots_above(log_end)
        self._producers = {}
        start = log_start
        while self._snapshots:
            offset = self._snapshots[-1]
            if offset < log_start:
                # older than the log: producers of the batches between it and the log start would keep a
                # stale sequence (and refuse a well-behaved batch); start empty, as Kafka does
                _log.info("snapshot %d of %s is below the log start %d", offset, self._dir, log_start)
                self.delete_all_snapshots()
                break
            path = snapshot_path(self._dir, offset)
            try:
                entries = decode_snapshot(path.read_bytes())
            except (ValueError, FileNotFoundError) as err:
                _log.warning("deleting the unreadable producer snapshot %s: %s", path, err)
                self._unlink(self._snapshots.pop())
                continue
            self._producers = {e.producer_id: e for e in entries}
            start = max(offset, log_start)
            break
        self.replay(segments, start, log_end)

    def replay(self, segments: Sequence[LogSegment], start: int, end: int) -> None:
        """:meth:`record` the batches of ``segments`` holding offsets in ``[start, end)``, headers only.

        Raises:
            OSError: a segment cannot be read.
        """
        for seg in segments:
            if seg.next_offset <= start or seg.base_offset >= end:
                continue
            found = seg.locate(start) if start > seg.base_offset else (0, seg.base_offset, 0)
            if found is None:
                continue
            batches = scan_batches(
                seg.fd, base_offset=seg.base_offset, start=found[0], end=seg.size, verify=False
            )
            for _, header in batches:
                if header.base_offset >= end:
                    break
                if header.producer_id >= 0 and header.last_offset >= start:
                    meta = (header.size, header.base_offset, header.last_offset, header.max_timestamp)
                    self.record(((0, header),), (meta,))


def _check(entry: ProducerEntry, pid: int, epoch: int, first_seq: int, last_seq: int) -> bool:
    """Rules 2 and 3 of the note for a batch that is not a duplicate of ``entry``'s cache: True when the
    batch was stored before but is older than the cache (its offsets are unknown), False when it may be
    appended. Raises ProducerFencedError or OutOfOrderSequenceError."""
    if epoch < entry.epoch:
        raise ProducerFencedError(f"producer {pid} epoch {epoch} is fenced by epoch {entry.epoch}")
    if epoch > entry.epoch:
        if first_seq != 0 and entry.epoch >= 0:
            raise OutOfOrderSequenceError(
                f"producer {pid}: new epoch {epoch} starts at sequence {first_seq}, expected 0"
            )
        return False
    current = entry.last.last_seq
    if _in_sequence(current, first_seq):
        return False
    oldest = entry.batches[0].first_seq
    if first_seq <= last_seq and oldest <= current and last_seq < oldest:
        return True
    raise OutOfOrderSequenceError(
        f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {current}"
    )
