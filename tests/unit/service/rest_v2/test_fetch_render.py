"""The records array of a fetch (``records_body``, rendered from columns) against a reference model: the
renderer as it was, one decoded Record at a time (``iter_records``) and a string per record.

For any batches (control batches, compressed ones, null keys and values, any ``[start_offset,
high_watermark)``), both codec implementations, and both embedded formats, the text must be the same bytes,
and the same error kind where the reference raises.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.rest_v2 import convert
from tierlog.service.rest_v2.convert import records_body
from tierlog.service.web.json_stream import load_json
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError, InvalidValueError, TierlogError

IMPLEMENTATIONS = ["pure"] + (["compiled"] if _accel.available is not None else [])


def _embed(data: bytes | None, fmt: EmbeddedFormat, what: str, offset: int) -> str:
    if data is None:
        return "null"
    if fmt is EmbeddedFormat.BINARY:
        return '"' + base64.b64encode(data).decode() + '"'
    try:
        text = data.decode("utf-8")
        json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except ValueError:
        raise (InvalidRequestError if what == "key" else InvalidValueError)(f"{what} at {offset}") from None
    return text


def reference(data: bytes, *, topic: str, partition: int, start: int, hw: int, fmt: EmbeddedFormat) -> bytes:
    parts = []
    for header, record in iter_records(data):
        if header.is_control or record.offset < start:
            continue
        if record.offset >= hw:
            break
        key = _embed(record.key, fmt, "key", record.offset)
        value = _embed(record.value, fmt, "value", record.offset)
        parts.append(
            f'{{"topic":{json.dumps(topic)},"key":{key},"value":{value},'
            f'"partition":{partition},"offset":{record.offset}}}'
        )
    return ("[" + ",".join(parts) + "]").encode()


def outcome(fn: object, data: bytes, **options: object) -> object:
    try:
        return fn(data, **options)  # type: ignore[operator]
    except TierlogError as err:
        return (type(err), err.code)


fields = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.sampled_from([b"1", b'{"a": [1, 2.5]}', b'"\xc3\xa9"', b"NaN", b"\xff", b"null", b"[1,"]),
)
batches = st.lists(
    st.tuples(
        st.lists(st.tuples(fields, fields), min_size=0, max_size=6),
        st.booleans(),
        st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]),
    ),
    max_size=5,
)


def _log(spec: list[tuple[list[tuple[bytes | None, bytes | None]], bool, Compression]]) -> Iterator[bytes]:
    offset = 0
    for rows, control, codec in spec:
        if not rows:
            continue
        records = [Record(key, value) for key, value in rows]
        yield build_batch(records, base_offset=offset, compression=codec, is_control=control, now_ms=7)
        offset += len(rows)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=300, deadline=None)
@given(
    batches,
    st.integers(0, 25),
    st.integers(0, 30),
    st.sampled_from([EmbeddedFormat.BINARY, EmbeddedFormat.JSON]),
    st.sampled_from(["t", 'quo"te é']),
    st.sampled_from([1, 200, 1 << 20]),
)
def test_the_rendered_array_is_the_record_by_record_text(
    implementation: str,
    spec: list[tuple[list[tuple[bytes | None, bytes | None]], bool, Compression]],
    start: int,
    hw: int,
    fmt: EmbeddedFormat,
    topic: str,
    group_bytes: int,
) -> None:
    """Whatever the groups of batches decoded per call (one batch each, a few, all)."""
    data = b"".join(_log(spec))
    with _accel.use(implementation), mock.patch.object(convert, "_DECODE_GROUP_BYTES", group_bytes):
        got = outcome(
            records_body, data, topic=topic, partition=3, start_offset=start, high_watermark=hw, fmt=fmt
        )
    expected = outcome(reference, data, topic=topic, partition=3, start=start, hw=hw, fmt=fmt)
    if isinstance(expected, bytes):
        assert isinstance(got, tuple) and got[1] == expected
        assert got[0] == len(json.loads(expected))
    else:
        assert got == expected


def test_keyless_binary_records_render_as_the_reference() -> None:
    """The keyless, all-values case has a branch-free loop of its own."""
    records = [Record(None, bytes([i]) * (i % 7)) for i in range(40)]
    data = build_batch(records[:20], now_ms=1) + build_batch(records[20:], base_offset=20, now_ms=1)
    options = {"topic": "t", "partition": 0, "fmt": EmbeddedFormat.BINARY}
    count, text = records_body(data, start_offset=5, high_watermark=33, **options)  # type: ignore[arg-type]
    assert count == 28
    assert text == reference(data, start=5, hw=33, **options)  # type: ignore[arg-type]
    assert binascii.a2b_base64(json.loads(text)[0]["value"]) == records[5].value


def test_a_corrupt_batch_before_the_high_watermark_fails_the_fetch() -> None:
    data = bytearray(
        build_batch([Record(None, b"abc")], now_ms=1) + build_batch([Record(None, b"d")], base_offset=1)
    )
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        records_body(
            bytes(data), topic="t", partition=0, start_offset=0, high_watermark=2, fmt=EmbeddedFormat.BINARY
        )


def test_batches_past_the_one_that_reaches_the_high_watermark_are_not_decoded() -> None:
    """As the record-by-record walk stopped there: a corrupt batch after it is never read."""
    first = build_batch([Record(None, b"a"), Record(None, b"b")], now_ms=1)
    corrupt = bytearray(build_batch([Record(None, b"c")], base_offset=2, now_ms=1))
    corrupt[-1] ^= 0xFF
    count, text = records_body(
        first + bytes(corrupt),
        topic="t",
        partition=0,
        start_offset=0,
        high_watermark=1,
        fmt=EmbeddedFormat.BINARY,
    )
    assert count == 1
    assert json.loads(text)[0]["offset"] == 0


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5e3]}', "\ufeff1", "NaN", "-Infinity", "[1,", "1 2", '"\\ud800"', "  null ", ""],
)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_load_json_answers_as_json_loads(text: str, as_bytes: bool) -> None:
    """The shared decoder answers every text as ``json.loads(..., parse_constant=...)`` does."""
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text

    def rejecting(name: str) -> object:
        raise ValueError(f"{name} is not valid JSON")

    def answer(load: Callable[[str | bytes], object]) -> object:
        try:
            return ("ok", load(data))
        except ValueError as err:
            return (type(err), str(err))

    assert answer(load_json) == answer(lambda d: json.loads(d, parse_constant=rejecting))


def _corrupt(how: str) -> bytes:
    good = build_batch([Record(None, b"abc"), Record(b"k", None)], now_ms=1)
    second = bytearray(build_batch([Record(None, b"d")], base_offset=2, now_ms=1))
    if how == "header cut":
        return good + bytes(second[:30])
    if how == "batch cut":
        return good + bytes(second[:-1])
    if how == "bad magic":
        second[16] = 1
    elif how == "length too small":
        second[8:12] = (10).to_bytes(4, "big")
    elif how == "crc":
        second[-1] ^= 1
    return good + bytes(second)


@pytest.mark.parametrize("how", ["header cut", "batch cut", "bad magic", "length too small", "crc"])
def test_a_corrupt_batch_fails_as_the_record_walk_fails(how: str) -> None:
    data = _corrupt(how)
    options = {"topic": "t", "partition": 0, "fmt": EmbeddedFormat.BINARY}
    expected = outcome(reference, data, start=0, hw=10, **options)
    assert expected == (CorruptRecordError, CorruptRecordError.code)
    assert outcome(records_body, data, start_offset=0, high_watermark=10, **options) == expected
    # past the high watermark the record walk stopped before the second batch: so does the render
    count, _ = records_body(data, start_offset=0, high_watermark=1, **options)  # type: ignore[arg-type]
    assert count == 1
