"""The steps of an append that need no lock: validating the batches, stamping LogAppendTime, and the
offset assignment and segment-run planning done under the partition lock by :class:`.PartitionLog`.

Only batch headers are parsed: the engine does no per-record work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tiering.codec.header import BatchHeader, iter_batches, set_base_offset, set_log_append_time
from tiering.errors import CorruptRecordError, InvalidRequestError
from tiering.log.config import LogConfig
from tiering.log.segment import BatchMeta, LogSegment

__all__ = ["PreparedAppend", "prepare", "assign", "write_batches"]


@dataclass
class PreparedAppend:
    buf: bytearray
    headers: list[tuple[int, BatchHeader]]
    append_time: int
    record_count: int


def prepare(
    batches: bytes | bytearray | memoryview, config: LogConfig, now_ms: int, *, assign_offsets: bool
) -> PreparedAppend:
    """Copy and validate every batch (CRC, magic, framing, size) and stamp LogAppendTime if configured.

    Pure apart from the copy it returns; thread-safe.

    Raises:
        CorruptRecordError: a batch is truncated, malformed or fails its CRC, or (``assign_offsets``)
            its record count disagrees with its last offset delta.
        RecordTooLargeError: a batch is larger than ``max.message.bytes``.
        InvalidRequestError: there is no batch at all.
    """
    buf = bytearray(batches)
    headers = list(iter_batches(buf, verify=True, max_size=config.max_message_bytes))
    if not headers:
        raise InvalidRequestError("an append needs at least one record batch")
    if assign_offsets:
        for _, header in headers:
            if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
                raise CorruptRecordError(
                    f"batch with {header.records_count} records has last offset delta "
                    f"{header.last_offset_delta}"
                )
    append_time = now_ms if config.log_append_time else -1
    if append_time >= 0:
        for position, _ in headers:
            set_log_append_time(buf, position, append_time)
    return PreparedAppend(buf, headers, append_time, sum(h.records_count for _, h in headers))


def assign(prepared: PreparedAppend, start: int, *, assign_offsets: bool) -> list[BatchMeta]:
    """Rewrite base offsets from ``start`` on (or check they continue the log) and describe each batch.

    Raises:
        InvalidRequestError: with ``assign_offsets=False``, a batch does not start where the previous
            one (or the log) ends.
    """
    metas: list[BatchMeta] = []
    expected = start
    stamp = prepared.append_time
    for position, header in prepared.headers:
        if assign_offsets:
            base = expected
            set_base_offset(prepared.buf, position, base)
        elif header.base_offset != expected:
            raise InvalidRequestError(
                f"batch base offset {header.base_offset} does not continue the log at offset {expected}"
            )
        else:
            base = header.base_offset
        last = base + header.last_offset_delta
        metas.append((header.size, base, last, stamp if stamp >= 0 else header.max_timestamp))
        expected = last + 1
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
    view: memoryview,
    metas: list[BatchMeta],
    now_ms: int,
    config: LogConfig,
    active: Callable[[], LogSegment],
    roll: Callable[[int], None],
) -> None:
    """Write ``view`` (the batches ``metas`` describes) as runs, each into one segment, rolling before a
    batch that does not fit so that a batch larger than ``segment.bytes`` lands alone in a fresh one.
    Called under the partition lock.

    Raises:
        OSError: a write or a roll fails; the caller undoes what was written.
    """
    i = 0
    position = 0
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
        seg.write(view[position : position + pending], metas[i:j])
        position += pending
        i = j
