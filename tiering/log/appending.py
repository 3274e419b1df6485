"""The steps of an append that need no lock: validating the batches, stamping LogAppendTime, and the
offset assignment and segment-run planning done under the partition lock by :class:`.PartitionLog`.

Only batch headers are parsed: the engine does no per-record work. The producer's bytes are not copied
when only base offsets and the partition leader epoch change: each such batch is written with ``pwritev``
as a rewritten 16-byte prefix (base offset, length, leader epoch) followed by the rest of the batch; the
CRC covers neither field.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.tiering.codec.header import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.segment import BatchMeta, LogSegment
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = ["PreparedAppend", "prepare", "assign", "write_batches"]

_PREFIX = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch


@dataclass
class PreparedAppend:
    data: bytes | bytearray | memoryview
    headers: list[tuple[int, BatchHeader]]
    append_time: int
    record_count: int
    leader_epoch: int | None = None
    idempotent: bool = False  # some batch has a producer id (set by :func:`assign`)

    def drop_leading(self, count: int) -> None:
        """Forget the first ``count`` batches (stored before: a retried append's duplicate prefix); the
        rest keep their positions in :attr:`data`. Call :func:`assign` again afterwards."""
        dropped = self.headers[:count]
        self.headers = self.headers[count:]
        self.record_count -= sum(header.records_count for _, header in dropped)

    def epochs(self, metas: list[BatchMeta], *, assign_offsets: bool) -> list[tuple[int, int]]:
        """The ``(leader epoch, start offset)`` entries this append records: the stamped epoch at the
        first base offset; else, for batches kept as they are (``assign_offsets=False``, a follower), each
        batch's own epoch when >= 0; else none (a client's value in the field means nothing)."""
        if self.leader_epoch is not None:
            return [(self.leader_epoch, metas[0][1])]
        if assign_offsets:
            return []
        return [
            (header.partition_leader_epoch, meta[1])
            for (_, header), meta in zip(self.headers, metas, strict=True)
            if header.partition_leader_epoch >= 0
        ]


def prepare(
    batches: bytes | bytearray | memoryview,
    config: LogConfig,
    now_ms: int,
    *,
    assign_offsets: bool,
    leader_epoch: int | None = None,
) -> PreparedAppend:
    """Validate every batch (CRC, magic, framing, size) and stamp LogAppendTime if configured.

    A mutable buffer is copied first so that what is written is what was validated; ``bytes`` and
    read-only views are used as they are (copied only to stamp LogAppendTime): the caller of a read-only
    view keeps the memory under it unchanged until the append returns. LogAppendTime is stamped only with
    ``assign_offsets``: batches appended as they are (a follower copying its leader) keep the leader's
    bytes. ``leader_epoch`` is stamped into every batch when it is written (see :func:`assign`), not here.
    Pure; thread-safe.

    Raises:
        CorruptRecordError: a batch is truncated, malformed or fails its CRC, or (``assign_offsets``)
            its record count disagrees with its last offset delta.
        RecordTooLargeError: a batch is larger than ``max.message.bytes``.
        InvalidRequestError: there is no batch at all, a negative ``leader_epoch``, or
            (``assign_offsets``) a transactional batch or one with a producer id but a negative epoch or
            base sequence.
    """
    if leader_epoch is not None and not 0 <= leader_epoch <= 0x7FFFFFFF:
        raise InvalidRequestError(f"invalid leader epoch {leader_epoch}")
    stable = isinstance(batches, bytes) or (isinstance(batches, memoryview) and batches.readonly)
    data: bytes | bytearray | memoryview = batches if stable else bytes(batches)
    headers = list(iter_batches(data, verify=True, max_size=config.max_message_bytes))
    if not headers:
        raise InvalidRequestError("an append needs at least one record batch")
    if assign_offsets:
        for _, header in headers:
            if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
                raise CorruptRecordError(
                    f"batch with {header.records_count} records has last offset delta "
                    f"{header.last_offset_delta}"
                )
            if header.attributes & TRANSACTIONAL_BIT:
                raise InvalidRequestError("transactional batches are not supported")
            if header.producer_id >= 0 and (header.producer_epoch < 0 or header.base_sequence < 0):
                raise InvalidRequestError(
                    f"producer {header.producer_id} batch has epoch {header.producer_epoch} and base "
                    f"sequence {header.base_sequence}; both must be >= 0"
                )
    append_time = now_ms if config.log_append_time and assign_offsets else -1
    if append_time >= 0:
        data = bytearray(data)
        for position, _ in headers:
            set_log_append_time(data, position, append_time)
    return PreparedAppend(data, headers, append_time, sum(h.records_count for _, h in headers), leader_epoch)


def assign(prepared: PreparedAppend, start: int, *, assign_offsets: bool) -> list[BatchMeta]:
    """Rewrite base offsets from ``start`` on (or check they continue the log) and describe each batch.

    A copied buffer (LogAppendTime) gets the base offsets and leader epoch rewritten in place; otherwise
    :func:`write_batches` writes rewritten prefixes in front of the untouched bytes. Sets
    ``prepared.idempotent`` when some batch carries a producer id.

    Raises:
        InvalidRequestError: with ``assign_offsets=False``, a batch does not start where the previous
            one (or the log) ends.
    """
    metas: list[BatchMeta] = []
    expected = start
    stamp = prepared.append_time
    epoch = prepared.leader_epoch
    if epoch is not None and isinstance(prepared.data, bytearray):
        for position, _ in prepared.headers:
            set_partition_leader_epoch(prepared.data, position, epoch)
    idempotent = False
    for position, header in prepared.headers:
        if header.producer_id >= 0:
            idempotent = True
        if assign_offsets:
            base = expected
            if isinstance(prepared.data, bytearray):
                set_base_offset(prepared.data, position, base)
        elif header.base_offset != expected:
            raise InvalidRequestError(
                f"batch base offset {header.base_offset} does not continue the log at offset {expected}"
            )
        else:
            base = header.base_offset
        last = base + header.last_offset_delta
        metas.append((header.size, base, last, stamp if stamp >= 0 else header.max_timestamp))
        expected = last + 1
    prepared.idempotent = idempotent
    return metas


def needs_roll(seg: LogSegment, size: int, last_offset: int, now_ms: int, config: LogConfig) -> bool:
    """Whether a non-empty active segment must be sealed before a batch of ``size`` bytes ending at
    ``last_offset``: ``segment.bytes``, ``segment.ms``, a full index, or an int32 relative offset overflow.
    """
    return bool(seg.size) and (
        seg.size + size > config.segment_bytes
        or now_ms - seg.created_ms >= config.segment_ms
        or seg.indexes_full
        or seg.would_overflow_offsets(last_offset)
    )


def write_batches(
    prepared: PreparedAppend,
    metas: list[BatchMeta],
    now_ms: int,
    config: LogConfig,
    active: Callable[[], LogSegment],
    roll: Callable[[int], None],
) -> None:
    """Write the batches ``metas`` describes as runs, each into one segment, rolling before a batch that
    does not fit so that a batch larger than ``segment.bytes`` lands alone in a fresh one. Called under
    the partition lock.

    Raises:
        OSError: a write or a roll fails; the caller undoes what was written.
    """
    i = 0
    while i < len(metas):
        size, base, last, _ = metas[i]
        if needs_roll(active(), size, last, now_ms, config):
            roll(base)
        seg = active()
        if not seg.size:
            seg.created_ms = now_ms
        pending = size
        j = i + 1
        while j < len(metas):
            size_j, _, last_j, _ = metas[j]
            if seg.size + pending + size_j > config.segment_bytes or seg.would_overflow_offsets(last_j):
                break
            pending += size_j
            j += 1
        seg.write(_buffers(prepared, i, j, metas), metas[i:j])
        i = j


def _buffers(
    prepared: PreparedAppend, start: int, stop: int, metas: list[BatchMeta]
) -> list[bytes | memoryview]:
    """The bytes of batches ``[start, stop)`` with their assigned base offsets and leader epoch, as few
    buffers as possible: runs of batches whose prefix is already right are one slice of the input; any
    other batch is a rewritten 16-byte prefix and a slice of the rest."""
    data = prepared.data
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    run_start = run_end = -1
    stamp = prepared.leader_epoch
    for k in range(start, stop):
        position = prepared.headers[k][0]
        size, base = metas[k][0], metas[k][1]
        old_base, length, old_epoch = _PREFIX.unpack_from(data, position)
        epoch = old_epoch if stamp is None else stamp
        if old_base == base and old_epoch == epoch:
            if run_end != position:
                if run_end >= 0:
                    out.append(view[run_start:run_end])
                run_start = position
            run_end = position + size
        else:
            if run_end >= 0:
                out.append(view[run_start:run_end])
            out.append(_PREFIX.pack(base, length, epoch))
            run_start, run_end = position + _PREFIX.size, position + size
    if run_end >= 0:
        out.append(view[run_start:run_end])
    return out
