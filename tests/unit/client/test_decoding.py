"""How the consumer turns fetched batches into records, and how the CLI renders them."""

from __future__ import annotations

import base64
import gc
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.client.cli.data import FIELDS, line_renderer, parse_format, render, render_plain
from tierlog.client.fetcher import decode_records
from tierlog.client.types import LOG_APPEND_TIME, ConsumerRecord, TopicPartition
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import CRC_OFFSET
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

TP = TopicPartition("t", 2)


def batch(base: int, count: int, **kwargs: object) -> bytes:
    records = [Record(b"k%d" % i, b"v%d" % i, (("h", b"x"),), 1000 + i) for i in range(count)]
    return build_batch(records, base_offset=base, **kwargs)  # type: ignore[arg-type]


def test_records_below_the_fetch_offset_are_skipped() -> None:
    data = batch(10, 5) + batch(15, 5, compression=Compression.LZ4)
    records, next_offset = decode_records(TP, data, 12, verify=True)
    assert [r.offset for r in records] == list(range(12, 20))
    assert next_offset == 20
    assert all(type(r) is ConsumerRecord for r in records)
    if _accel.native is not None:  # the compiled codec builds them off the garbage collector's watch
        assert not any(gc.is_tracked(r) for r in records)
    first = records[0]
    assert (first.topic, first.partition, first.key, first.value, first.headers) == (
        "t",
        2,
        b"k2",
        b"v2",
        (("h", b"x"),),
    )
    assert first.timestamp == 1002 and first.timestamp_type == 0


def test_control_batches_advance_the_offset_without_records() -> None:
    data = batch(0, 2) + batch(2, 1, is_control=True) + batch(3, 1, log_append_time=True, now_ms=5)
    records, next_offset = decode_records(TP, data, 0, verify=True)
    assert [r.offset for r in records] == [0, 1, 3]
    assert (records[-1].timestamp, records[-1].timestamp_type) == (5, LOG_APPEND_TIME)
    assert next_offset == 4


def test_an_empty_answer_keeps_the_offset() -> None:
    assert decode_records(TP, b"", 7, verify=True) == ([], 7)


def test_a_bad_crc_is_refused_when_verifying() -> None:
    data = bytearray(batch(0, 3))
    data[CRC_OFFSET] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_records(TP, bytes(data), 0, verify=True)
    assert len(decode_records(TP, bytes(data), 0, verify=False)[0]) == 3


@given(
    values=st.lists(st.binary(max_size=40) | st.none(), min_size=1, max_size=30),
    skip=st.integers(min_value=0, max_value=40),
    codec=st.sampled_from(list(Compression)),
)
def test_decoding_returns_exactly_the_records_from_the_offset(
    values: list[bytes | None], skip: int, codec: Compression
) -> None:
    data = build_batch([Record(None, v) for v in values], base_offset=100, compression=codec, now_ms=1)
    records, next_offset = decode_records(TP, data, 100 + skip, verify=True)
    assert [r.value for r in records] == values[skip:]
    assert [r.offset for r in records] == list(range(100 + skip, 100 + len(values)))
    assert next_offset == max(100 + skip, 100 + len(values))


def test_render_picks_fields_in_order_and_encodes_bytes() -> None:
    record = ConsumerRecord("t", 1, 5, 99, 0, b"\xff", "é".encode(), (("h", b"v"), ("n", None)))
    text = render(record, ["offset", "key", "value", "headers"], "text")
    assert json.loads(text) == {
        "offset": 5,
        "key": "\ufffd",
        "value": "é",
        "headers": [["h", "v"], ["n", None]],
    }
    assert list(json.loads(text)) == ["offset", "key", "value", "headers"]
    encoded = json.loads(render(record, ["key"], "base64"))
    assert base64.b64decode(encoded["key"]) == b"\xff"


def test_one_field_renders_as_plain_text_and_several_as_json() -> None:
    record = ConsumerRecord("t", 1, 5, 99, 0, None, "é".encode(), (("h", b"v"),))
    assert render_plain(record, "value", "text") == "é"
    assert render_plain(record, "key", "text") == "null"
    assert render_plain(record, "offset", "text") == "5"
    assert render_plain(record, "topic", "text") == "t"
    assert json.loads(render_plain(record, "headers", "text")) == [["h", "v"]]
    assert base64.b64decode(render_plain(record, "value", "base64")) == "é".encode()
    assert line_renderer(["value"], "text")(record) == "é"
    assert json.loads(line_renderer(["offset", "value"], "text")(record)) == {"offset": 5, "value": "é"}


def test_format_fields_are_checked() -> None:
    assert parse_format("json") == list(FIELDS)
    assert parse_format("value, key") == ["value", "key"]
    with pytest.raises(InvalidRequestError, match="colour"):
        parse_format("value,colour")


def test_the_pure_python_loop_builds_the_same_records(monkeypatch: pytest.MonkeyPatch) -> None:
    data = batch(10, 5) + batch(15, 5, compression=Compression.LZ4)
    compiled = decode_records(TP, data, 12, verify=True)
    monkeypatch.setattr(_accel, "native", None)
    assert decode_records(TP, data, 12, verify=True) == compiled
