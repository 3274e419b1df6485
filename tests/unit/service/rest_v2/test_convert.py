"""REST Proxy v2 JSON <-> records conversion."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.rest_v2.convert import (
    ProduceRecord,
    _struct_body,
    assign_partitions,
    consumer_records,
    dump_json,
    parse_produce_body,
    produce_offsets,
    records_body,
    records_to_json,
)
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.partitioner import StickyPartitioner, partition_for_key
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import (
    BadRequestError,
    CorruptRecordError,
    InternalError,
    InvalidBodyError,
    InvalidRequestError,
    InvalidValueError,
    SchemaRegistryRequiredError,
    TierlogError,
    UnavailableError,
    UnknownPartitionError,
    UnknownTopicError,
    http_status,
)

BINARY = EmbeddedFormat.BINARY
JSON = EmbeddedFormat.JSON


def rendered(data: bytes, **options: Any) -> list[dict[str, Any]]:
    """The records array that :func:`records_body` renders, parsed back; it must agree with
    :func:`records_to_json` and with its own count."""
    count, body = records_body(data, **options)
    records: list[dict[str, Any]] = json.loads(body)
    assert count == len(records)
    assert records == records_to_json(data, **options)
    return records


def body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_binary_body_decodes_base64() -> None:
    records = parse_produce_body(
        body({"records": [{"key": "a2V5", "value": "dmFsdWU=", "partition": 2}, {"value": None}]}), BINARY
    )
    assert records == [ProduceRecord(b"key", b"value", 2), ProduceRecord(None, None, None)]


def test_json_body_stores_compact_serialization() -> None:
    records = parse_produce_body(
        body(
            {"records": [{"key": {"id": 1, "n": "é"}, "value": [1, 2.5, None]}, {"value": "x"}, {"key": 0}]}
        ),
        JSON,
    )
    assert records[0].key == '{"id":1,"n":"é"}'.encode()
    assert records[0].value == b"[1,2.5,null]"
    assert records[1] == ProduceRecord(None, b'"x"', None)
    assert records[2] == ProduceRecord(b"0", None, None)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b'{"records": [{"value": NaN}]}',
        b'{"records": [{"value": "!!notbase64"}]}',
        b'{"records": [{"value": "YWJ"}]}',
        b'{"records": [{"value": 12}]}',
        b'{"records": [{"value": "YQ==", "partition": -1}]}',
        b'{"records": [{"value": "YQ==", "partition": "1"}]}',
        b'{"records": [{"value": "YQ==", "partition": true}]}',
        b"\xff\xfe",
    ],
)
def test_malformed_binary_bodies_are_400(raw: bytes) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_produce_body(raw, BINARY)
    assert info.value.code == 40001
    assert http_status(info.value.code) == 400


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"  ",
        b"[]",
        b"{}",
        b'{"records": []}',
        b'{"records": {}}',
        b'{"nothing": 1}',
        b'{"records": [1]}',
        b'{"records": [{"valur": "YQ=="}]}',
        b'{"records": [{"value": "YQ=="}], "extra": 1}',
    ],
)
def test_misshapen_bodies_are_422(raw: bytes) -> None:
    """Issue 12: the peers answer 422 for a body of the wrong shape (a misspelled field included)."""
    with pytest.raises(InvalidBodyError) as info:
        parse_produce_body(raw, BINARY)
    assert info.value.code == 422
    assert info.value.message.startswith("Invalid request format: ")


def test_a_misshapen_body_names_every_bad_record() -> None:
    raw = body({"records": [{"value": "YQ=="}, {"valur": "YQ=="}, 7, {"key": None, "partitio": 1}]})
    with pytest.raises(InvalidBodyError) as info:
        parse_produce_body(raw, BINARY)
    message = info.value.message
    assert "records[1]" in message and "'valur'" in message
    assert "records[2]" in message and "records[3]" in message and "'partitio'" in message
    assert "records[0]" not in message


def test_schema_formats_check_schemas_like_confluent() -> None:
    fmt = EmbeddedFormat.AVRO
    with pytest.raises(InvalidRequestError) as key_err:
        parse_produce_body(body({"records": [{"key": 1, "value": 2}]}), fmt)
    assert key_err.value.code == 42201
    with pytest.raises(InvalidValueError) as value_err:
        parse_produce_body(body({"key_schema_id": 3, "records": [{"key": 1, "value": 2}]}), fmt)
    assert value_err.value.code == 42202
    with pytest.raises(SchemaRegistryRequiredError) as registry_err:
        parse_produce_body(body({"key_schema_id": 3, "value_schema": "x", "records": [{"value": 2}]}), fmt)
    assert registry_err.value.code == 42206
    assert registry_err.value.message.startswith("Payload error. Schema Registry must be configured")


def test_assign_partitions_explicit_keyed_and_sticky() -> None:
    sticky = StickyPartitioner(random.Random(0))
    records = [
        ProduceRecord(None, b"a", 1),
        ProduceRecord(b"user-1", b"b"),
        ProduceRecord(None, b"c"),
        ProduceRecord(None, b"d"),
    ]
    first = assign_partitions(records, 4, topic="t", sticky=sticky)
    assert first[0] == 1
    assert first[1] == partition_for_key(b"user-1", 4)
    assert first[2] == first[3]
    second = assign_partitions(records, 4, topic="t", sticky=sticky)
    assert second[2] != first[2]
    assert assign_partitions(records, 4, topic="t", sticky=sticky, fixed=3) == [3, 3, 3, 3]


def test_assign_partitions_unknown_partition_is_40402() -> None:
    sticky = StickyPartitioner()
    with pytest.raises(UnknownPartitionError) as info:
        assign_partitions([ProduceRecord(None, b"a", 5)], 2, topic="t", sticky=sticky)
    assert info.value.code == 40402
    with pytest.raises(UnknownPartitionError):
        assign_partitions([ProduceRecord(None, b"a")], 2, topic="t", sticky=sticky, fixed=2)


def _batches() -> bytes:
    first = build_batch([Record(b"k0", b'{"a":1}'), Record(None, b"[2]")], base_offset=10)
    control = build_batch([Record(b"\x00\x00\x00\x00", b"\x00")], base_offset=12, is_control=True)
    last = build_batch([Record(None, b"null"), Record(b'"k"', None)], base_offset=13)
    return first + control + last


def test_records_body_binary_skips_before_start_control_and_past_hw() -> None:
    out = rendered(_batches(), topic="t", partition=0, start_offset=11, high_watermark=14, fmt=BINARY)
    assert out == [
        {"topic": "t", "key": None, "value": base64.b64encode(b"[2]").decode(), "partition": 0, "offset": 11},
        {
            "topic": "t",
            "key": None,
            "value": base64.b64encode(b"null").decode(),
            "partition": 0,
            "offset": 13,
        },
    ]


@pytest.mark.parametrize("render", [records_body, records_to_json])
def test_records_body_json_format_key_not_json_is_42201(render: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        render(_batches(), topic="t", partition=0, start_offset=10, high_watermark=99, fmt=JSON)
    assert type(info.value) is InvalidRequestError
    assert info.value.code == 42201
    assert http_status(info.value.code) == 422
    out = rendered(_batches(), topic="t", partition=0, start_offset=11, high_watermark=99, fmt=JSON)
    assert [(r["key"], r["value"], r["offset"]) for r in out] == [
        (None, [2], 11),
        (None, None, 13),
        ("k", None, 14),
    ]


@pytest.mark.parametrize("render", [records_body, records_to_json])
def test_records_body_value_not_json_is_42202(render: Any) -> None:
    data = build_batch([Record(None, b"plain text")], base_offset=0)
    with pytest.raises(InvalidValueError) as info:
        render(data, topic="t", partition=0, start_offset=0, high_watermark=1, fmt=JSON)
    assert info.value.code == 42202


@pytest.mark.parametrize("render", [records_body, records_to_json])
def test_records_body_rejects_corrupt_batches(render: Any) -> None:
    data = bytearray(build_batch([Record(None, b"v")], base_offset=0))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        render(bytes(data), topic="t", partition=0, start_offset=0, high_watermark=1, fmt=BINARY)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@given(key=json_values, value=json_values)
def test_json_round_trip_through_a_batch(key: Any, value: Any) -> None:
    records = parse_produce_body(dump_json({"records": [{"key": key, "value": value}]}), JSON)
    data = build_batch([Record(r.key, r.value) for r in records], base_offset=5)
    out = rendered(data, topic="t", partition=3, start_offset=0, high_watermark=6, fmt=JSON)
    assert out == [{"topic": "t", "key": key, "value": value, "partition": 3, "offset": 5}]


def encode(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


@given(key=st.none() | st.binary(max_size=40), value=st.none() | st.binary(max_size=200))
def test_binary_round_trip_through_a_batch(key: bytes | None, value: bytes | None) -> None:
    records = parse_produce_body(
        dump_json({"records": [{"key": encode(key), "value": encode(value)}]}), BINARY
    )
    assert records == [ProduceRecord(key, value, None)]
    data = build_batch([Record(r.key, r.value) for r in records], base_offset=0)
    out = rendered(data, topic="t", partition=0, start_offset=0, high_watermark=1, fmt=BINARY)
    assert out[0]["key"] == encode(key) and out[0]["value"] == encode(value)


def test_produce_offsets_in_request_order_with_per_record_errors() -> None:
    outcomes: list[tuple[int, list[int], int | TierlogError]] = [
        (2, [0, 3], 40),
        (0, [1], UnavailableError("disk budget full")),
        (1, [2, 4], UnknownTopicError("Topic t not found.")),
        (3, [5], InternalError("bug")),
    ]
    assert produce_offsets(6, outcomes) == [
        {"partition": 2, "offset": 40, "error_code": None, "error": None},
        {"partition": None, "offset": None, "error_code": 50003, "error": "disk budget full"},
        {"partition": None, "offset": None, "error_code": 50002, "error": "Topic t not found."},
        {"partition": 2, "offset": 41, "error_code": None, "error": None},
        {"partition": None, "offset": None, "error_code": 50002, "error": "Topic t not found."},
        {"partition": None, "offset": None, "error_code": 50002, "error": "bug"},
    ]


def test_records_body_embeds_stored_json_text_and_escapes_the_topic() -> None:
    data = build_batch([Record(b'{"a": 1}', '[ "é" ]'.encode())], base_offset=7)
    count, body = records_body(data, topic='we"ird', partition=1, start_offset=0, high_watermark=8, fmt=JSON)
    assert count == 1
    assert body == '[{"topic":"we\\"ird","key":{"a": 1},"value":[ "é" ],"partition":1,"offset":7}]'.encode()


def test_records_body_rejects_json_that_is_not_utf8() -> None:
    data = build_batch([Record(None, '"x"'.encode("utf-16"))], base_offset=0)
    with pytest.raises(InvalidRequestError) as info:
        records_body(data, topic="t", partition=0, start_offset=0, high_watermark=1, fmt=JSON)
    assert info.value.code == 42202


def _sized() -> bytes:
    values = [(None, b"aa"), (b"k", b"bbb"), (None, None), (b"kk", b"cccc")]  # sizes 2, 4, 0, 6
    return build_batch([Record(k, v, timestamp=1_000 + i) for i, (k, v) in enumerate(values)], base_offset=5)


@pytest.mark.parametrize(
    ("max_bytes", "at_least_one", "offsets", "used"),
    [
        (100, True, [5, 6, 7, 8], 12),
        (6, True, [5, 6, 7], 6),
        (5, True, [5], 2),
        (1, True, [5], 2),
        (1, False, [], 0),
        (2, False, [5], 2),
    ],
)
def test_consumer_records_count_keys_and_values_per_record(
    max_bytes: int, at_least_one: bool, offsets: list[int], used: int
) -> None:
    records, counted = consumer_records(
        _sized(),
        topic="t",
        partition=2,
        start_offset=5,
        high_watermark=9,
        fmt=BINARY,
        max_bytes=max_bytes,
        at_least_one=at_least_one,
    )
    assert [r["offset"] for r in records] == offsets
    assert counted == used
    for r in records:
        assert set(r) == {"topic", "key", "value", "partition", "offset", "timestamp"}
        assert r["timestamp"] == 1_000 + r["offset"] - 5


def test_record_count_is_refused_before_any_record_is_converted() -> None:
    raw = body({"records": [{"value": "aGk="}, {"value": "aGk="}, {"value": "not base64!"}]})
    with pytest.raises(BadRequestError):
        parse_produce_body(raw, BINARY, max_records=3)
    with pytest.raises(InvalidBodyError) as info:
        parse_produce_body(raw, BINARY, max_records=2)  # the bad base64 is never reached
    assert http_status(info.value.code) == 422
    assert "3 records, more than rest.produce.max.records=2" in info.value.message


try:
    from tierlog.service.rest_v2 import _restjson
except ImportError:  # pragma: no cover - no compiler at install
    _restjson = None  # type: ignore[assignment]
_NATIVE = _restjson if _accel.available is not None else None
_NOT_BUILT = "the compiled extensions are not built (no C compiler at install, or TIERLOG_PURE_CODEC)"


@pytest.mark.skipif(_NATIVE is None, reason=_NOT_BUILT)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(st.none() | st.binary(max_size=7), st.none() | st.binary(max_size=40)),
            min_size=1,
            max_size=9,
        ),
        min_size=1,
        max_size=4,
    ),
    control=st.integers(min_value=-1, max_value=3),
    start=st.integers(min_value=0, max_value=40),
    stop=st.integers(min_value=0, max_value=45),
    topic=st.text(max_size=6),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_the_compiled_binary_renderer_writes_msgspecs_text(
    batches: list[list[tuple[bytes | None, bytes | None]]],
    control: int,
    start: int,
    stop: int,
    topic: str,
    partition: int,
) -> None:
    """render_binary_rows (the compiled core) against the msgspec renderer: the same text, byte for byte,
    over data and control batches, any start offset and high watermark, null and empty keys and values."""
    data, base = b"", 3
    for n, rows in enumerate(batches):
        if n == control:
            data += build_batch([Record(b"\x00\x00\x00\x00", b"\x00")], base_offset=base, is_control=True)
            base += 1
        data += build_batch([Record(k, v, (), 1000 + i) for i, (k, v) in enumerate(rows)], base_offset=base)
        base += len(rows)
    with _accel.use("compiled"):
        ours = records_body(
            data, topic=topic, partition=partition, start_offset=start, high_watermark=stop, fmt=BINARY
        )
        theirs = _struct_body(data, topic, partition, start, stop, BINARY)
    assert ours == theirs
    assert json.loads(ours[1]) == records_to_json(
        data, topic=topic, partition=partition, start_offset=start, high_watermark=stop, fmt=BINARY
    )


def test_the_compiled_binary_renderer_appends_rows_and_refuses_columns_that_do_not_cover_them() -> None:
    if _NATIVE is None:
        pytest.skip(_NOT_BUILT)
    offsets = (5).to_bytes(8, "little") + (6).to_bytes(8, "little")
    ends = (0).to_bytes(4, "little") * 3
    valid = b"\x03"
    assert _restjson is not None
    render = _restjson.render_binary_rows
    out = bytearray(b"[")
    assert render(offsets, ends, b"", valid, ends, b"", valid, 0, 2, 0, 99, b'"t"', 1, out) == (0, 2)
    row = '{"topic":"t","key":"","value":"","partition":1,"offset":%d}'
    assert out == ("[" + row % 5 + "," + row % 6).encode()
    with pytest.raises(ValueError, match="do not cover"):
        render(offsets, ends, b"", valid, ends, b"", valid, 0, 3, 0, 99, b'"t"', 1, bytearray())
    beyond = (0).to_bytes(4, "little") + (9).to_bytes(4, "little") * 2  # value 0 ends past its data
    with pytest.raises(ValueError, match="outside its column"):
        render(offsets, ends, b"", valid, beyond, b"abc", valid, 0, 2, 0, 99, b'"t"', 1, bytearray())
    with pytest.raises(TypeError, match="bytearray"):
        render(offsets, ends, b"", valid, ends, b"", valid, 0, 2, 0, 99, b'"t"', 1, b"")  # type: ignore[arg-type]


def test_the_compiled_binary_renderer_writes_large_runs_without_the_gil_alike() -> None:
    if _NATIVE is None:
        pytest.skip(_NOT_BUILT)
    rng = random.Random(7)
    data = build_batch([Record(None, rng.randbytes(1024), (), 1000 + i) for i in range(200)], base_offset=0)
    with _accel.use("compiled"):
        ours = records_body(data, topic="t", partition=2, start_offset=3, high_watermark=190, fmt=BINARY)
        theirs = _struct_body(data, "t", 2, 3, 190, BINARY)
    assert len(ours[1]) > 65536  # past the size that releases the GIL
    assert ours == theirs and ours[0] == 187


@pytest.mark.parametrize("simd", [True, False])
def test_the_compiled_renderer_writes_base64_alike_with_and_without_vector_instructions(simd: bool) -> None:
    """Values of every length from 0 to 120 bytes and every byte value, with the vector encoder (where the
    CPU has it) and without: the text base64.b64encode and msgspec write."""
    if _NATIVE is None:
        pytest.skip(_NOT_BUILT)
    assert _restjson is not None
    rng = random.Random(3)
    values = [rng.randbytes(n) for n in range(121)] + [bytes(range(256)) * 3, b"\xff" * 64, b"\x00" * 64]
    data = build_batch([Record(None, v, (), 1000) for v in values], base_offset=0)
    was = _restjson.use_simd(simd)
    try:
        with _accel.use("compiled"):
            ours = records_body(data, topic="t", partition=0, start_offset=0, high_watermark=999, fmt=BINARY)
            theirs = _struct_body(data, "t", 0, 0, 999, BINARY)
    finally:
        _restjson.use_simd(was)
    assert ours == theirs
    assert [r["value"] for r in json.loads(ours[1])] == [base64.b64encode(v).decode() for v in values]
