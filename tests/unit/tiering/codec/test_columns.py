"""decode_columns: the compiled and the pure version give the same buffers, and pyarrow reads them back.

Compared with :func:`decode_batch` (the record-object decoder) on random batches of every codec, with
LogAppendTime and null keys, values and header values.
"""

from __future__ import annotations

import struct
from typing import cast

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import (
    Compression,
    Record,
    RecordColumns,
    _accel,
    build_batch,
    decode_batch,
    decode_columns,
    iter_records,
)
from tierlog.tiering.codec.header import HEADER_SIZE
from tierlog.wire.errors import CorruptRecordError

COMPARES_IMPLEMENTATIONS = True
NOW = 1_750_000_000_000

maybe_bytes = st.none() | st.binary(max_size=20)
headers = st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=6)), max_size=3).map(tuple)
records = st.builds(
    Record, key=maybe_bytes, value=maybe_bytes, headers=headers, timestamp=st.integers(-1, 2**42)
)
batches = st.lists(
    st.tuples(st.lists(records, min_size=1, max_size=10), st.sampled_from(Compression), st.booleans()),
    max_size=4,
)


def encode(spec: list[tuple[list[Record], Compression, bool]]) -> bytes:
    out, offset = b"", 0
    for batch, codec, append_time in spec:
        out += build_batch(
            batch, base_offset=offset, compression=codec, now_ms=NOW, log_append_time=append_time
        )
        offset += len(batch) + 3
    return out


def columns(buf: bytes, implementation: str) -> RecordColumns:
    with _accel.use(implementation):
        return decode_columns(buf)


def to_arrow(c: RecordColumns) -> pa.Table:
    """The documented way to turn the buffers into Arrow arrays (what the Spark source will do)."""

    def binary(
        kind: pa.DataType, n: int, validity: bytes, nulls: int, offsets: bytes, data: bytes
    ) -> pa.Array:
        buffers = [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)

    entries = pa.StructArray.from_arrays(
        [
            binary(pa.string(), c.header_count, b"", 0, c.header_key_offsets, c.header_key_data),
            binary(pa.binary(), c.header_count, c.header_value_validity, c.header_value_nulls,
                   c.header_value_offsets, c.header_value_data),
        ],
        names=["key", "value"],
    )  # fmt: skip
    header_type = pa.list_(entries.type)
    return pa.table(
        {
            "offset": pa.Array.from_buffers(pa.int64(), c.count, [None, pa.py_buffer(c.offsets)]),
            "timestamp": pa.Array.from_buffers(pa.int64(), c.count, [None, pa.py_buffer(c.timestamps)]),
            "key": binary(pa.binary(), c.count, c.key_validity, c.key_nulls, c.key_offsets, c.key_data),
            "value": binary(
                pa.binary(), c.count, c.value_validity, c.value_nulls, c.value_offsets, c.value_data
            ),
            "headers": pa.Array.from_buffers(
                header_type, c.count, [None, pa.py_buffer(c.header_offsets)], children=[entries]
            ),
        }
    )


@settings(max_examples=200, deadline=None)
@given(spec=batches)
def test_both_give_the_same_buffers_and_arrow_reads_the_records(
    spec: list[tuple[list[Record], Compression, bool]],
) -> None:
    buf = encode(spec)
    pure, compiled = columns(buf, "pure"), columns(buf, "compiled")
    assert pure == compiled
    table = to_arrow(compiled)
    table.validate(full=True)
    expected = [record for _, record in iter_records(buf)]
    assert table.to_pylist() == [
        {
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": r.key,
            "value": r.value,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in expected
    ]


def test_layout_of_a_small_batch() -> None:
    buf = build_batch([Record(b"ab", None, (("h", b"x"), ("i", None))), Record(None, b"v")], now_ms=NOW)
    for implementation in ("pure", "compiled"):
        c = columns(buf, implementation)
        assert struct.unpack("<2q", c.offsets) == (0, 1)
        assert struct.unpack("<3i", c.key_offsets) == (0, 2, 2) and c.key_data == b"ab"
        assert c.key_validity == b"\x01" and c.value_validity == b"\x02"
        assert struct.unpack("<3i", c.header_offsets) == (0, 2, 2)
        assert c.header_key_data == b"hi" and c.header_value_validity == b"\x01"
        assert (c.count, c.header_count, c.key_nulls, c.value_nulls, c.header_value_nulls) == (2, 2, 1, 1, 1)


def test_empty_buffer_gives_empty_columns() -> None:
    assert columns(b"", "pure") == columns(b"", "compiled")
    assert columns(b"", "compiled").count == 0


@pytest.mark.parametrize("cut", [1, HEADER_SIZE - 1, HEADER_SIZE + 3])
def test_both_refuse_a_truncated_or_corrupt_buffer(cut: int) -> None:
    buf = build_batch([Record(b"k", b"value")] * 3, now_ms=NOW)
    broken = bytearray(buf)
    broken[-2] ^= 0xFF
    for implementation in ("pure", "compiled"):
        with pytest.raises(CorruptRecordError):
            columns(buf[:-cut], implementation)
        with pytest.raises(CorruptRecordError):
            columns(bytes(broken), implementation)
    # without the CRC check the records themselves are checked
    unsealed = bytearray(buf)
    unsealed[HEADER_SIZE] = 0x7F
    for implementation in ("pure", "compiled"):
        with _accel.use(implementation), pytest.raises(CorruptRecordError):
            decode_columns(bytes(unsealed), verify=False)
    assert decode_batch(buf).records[0].key == b"k"


@pytest.mark.skipif(_accel.native is None, reason="the compiled core is not built here")
def test_sections_changed_during_the_call_are_refused_or_ignored_never_overrun() -> None:
    """The compiled walk writes the values into an answer sized before it starts; a section that Python
    code (here an append time's ``__index__``) lengthens meanwhile is refused, never written past, and a
    list of sections emptied meanwhile is not read from."""
    assert _accel.native is not None
    buf = build_batch([Record(None, b"v" * 100)] * 4, now_ms=NOW)
    section = bytearray(buf[HEADER_SIZE:])

    class Grows:
        def __index__(self) -> int:
            section.extend(b"\0" * 4096)
            return NOW

    with pytest.raises(ValueError, match="changed size"):
        # an int to the walk (it takes the append time through __index__), not to the type checker
        _accel.native.decode_columns([(section, 4, 0, NOW, cast(int, Grows()))])
    # measured as they are, the same sections decode
    done = _accel.native.decode_columns([(bytes(buf[HEADER_SIZE:]), 4, 0, NOW, None)])
    assert done[6] == b"v" * 400

    # the walk works on its own snapshot of the sections: emptying the caller's list changes nothing
    sections: list[tuple[bytes, int, int, int, int | None]] = []

    class Clears:
        def __index__(self) -> int:
            sections.clear()
            return NOW

    sections += [(bytes(buf[HEADER_SIZE:]), 4, 0, NOW, cast(int, Clears()))]
    sections += [(bytes(buf[HEADER_SIZE:]), 4, 4, NOW, None)]
    both = _accel.native.decode_columns(sections)
    assert (both[6], both[-5]) == (b"v" * 800, 8)
