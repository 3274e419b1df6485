"""The steps of an append that need no lock: validating the batches, stamping LogAppendTime, and the
offset assignment and segment-run planning done under the partition lock by :class:`.PartitionLog`.

Only batch headers are parsed: the engine does no per-record work. The producer's bytes are not copied
when only base offsets change: each batch is written with ``pwritev`` as an 8-byte base offset followed by
the rest of the batch, which the CRC does not cover.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.tiering.codec.header import BatchHeader, iter_batches, set_base_offset, set_log_append_time
from tierlog.tiering.errors import CorruptRecordError, InvalidRequestError
from tierlog.tiering.log.config import LogConfig
from tierlog.tiering.log.segment import BatchMeta, LogSegment

__all__ = ["PreparedAppend", "prepare", "assign", "write_batches"]

_BASE_OFFSET = struct.Struct(">q")


@dataclass
class PreparedAppend:
    data: bytes | bytearray
    headers: list[tuple[int, BatchHeader]]
    append_time: int
    record_count: int


def prepare(
    batches: bytes | bytearray | memoryview, config: LogConfig, now_ms: int, *, assign_offsets: bool
) -> PreparedAppend:
    """Validate every batch (CRC, magic, framing, size) and stamp LogAppendTime if configured.

    A mutable buffer is copied first so that what is written is what was validated; ``bytes`` are used
    as they are (copied only to stamp LogAppendTime). Pure; thread-safe.

    Raises:
        CorruptRecordError: a batch is truncated, malformed or fails its CRC, or (``assign_offsets``)
            its record count disagrees with its last offset delta.
        RecordTooLargeError: a batch is larger than ``max.message.bytes``.
        InvalidRequestError: there is no batch at all.
    """
    data: bytes | bytearray = batches if isinstance(batches, bytes) else bytes(batches)
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
    append_time = now_ms if config.log_append_time else -1
    if append_time >= 0:
        data = bytearray(data)
        for position, _ in headers:
            set_log_append_time(data, position, append_time)
    return PreparedAppend(data, headers, append_time, sum(h.records_count for _, h in headers))


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
    """The bytes of batches ``[start, stop)`` with their assigned base offsets, as few buffers as possible:
    runs of batches whose base offset field is already right are one slice of the input."""
    data = prepared.data
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    run_start = run_end = -1
    for k in range(start, stop):
        position = prepared.headers[k][0]
        size, base = metas[k][0], metas[k][1]
        if _BASE_OFFSET.unpack_from(data, position)[0] == base:
            if run_end != position:
                if run_end >= 0:
                    out.append(view[run_start:run_end])
                run_start = position
            run_end = position + size
        else:
            if run_end >= 0:
                out.append(view[run_start:run_end])
            out.append(_BASE_OFFSET.pack(base))
            run_start, run_end = position + _BASE_OFFSET.size, position + size
    if run_end >= 0:
        out.append(view[run_start:run_end])
    return out
