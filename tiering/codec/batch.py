"""Build and decode whole Kafka v2 record batches: the 61-byte header, then the (compressed) records.

::

    +--------------------------------------------+----------------------------------------------+
    | header, 61 bytes (tierlog.tiering.codec.header)    | records section (tierlog.tiering.codec.records),
     |
    | base_offset .. crc .. attributes ..        | compressed as one stream when attributes      |
    | records_count                              | bits 0-2 name a codec (tierlog.tiering.codec.compression)|
    +--------------------------------------------+----------------------------------------------+
                       CRC-32C covers byte 21 (attributes) to the end of the batch

The record loops run in the compiled core when it is loaded (:mod:`tierlog.tiering.codec._accel`).
This module imports nothing async; the broker, the Python client and Spark executors share it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.compression import Compression, compress, decompress
from tierlog.tiering.codec.header import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    crc32c,
    decode_header,
    verify_batch,
)
from tierlog.tiering.codec.records import Record, decode_records, write_record
from tierlog.tiering.codec.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "DecodedBatch",
    "build_batch",
    "build_batch_columns",
    "decode_batch",
    "iter_decoded_batches",
    "iter_records",
]

DEFAULT_MAX_UNCOMPRESSED = 64 * 2**20

_UINT32 = struct.Struct(">I")
_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A decoded batch: its header and its records with absolute offsets and final timestamps."""

    header: BatchHeader
    records: list[Record]


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise InvalidRequestError(f"{name}={value} is outside [{low}, {high}]")


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    now_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Encode ``records`` as one v2 batch with consecutive offsets from ``base_offset``, CRC set.

    A record timestamp of ``-1`` becomes ``now_ms`` (default: the wall clock). ``base_timestamp`` is the
    first record's timestamp and ``max_timestamp`` the largest, as Kafka's producer writes them; with
    ``log_append_time`` the batch is marked LogAppendTime and ``max_timestamp`` is ``now_ms``.
    Record ``offset`` fields are ignored. Pure and thread-safe.

    Raises:
        InvalidRequestError: ``records`` is empty, a timestamp is below -1, a field is out of range
            for its integer type, or the batch would exceed 2 GiB.
    """
    if not records:
        raise InvalidRequestError("a record batch needs at least one record")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    _check_range("base_offset", base_offset, 0, INT64_MAX)
    _check_range("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
    _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX)
    _check_range("producer_epoch", producer_epoch, _INT16_MIN, _INT16_MAX)
    _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
    _check_range("record count", len(records), 1, INT32_MAX)
    _check_range("last offset", base_offset + len(records) - 1, 0, INT64_MAX)
    attributes = int(compression)
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    native = _accel.native
    if native is not None and compression == Compression.NONE:
        return native.build_uncompressed(
            records, now, base_offset, partition_leader_epoch, attributes, producer_id, producer_epoch,
            base_sequence,
        )  # fmt: skip
    if native is not None:
        body, base_timestamp, max_timestamp = native.encode_records(records, now)
    else:
        body, base_timestamp, max_timestamp = _encode_records(records, now)
    payload = compress(compression, body) if compression != Compression.NONE else body
    if log_append_time:
        max_timestamp = now
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    _check_range("batch length", batch_length, 0, INT32_MAX)
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        len(records) - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_batch_columns(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    now_ms: int | None = None,
) -> bytes:
    """:func:`build_batch` of ``Record(key, value)`` for each key and value (timestamp "now", no headers),
    the same bytes, without a Record object per record where the compiled core builds an uncompressed
    batch. Pure and thread-safe.

    Raises:
        InvalidRequestError: as :func:`build_batch`.
        ValueError: ``keys`` and ``values`` differ in length.
    """
    native = _accel.native
    if native is None or compression != Compression.NONE or not keys:
        records = [Record(key, value) for key, value in zip(keys, values, strict=True)]
        return build_batch(records, base_offset=base_offset, compression=compression, now_ms=now_ms)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    _check_range("base_offset", base_offset, 0, INT64_MAX)
    _check_range("record count", len(keys), 1, INT32_MAX)
    _check_range("last offset", base_offset + len(keys) - 1, 0, INT64_MAX)
    return native.build_uncompressed_columns(
        keys, values, now, base_offset, -1, int(compression), -1, -1, -1
    )  # fmt: skip


def _encode_records(records: Sequence[Record], now: int) -> tuple[bytes, int, int]:
    """The records section (uncompressed), the base and the max timestamp: the pure reference."""
    timestamps = [now if r.timestamp == -1 else r.timestamp for r in records]
    base_timestamp = timestamps[0]
    max_timestamp = max(timestamps)
    if min(timestamps) < 0:
        raise InvalidRequestError(f"negative record timestamp {min(timestamps)}")
    _check_range("max_timestamp", max_timestamp, 0, INT64_MAX)
    body = bytearray()
    for delta, (record, timestamp) in enumerate(zip(records, timestamps, strict=True)):
        write_record(body, delta, timestamp - base_timestamp, record.key, record.value, record.headers)
    return bytes(body), base_timestamp, max_timestamp


def decode_batch(
    buf: Buffer, pos: int = 0, *, verify: bool = True, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> DecodedBatch:
    """Decode the whole batch that starts at ``buf[pos]``, decompressing its records.

    With ``verify`` the CRC is checked first; without it the structure is still fully checked.
    Records get absolute offsets; in a LogAppendTime batch every record's timestamp is the batch
    ``max_timestamp``. A compressed section may decompress to at most ``max_uncompressed`` bytes.
    Pure and thread-safe (``buf`` must not change meanwhile).

    Raises:
        CorruptRecordError: truncated, bad magic, impossible lengths, CRC mismatch (with ``verify``),
            unknown codec, a malformed or oversized compressed section, or malformed records.
    """
    header = verify_batch(buf, pos) if verify else decode_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"truncated batch at position {pos}: needs {header.size} bytes, {len(buf) - pos} present"
        )
    if header.records_count == 0:
        # An empty batch (left by compaction to keep producer state) has no records section to read.
        return DecodedBatch(header, [])
    try:
        codec = Compression(header.compression)
    except ValueError:
        raise CorruptRecordError(
            f"unknown compression codec {header.compression} in batch at position {pos}"
        ) from None
    section = memoryview(buf)[pos + HEADER_SIZE : end]
    data: Buffer = section
    if codec != Compression.NONE:
        data = decompress(codec, section, max_size=max_uncompressed)
    append_time = header.max_timestamp if header.log_append_time else None
    records = decode_records(
        data, header.records_count, header.base_offset, header.base_timestamp, append_time
    )
    return DecodedBatch(header, records)


def iter_decoded_batches(
    buf: Buffer, *, verify: bool = True, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> Iterator[tuple[int, DecodedBatch]]:
    """Yield ``(position, batch)`` for each batch in ``buf``, which must hold whole batches only.

    Lazy: a corrupt batch raises when it is reached, after the batches before it were yielded.

    Raises:
        CorruptRecordError: as :func:`decode_batch`, or the buffer ends inside a batch.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        batch = decode_batch(buf, pos, verify=verify, max_uncompressed=max_uncompressed)
        yield pos, batch
        pos += batch.header.size


def iter_records(buf: Buffer, *, verify: bool = True) -> Iterator[tuple[BatchHeader, Record]]:
    """Yield ``(header, record)`` for every record of every batch in ``buf`` (whole batches only).

    Lazy, like :func:`iter_decoded_batches`.

    Raises:
        CorruptRecordError: as :func:`decode_batch`, or the buffer ends inside a batch.
    """
    for _, batch in iter_decoded_batches(buf, verify=verify):
        header = batch.header
        for record in batch.records:
            yield header, record
