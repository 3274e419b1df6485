"""The streaming produce-body parser against a reference model: ``json.loads`` of the whole body, then the
checks as the broker made them before the parser walked records one at a time (issue 11).

Every body, valid or not, must get the same records or the same error (kind, code and message), except
that too many records are refused before the rest of the body is read.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.rest_v2.convert import (
    CONVERSION_BYTES_PER_RECORD,
    ProduceRecord,
    conversion_estimate,
    dump_json,
    parse_produce_body,
    parse_produce_rows,
    produce_answer,
    produce_offsets,
)
from tierlog.service.rest_v2.produce_body import (
    FAST_PATH_MAX_BYTES,
    _binary_field,
    _fast_binary_rows,
    _json_field,
    _partition_field,
    _record_problem,
    count_bytes,
)
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.wire.errors import (
    BadRequestError,
    InsufficientStorageError,
    InternalError,
    InvalidBodyError,
    InvalidRequestError,
    InvalidValueError,
    RecordTooLargeError,
    SchemaRegistryRequiredError,
    TierlogError,
    UnavailableError,
)

_BODY_FIELDS = frozenset(("records", "key_schema", "key_schema_id", "value_schema", "value_schema_id"))
_RECORD_FIELDS = frozenset(("key", "value", "partition"))


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _invalid(problems: list[str]) -> InvalidBodyError:
    shown = problems[:10]
    more = len(problems) - len(shown)
    return InvalidBodyError(
        "Invalid request format: " + "; ".join(shown) + (f"; and {more} more" if more else "")
    )


def reference(body: bytes, fmt: EmbeddedFormat) -> list[ProduceRecord]:
    """The parser as it was: the whole body through json.loads, then the checks."""
    if not body.strip():
        raise _invalid(['the request body is empty; send {"records": [...]}'])
    try:
        parsed = json.loads(body, parse_constant=_reject)
    except ValueError as err:
        raise BadRequestError(f"request body is not valid JSON: {err}") from None
    if not isinstance(parsed, dict):
        raise _invalid(["the request body must be a JSON object with a 'records' array"])
    unknown = parsed.keys() - _BODY_FIELDS
    if unknown:
        raise _invalid(
            [f"unknown field(s) {', '.join(sorted(repr(n) for n in unknown))} in the request body"]
        )
    records = parsed.get("records")
    if not isinstance(records, list) or not records:
        raise _invalid(["'records' must be a non-empty array"])
    problems = [p for p in (_record_problem(i, r) for i, r in enumerate(records)) if p is not None]
    if fmt.needs_schema:
        if problems:
            raise _invalid(problems)
        has_key = parsed.get("key_schema") is not None or parsed.get("key_schema_id") is not None
        has_value = parsed.get("value_schema") is not None or parsed.get("value_schema_id") is not None
        if not has_key and any(r.get("key") is not None for r in records):
            raise InvalidRequestError("Request includes keys but does not include key schema")
        if not has_value and any(r.get("value") is not None for r in records):
            raise InvalidValueError("Request includes values but does not include value schema")
        raise SchemaRegistryRequiredError("registry")
    out = []
    for index, record in enumerate(records):
        if _record_problem(index, record) is not None:
            raise _invalid(problems)
        if fmt is EmbeddedFormat.BINARY:
            key, value = _binary_field(record, "key", index), _binary_field(record, "value", index)
        else:
            key, value = _json_field(record, "key"), _json_field(record, "value")
        out.append(ProduceRecord(key, value, _partition_field(record, index)))
    return out


def outcome(fn: Any, body: bytes, fmt: EmbeddedFormat) -> object:
    try:
        return fn(body, fmt)
    except SchemaRegistryRequiredError as err:
        return (type(err), err.code)  # the message names the format; the reference's is a stub
    except TierlogError as err:
        return (type(err), err.code, err.message)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.sampled_from(["YQ==", "aGk=", "not base64!", "", "é"])
)


def records_of(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Elements of a ``records`` array: objects with the record's fields and a misspelled one, and
    elements that are not objects."""
    return st.one_of(
        st.dictionaries(st.sampled_from(["key", "value", "partition", "valur"]), scalars, max_size=3),
        scalars,
        st.lists(scalars, max_size=2),
    )


records = records_of(scalars)
bodies = st.dictionaries(
    st.sampled_from(["records", "key_schema", "value_schema_id", "extra"]),
    st.one_of(st.lists(records, max_size=14), scalars),
    max_size=3,
)
texts = st.builds(
    lambda value, indent: json.dumps(value, indent=indent, ensure_ascii=False),
    st.one_of(bodies, st.lists(records, max_size=3), scalars),
    st.sampled_from([None, 1]),
)


@settings(max_examples=400, deadline=None)
@given(
    texts,
    st.integers(0, 400),
    st.sampled_from(["", "x", ",", "]", "}", "{", '"', " ", "NaN", "\ufeff", ":"]),
    st.booleans(),
    st.sampled_from(list(EmbeddedFormat)),
    st.sampled_from(["utf-8", "utf-16"]),
)
def test_the_streaming_parser_answers_as_the_whole_body_parser(
    text: str, at: int, insert: str, cut: bool, fmt: EmbeddedFormat, encoding: str
) -> None:
    if insert or cut:
        at = min(at, len(text))
        text = text[:at] + insert + ("" if cut else text[at:])
    body = text.encode(encoding, "surrogatepass")
    assert outcome(parse_produce_body, body, fmt) == outcome(reference, body, fmt)


def test_too_many_records_are_refused_without_reading_the_rest() -> None:
    body = b'{"records":[' + b'{"value":null},' * 20 + b"garbage"
    with pytest.raises(InvalidBodyError) as info:
        parse_produce_body(body, EmbeddedFormat.JSON, max_records=10)
    assert (
        info.value.message
        == "Invalid request format: at least 11 records, more than rest.produce.max.records=10"
    )


def test_deep_nesting_is_a_bad_request_not_a_crash() -> None:
    body = b'{"records":[{"value":' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"
    with pytest.raises(BadRequestError):
        parse_produce_body(body, EmbeddedFormat.JSON)


@pytest.mark.parametrize(
    ("one", "fmt"),
    [
        (b'{"value":null}', EmbeddedFormat.JSON),
        (b'{"key":"a2V5","value":"dmFsdWU="}', EmbeddedFormat.BINARY),
        (b'{"value":{"a":[1,2,3]},"partition":0}', EmbeddedFormat.JSON),
        # 1 KiB values, parsed whole (the binary fast path) and walked (a leading space declines it)
        (b'{"key":null,"value":"' + b"QUJD" * 341 + b'YQ=="}', EmbeddedFormat.BINARY),
        (b' {"key":null,"value":"' + b"QUJD" * 341 + b'YQ=="}', EmbeddedFormat.BINARY),
    ],
)
def test_conversion_memory_stays_within_the_estimate(one: bytes, fmt: EmbeddedFormat) -> None:
    """The records a parse keeps, with their partitions and answer lines, fit the per-record estimate."""
    count = 50_000 if len(one) < 100 else 5_000
    body = b'{"records":[' + b",".join([one] * count) + b"]}"
    if one.startswith(b" "):
        body = b" " + body
    tracemalloc.start()
    try:
        records = parse_produce_rows(body, fmt)
        partitions = [0] * len(records)
        answer = [b'{"partition":0,"offset":%d,"error_code":null,"error":null}' % i for i in range(count)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(records) == len(partitions) == len(answer) == count
    assert peak <= conversion_estimate(body, None)
    assert peak - 2 * len(body) <= count * CONVERSION_BYTES_PER_RECORD


@pytest.mark.parametrize("implementation", ["pure", "compiled"] if _accel.available is not None else ["pure"])
def test_the_fast_path_holds_no_more_than_the_estimate_body_included(implementation: str) -> None:
    """The whole-body decode of 1 KiB records (the body, its structs and texts, the decoded columns)."""
    one = b'{"key":null,"value":"' + b"QUJD" * 341 + b'YQ=="}'
    count = FAST_PATH_MAX_BYTES // (len(one) + 1) - 1
    body = b'{"records":[' + b",".join([one] * count) + b"]}"
    with _accel.use(implementation):
        tracemalloc.start()
        try:
            records = _fast_binary_rows(body, None)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert records is not None and len(records) == count  # the fast path answered
    assert len(body) + peak <= conversion_estimate(body, None)


@pytest.mark.parametrize(
    ("partitions", "outcomes"),
    [
        ([0, 1, 0, 2, 1, 0], {0: 10, 1: 0, 2: 7}),
        ([1, 0, 1], {0: 5, 1: UnavailableError("leader gone")}),
        ([0, 0], {0: InsufficientStorageError('disk full while appending: "t-0" (ENOSPC)')}),
        ([2, 3], {2: InternalError("bug é"), 3: RecordTooLargeError("too large")}),
    ],
)
def test_the_answer_text_is_the_offsets_dump(
    partitions: list[int], outcomes: dict[int, int | TierlogError]
) -> None:
    grouped = [(p, [i for i, q in enumerate(partitions) if q == p], o) for p, o in outcomes.items()]
    offsets = produce_offsets(len(partitions), grouped)
    expected = dump_json({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})
    assert _answers(partitions, outcomes) == [expected] * len(_IMPLEMENTATIONS)


def _answers(partitions: list[int], outcomes: dict[int, int | TierlogError]) -> list[bytes]:
    """produce_answer's text as the pure fallback and as the compiled core writes it (when loaded)."""
    answers = []
    for implementation in _IMPLEMENTATIONS:
        with _accel.use(implementation):
            answers.append(bytes(produce_answer(partitions, outcomes)))
    return answers


_IMPLEMENTATIONS = ("pure", "compiled") if _accel.available is not None else ("pure",)


def test_the_answer_holds_offsets_of_any_width() -> None:
    """Offsets and partitions of every decimal width the compiled core sizes, around each power of ten."""
    edges = sorted({0, 1, 2**63 - 2} | {10**k + d for k in range(1, 19) for d in (-1, 0)})
    for partition in (0, 9, 10, 2**31 - 1):
        for first in edges:
            count = min(3, 2**63 - 1 - first)
            offsets = [{"partition": partition, "offset": first + i, "error_code": None, "error": None}
                       for i in range(count)]  # fmt: skip
            expected = dump_json({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})
            assert _answers([partition] * count, {partition: first}) == [expected] * len(_IMPLEMENTATIONS)


@pytest.mark.skipif(_accel.available is None, reason="the compiled extensions did not build here")
def test_the_compiled_lines_refuse_bad_arguments_and_change_nothing() -> None:
    from tierlog.service.rest_v2 import _restjson

    out = bytearray(b"[")
    with pytest.raises(ValueError, match="at least low"):
        _restjson.append_offsets(out, 0, 5, 4)
    with pytest.raises(ValueError, match="fit"):
        _restjson.append_offsets(out, 0, 0, 2**62)
    with pytest.raises(ValueError, match="at least 0"):
        _restjson.append_offsets(out, 0, -2, 2**63 - 1)  # high - low would overflow
    with pytest.raises(TypeError, match="bytearray"):
        _restjson.append_offsets(bytes(out), 0, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        _restjson.append_offsets(out, 0, 0, 2**64)
    assert out == b"["
    _restjson.append_offsets(out, 3, 7, 7)
    assert out == b"["


def test_a_full_disk_is_50701_per_record() -> None:
    offsets = produce_offsets(2, [(0, [0, 1], InsufficientStorageError("disk full"))])
    assert [o["error_code"] for o in offsets] == [50701, 50701]
    retriable = produce_offsets(1, [(0, [0], UnavailableError("slow"))])
    assert retriable[0]["error_code"] == 50003


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
    st.dictionaries(
        st.integers(0, 3),
        st.one_of(st.integers(0, 2**40), st.sampled_from([UnavailableError("gone"), InternalError("bug é")])),
        min_size=4,
        max_size=4,
    ),
    st.integers(0, 9000),
)
def test_the_answer_text_is_the_offsets_dump_for_any_runs(
    partitions: list[int], outcomes: dict[int, int | TierlogError], long_run: int
) -> None:
    """Runs of one partition are formatted a slice at a time: runs of any length, longer than a slice."""
    partitions = partitions + [partitions[-1]] * long_run
    grouped = [(p, [i for i, q in enumerate(partitions) if q == p], o) for p, o in outcomes.items()]
    offsets = produce_offsets(len(partitions), grouped)
    expected = dump_json({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})
    assert _answers(partitions, outcomes) == [expected] * len(_IMPLEMENTATIONS)


def _counts(data: bytes, needle: bytes, limit: int | None) -> list[int]:
    """count_bytes as the pure fallback and as the compiled core answer it (the compiled one when loaded)."""
    answers = []
    for implementation in ("pure", "compiled") if _accel.available is not None else ("pure",):
        with _accel.use(implementation):
            answers.append(count_bytes(data, needle, limit))
    return answers


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 9000) | st.sampled_from([4079, 4080, 4081, 8159, 8160, 8161]),
    seed=st.binary(min_size=1, max_size=64),
    needle=st.sampled_from([b"{", b"a", b'"records"', b"aa", b"{{{"]),
    limit=st.none() | st.integers(0, 40),
)
def test_count_bytes_is_bytes_count_up_to_its_limit(
    size: int, seed: bytes, needle: bytes, limit: int | None
) -> None:
    data = (seed * (size // len(seed) + 1))[:size].replace(b"\x00", b"{")  # every size, block edges included
    expected = data.count(needle) if limit is None else min(data.count(needle), limit)
    assert set(_counts(data, needle, limit)) == {expected}


@pytest.mark.parametrize("size", [0, 1, 4079, 4080, 4081, 8160 + 17, 2**20 + 1])
def test_count_bytes_on_block_edges_dense_runs_and_large_bodies(size: int) -> None:
    dense = b"{" * size  # every byte a hit: no lane of a block may pass 255
    sparse = bytes(i % 251 for i in range(size))
    for data in (dense, sparse):
        for limit in (None, 0, 4081):
            expected = data.count(b"{") if limit is None else min(data.count(b"{"), limit)
            assert set(_counts(data, b"{", limit)) == {expected}
    assert set(_counts(b"a" * size, b"aa", None)) == {size // 2}  # no overlapping matches


def test_count_bytes_refuses_an_empty_needle_and_a_negative_limit() -> None:
    for needle, limit in ((b"", None), (b"{", -1)):
        with pytest.raises(ValueError, match="needle and a limit"):
            count_bytes(b"{}", needle, limit)
