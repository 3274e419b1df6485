"""Columnar decoding: the records of whole batches as flat buffers, shaped for ``pyarrow.Array.from_buffers``.

No Python object is built per record by the compiled core: it walks each records section once and appends
to growable buffers. The pure-Python version below is the reference and gives the same bytes. Every
integer buffer is in native byte order (little-endian on every platform tierlog supports, as Arrow wants);
validity bitmaps are Arrow's (bit ``i % 8`` of byte ``i // 8`` set when row ``i`` is not null)::

    offsets          int64[count]        absolute record offsets
    timestamps       int64[count]        final timestamps (the batch max_timestamp for LogAppendTime)
    key_offsets      int32[count + 1]    key i is key_data[key_offsets[i]:key_offsets[i + 1]]
    key_data         bytes
    key_validity     bitmap[count]
    value_*          as key_*
    header_offsets   int32[count + 1]    record i's headers are entries header_offsets[i] .. [i + 1] - 1
    header_key_*     int32[entries + 1] offsets and UTF-8 data (header keys are never null)
    header_value_*   int32[entries + 1] offsets, data and validity bitmap

With pyarrow (the ``spark`` extra), for ``c = decode_columns(buf)``::

    keys = pa.Array.from_buffers(pa.binary(), c.count,
                                 [pa.py_buffer(c.key_validity), pa.py_buffer(c.key_offsets),
                                  pa.py_buffer(c.key_data)], null_count=c.key_nulls)
    offsets = pa.Array.from_buffers(pa.int64(), c.count, [None, pa.py_buffer(c.offsets)])

and headers as ``list<struct<key: string, value: binary>>`` from a struct array of the two entry columns
and ``header_offsets`` (tests/unit/tiering/codec/test_columns.py builds all of them).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import DEFAULT_MAX_UNCOMPRESSED, Buffer
from tierlog.tiering.codec.compression import Compression, decompress
from tierlog.tiering.codec.header import HEADER_SIZE, decode_header, verify_batch
from tierlog.tiering.codec.records import decode_records
from tierlog.wire.errors import CorruptRecordError

__all__ = ["RecordColumns", "decode_columns"]

Section = tuple[Buffer, int, int, int, int | None]  # data, count, base_offset, base_timestamp, append time


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The records of some batches as column buffers; see the module docstring for each field's layout."""

    offsets: bytes
    timestamps: bytes
    key_offsets: bytes
    key_data: bytes
    key_validity: bytes
    value_offsets: bytes
    value_data: bytes
    value_validity: bytes
    header_offsets: bytes
    header_key_offsets: bytes
    header_key_data: bytes
    header_value_offsets: bytes
    header_value_data: bytes
    header_value_validity: bytes
    count: int
    header_count: int
    key_nulls: int
    value_nulls: int
    header_value_nulls: int


def decode_columns(
    buf: Buffer, *, verify: bool = True, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
) -> RecordColumns:
    """Decode every record of the whole batches in ``buf`` into columns (compressed batches included).

    The checks are :func:`~tierlog.tiering.codec.batch.decode_batch`'s. Pure and thread-safe
    (``buf`` must not change meanwhile).

    Raises:
        CorruptRecordError: as ``decode_batch``, the buffer ends inside a batch, or an offset or
            timestamp overflows an int64.
        OverflowError: a column holds more than 2 GiB (its int32 offsets would overflow).
    """
    sections = _sections(buf, verify, max_uncompressed)
    if (native := _accel.native) is not None:
        return RecordColumns(*native.decode_columns(sections))
    return _decode_columns_pure(sections)


def _sections(buf: Buffer, verify: bool, max_uncompressed: int) -> list[Section]:
    view = memoryview(buf)
    sections: list[Section] = []
    pos = 0
    while pos < len(view):
        header = verify_batch(view, pos) if verify else decode_header(view, pos)
        end = pos + header.size
        if end > len(view):
            raise CorruptRecordError(f"truncated batch at position {pos}")
        if header.records_count:
            try:
                codec = Compression(header.compression)
            except ValueError:
                raise CorruptRecordError(f"unknown compression codec {header.compression}") from None
            section = view[pos + HEADER_SIZE : end]
            data: Buffer = section
            if codec != Compression.NONE:
                data = decompress(codec, section, max_size=max_uncompressed)
            append_time = header.max_timestamp if header.log_append_time else None
            base = header.base_offset
            sections.append((data, header.records_count, base, header.base_timestamp, append_time))
        pos = end
    return sections


class _Binary:
    """One nullable binary column being filled: int32 offsets, data and a validity bitmap."""

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.validity = bytearray()
        self.rows = 0
        self.nulls = 0

    def append(self, value: bytes | None) -> None:
        if self.rows % 8 == 0:
            self.validity.append(0)
        if value is None:
            self.nulls += 1
        else:
            self.validity[self.rows // 8] |= 1 << (self.rows % 8)
            self.data += value
        if len(self.data) > 2**31 - 1:
            raise OverflowError("a column is larger than 2 GiB (int32 offsets)")
        self.offsets.append(len(self.data))
        self.rows += 1


def _decode_columns_pure(sections: Sequence[Section]) -> RecordColumns:
    offsets, timestamps = array("q"), array("q")
    keys, values, header_values = _Binary(), _Binary(), _Binary()
    header_offsets, header_key_offsets = array("i", [0]), array("i", [0])
    header_key_data = bytearray()
    for data, count, base_offset, base_timestamp, append_time in sections:
        for index, record in enumerate(decode_records(data, count, base_offset, base_timestamp, append_time)):
            try:
                offsets.append(record.offset)
                timestamps.append(record.timestamp)
            except OverflowError:
                raise CorruptRecordError(f"record {index}: offset or timestamp overflows an int64") from None
            keys.append(record.key)
            values.append(record.value)
            for key, value in record.headers:
                header_key_data += key.encode("utf-8")
                if len(header_key_data) > 2**31 - 1:
                    raise OverflowError("a column is larger than 2 GiB (int32 offsets)")
                header_key_offsets.append(len(header_key_data))
                header_values.append(value)
            header_offsets.append(header_values.rows)
    return RecordColumns(
        offsets.tobytes(),
        timestamps.tobytes(),
        keys.offsets.tobytes(),
        bytes(keys.data),
        bytes(keys.validity),
        values.offsets.tobytes(),
        bytes(values.data),
        bytes(values.validity),
        header_offsets.tobytes(),
        header_key_offsets.tobytes(),
        bytes(header_key_data),
        header_values.offsets.tobytes(),
        bytes(header_values.data),
        bytes(header_values.validity),
        len(offsets),
        header_values.rows,
        keys.nulls,
        values.nulls,
        header_values.nulls,
    )
