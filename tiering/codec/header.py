"""The 61-byte header of a Kafka record batch, magic v2, and the framing of batches in a byte stream.

Byte layout (all integers big-endian, offsets from the start of the batch)::

    0   base_offset             int64   offset of the first record; the broker rewrites only this field
    8   batch_length            int32   bytes after this field (whole batch = batch_length + 12)
    12  partition_leader_epoch  int32
    16  magic                   int8    always 2
    17  crc                     uint32  CRC-32C (Castagnoli) of bytes 21..end
    21  attributes              int16   bits 0-2 compression, 3 timestamp type, 4 transactional,
                                        5 control, 6 delete horizon
    23  last_offset_delta       int32   last record offset - base_offset
    27  base_timestamp          int64   timestamp of the first record (ms)
    35  max_timestamp           int64   largest record timestamp, or the append time for LogAppendTime
    43  producer_id             int64   -1 when not idempotent
    51  producer_epoch          int16
    53  base_sequence           int32
    57  records_count           int32
    61  records...                      varint-framed records, possibly compressed as one block

Because ``base_offset``, ``batch_length``, ``partition_leader_epoch``, ``magic`` and ``crc`` sit before
byte 21, the broker can assign offsets without recomputing the CRC.

Nothing here trusts a length read from the bytes: every length is checked against the buffer first,
and a bad batch raises :class:`~tierlog.wire.errors.CorruptRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from tierlog.wire.errors import CorruptRecordError, RecordTooLargeError

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_MASK",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "CONTROL_BIT",
    "DELETE_HORIZON_BIT",
    "NO_TIMESTAMP",
    "BatchHeader",
    "crc32c",
    "decode_header",
    "encode_header",
    "verify_batch",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "iter_batches",
    "valid_prefix",
]

HEADER = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length
    "i"  # partition_leader_epoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # records_count
)
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted by batch_length
MAGIC = 2
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a header with no records

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
NO_TIMESTAMP = -1

_PREFIX = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, as Kafka computes it for v2 batches."""
    return int(_crc32c.crc32c(data))


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded fixed header of one v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        """True when the timestamps are the broker's append time rather than the producer's."""
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def encode_header(header: BatchHeader) -> bytes:
    """Pack ``header`` into its 61 bytes exactly as given (the CRC is not recomputed)."""
    return HEADER.pack(
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def decode_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``buf[pos]``.

    Checks the magic byte and that ``batch_length`` is at least a bare header; does not check the CRC
    nor that the whole batch is present (see :func:`verify_batch`).

    Raises:
        CorruptRecordError: fewer than 61 bytes remain, the magic is not 2, or the length is impossible.
    """
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header at position {pos}: {max(len(buf) - pos, 0)} of {HEADER_SIZE} bytes"
        )
    fields = HEADER.unpack_from(buf, pos)
    header = BatchHeader(*fields)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic} at position {pos}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"impossible batch length {header.batch_length} at position {pos}")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError(f"negative offset delta or record count at position {pos}")
    return header


def verify_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, max_size: int | None = None
) -> BatchHeader:
    """Decode the header at ``buf[pos]`` and check that the whole batch is present and its CRC matches.

    ``max_size`` bounds the whole batch (``max.message.bytes``); ``None`` means no bound beyond the buffer.

    Raises:
        CorruptRecordError: truncated, bad magic, impossible length, or CRC mismatch.
        RecordTooLargeError: the batch is larger than ``max_size``.
    """
    header = decode_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"truncated batch at position {pos}: needs {header.size} bytes, {len(buf) - pos} present"
        )
    if max_size is not None and header.size > max_size:
        raise RecordTooLargeError(f"batch of {header.size} bytes exceeds max.message.bytes={max_size}")
    actual = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at offset {header.base_offset} (position {pos}): "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )
    return header


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``buf[pos]`` in place. The CRC stays valid.

    Idempotent; not safe against concurrent access to ``buf``. Raises ``struct.error`` if fewer than
    8 bytes follow ``pos`` or ``base_offset`` does not fit in an int64.
    """
    _INT64.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite the ``partition_leader_epoch`` of the batch at ``buf[pos]`` in place (bytes 12..15, outside
    the CRC, so it stays valid).

    Idempotent; not safe against concurrent access to ``buf``. Raises ``struct.error`` if fewer than 16
    bytes follow ``pos`` or ``epoch`` does not fit in an int32.
    """
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch at ``buf[pos]`` as LogAppendTime with ``timestamp`` and recompute its CRC in place.

    As Kafka's broker does: the timestamp-type bit is set and ``max_timestamp`` holds the append time;
    record timestamps are left as the producer wrote them, readers use ``max_timestamp``.
    Idempotent for a given ``timestamp``; not safe against concurrent access to ``buf``.

    Raises:
        CorruptRecordError: the header is malformed or the batch is not wholly inside ``buf``.
    """
    header = decode_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(f"truncated batch at position {pos}: cannot set its append time")
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]))


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify: bool = True, max_size: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for every batch in ``buf``, which must hold whole batches only.

    Raises:
        CorruptRecordError: a batch is truncated, malformed, or (with ``verify``) fails its CRC.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = verify_batch(buf, pos, max_size=max_size) if verify else decode_header(buf, pos)
        if not verify and pos + header.size > end:
            raise CorruptRecordError(f"truncated batch at position {pos}")
        yield pos, header
        pos += header.size


def valid_prefix(buf: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, BatchHeader]]]:
    """Length of the longest prefix of ``buf`` made of whole, CRC-valid batches with increasing offsets.

    Used by recovery to find where a torn or corrupt tail begins. Never raises on bad bytes.
    Returns ``(valid_bytes, [(position, header), ...])``.
    """
    pos = 0
    found: list[tuple[int, BatchHeader]] = []
    next_offset = -1
    while pos < len(buf):
        try:
            header = verify_batch(buf, pos)
        except CorruptRecordError:
            break
        if header.base_offset < next_offset:
            break
        found.append((pos, header))
        next_offset = header.next_offset
        pos += header.size
    return pos, found
