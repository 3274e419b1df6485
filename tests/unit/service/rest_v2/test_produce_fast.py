"""The whole-body fast path of ``binary`` produce bodies (msgspec) against the record-by-record walk.

The fast path may only ever answer what the walk answers: for any body it gives the walk's records or
declines (None), and then the walk gives the error. Both base64 decoders (msgspec's in the fast path,
binascii's strict mode in the walk, the compiled core's ``decode_base64_list`` in the fast path when the
codec is compiled) accept and decode exactly as ``base64.b64decode(validate=True)``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import threading
import time

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.service.rest_v2.test_produce_parse import records_of
from tierlog.service.rest_v2 import produce_body
from tierlog.service.rest_v2.convert import parse_produce_rows
from tierlog.service.rest_v2.produce_body import (
    FAST_PATH_MAX_BYTES,
    ProduceColumns,
    _fast_binary_rows,
    _Record,
)
from tierlog.service.web.media import EmbeddedFormat
from tierlog.tiering.codec import _accel
from tierlog.wire.errors import BadRequestError, InvalidBodyError, TierlogError

BINARY = EmbeddedFormat.BINARY
Row = tuple[bytes | None, bytes | None, int | None]


def walked(body: bytes, max_records: int | None = None) -> list[Row] | tuple[type, int, str]:
    """The walk's answer (the fast path skipped): the records, or the error's kind, code and message."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(produce_body, "_fast_binary_rows", lambda body, max_records: None)
        return answered(body, max_records)


def answered(body: bytes, max_records: int | None = None) -> list[Row] | tuple[type, int, str]:
    try:
        return list(parse_produce_rows(body, BINARY, max_records=max_records))
    except TierlogError as err:
        return (type(err), err.code, err.message)


def strict(text: str) -> bytes | None:
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def validated(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


base64_texts = st.one_of(
    st.text(alphabet="AQgw+/=", max_size=12),
    st.text(alphabet="ABab09+/= \n\t-_é\x00", max_size=12),
    st.binary(max_size=20).map(lambda raw: base64.b64encode(raw).decode()),
    st.builds(
        lambda raw, at, junk: (lambda s: s[:at] + junk + s[at:])(base64.b64encode(raw).decode()),
        st.binary(max_size=12),
        st.integers(0, 16),
        st.sampled_from(["=", "==", " ", "\n", "-", "_", "A", "AA", "é"]),
    ),
)


def fast_decoded(text: str) -> bytes | None:
    """The key of a record as the fast path's msgspec struct decodes it."""
    try:
        return _RECORD_DECODER.decode(json.dumps({"key": text}).encode()).key
    except (msgspec.MsgspecError, ValueError):
        return None


_RECORD_DECODER = msgspec.json.Decoder(_Record[bytes])


def compiled_decoded(text: str) -> bytes | None:
    """``text`` as the compiled core decodes it (None: declined), or as ``fast_decoded`` without it."""
    if _accel.available is None:
        return fast_decoded(text)
    items: list[object] = [text]
    return items[0] if _accel.available.decode_base64_list(items) else None  # type: ignore[return-value]


@settings(max_examples=2000, deadline=None)
@given(base64_texts)
def test_both_base64_decoders_accept_and_decode_as_b64decode_validate(text: str) -> None:
    """The walk's (binascii, strict mode) exactly; the fast path's (msgspec) refuses a few more (padding
    after a whole quad, ``AAAA=``: the walk then decides), and decodes what it accepts the same."""
    assert strict(text) == validated(text)
    for decoded in (fast_decoded(text), compiled_decoded(text)):
        assert decoded is None or decoded == validated(text)
    data = text.rstrip("=")
    if validated(text) is not None and len(text) % 4 == 0 and len(text) - len(data) <= 2:
        assert compiled_decoded(text) == validated(text)  # a canonical text is decoded, never declined


def test_msgspec_agrees_on_every_short_text() -> None:
    """Every text of up to five characters over the alphabet's edges (padding, bits past the end)."""
    for size in range(6):
        for chars in itertools.product("AQw=+/ é", repeat=size):
            text = "".join(chars)
            for decoded in (fast_decoded(text), compiled_decoded(text)):
                assert decoded is None or decoded == validated(text), text


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    base64_texts,
)
records = records_of(scalars)
bodies = st.dictionaries(
    st.sampled_from(["records", "key_schema", "value_schema_id", "extra"]),
    st.one_of(st.lists(records, max_size=12), scalars, st.dictionaries(st.just("a"), scalars)),
    max_size=3,
)


@settings(max_examples=600, deadline=None)
@given(
    bodies,
    st.sampled_from([None, 1, 3, 100]),
    st.sampled_from([None, 0]),
    st.sampled_from(["", ' "records": [], ', "\\u0030", "1e400", "NaN", "\ufeff", "  "]),
    st.integers(0, 200),
)
def test_the_fast_path_answers_as_the_walk_or_declines(
    body: dict[str, object], max_records: int | None, indent: int | None, insert: str, at: int
) -> None:
    text = json.dumps(body, indent=indent, ensure_ascii=False)
    if insert:
        at = min(at, len(text))
        text = text[:at] + insert + text[at:]
    data = text.encode()
    for implementation in IMPLEMENTATIONS:
        with _accel.use(implementation):
            fast = _fast_binary_rows(data, max_records)
            reference = walked(data, max_records)
            if fast is not None:
                assert list(fast) == reference
            assert answered(data, max_records) == reference


# the fast path with each codec: msgspec's bytes fields (pure) or text fields decoded by the compiled core
IMPLEMENTATIONS = ["pure", "compiled"] if _accel.available is not None else ["pure"]


def _body(*records: str, extra: str = "") -> bytes:
    return ('{"records":[' + ",".join(records) + "]" + extra + "}").encode()


VALID = '{"key":"a2V5","value":"dmFsdWU=","partition":2}'


@pytest.mark.parametrize(
    ("name", "body", "max_records"),
    [
        # a repeated "records": the first array passes max_records, the last one is short
        ("repeated records", _body(*["{}"] * 5, extra=',"records":[' + VALID + "]"), 3),
        ("escaped key", _body(VALID, extra=',"rec\\u006frds":[' + VALID + "]"), 3),
        ("escaped value", _body('{"value":"YQ\\u003d\\u003d"}'), None),
        ("lone surrogate", _body('{"value":"YQ=="}', extra=',"key_schema":"\\ud800"'), None),
        ("utf-8 BOM", b"\xef\xbb\xbf" + _body(VALID), None),
        ("utf-16", _body(VALID).decode().encode("utf-16"), None),
        ("infinity as 1e400", _body(VALID, extra=',"key_schema":1e400'), None),
        ("big integer partition", _body('{"value":null,"partition":18446744073709551616}'), None),
        ("float partition", _body('{"value":null,"partition":1.0}'), None),
        ("negative partition", _body('{"value":null,"partition":-1}'), None),
        ("bool partition", _body('{"value":null,"partition":true}'), None),
        ("deep schema", _body(VALID, extra=',"key_schema":' + "[" * 600 + "]" * 600), None),
        ("too many", _body(*[VALID] * 4), 3),
        ("bad base64", _body(VALID, '{"value":"YQ="}', '{"value":"a b"}'), None),
        ("non-ascii base64", _body('{"value":"é"}'), None),
        ("not a string", _body('{"key":5}'), None),
        ("unknown record field", _body(VALID, '{"valur":"YQ=="}'), None),
        ("record not an object", _body(VALID, "[1]"), None),
        ("unknown body field", _body(VALID, extra=',"extra":1'), None),
        ("empty records", _body(), None),
        ("NaN", _body('{"value":null}', extra=',"key_schema":NaN'), None),
        ("bad JSON after", _body(VALID) + b"x", None),
        ("repeated key in a record", _body('{"value":"!!","value":"YQ=="}'), None),
        (
            "repeated key, both good",
            _body('{"value":"YQ==","value":"Yg==","partition":1,"partition":0}'),
            None,
        ),
        ("trailing bits", _body('{"value":"YR=="}'), None),
        ("padding after a whole quad", _body('{"value":"AAAA="}'), None),
        ("duplicate key, last bad", _body('{"value":"YQ==","value":"!!"}'), None),
        ("DEL in a string", _body('{"value":null}', extra=',"key_schema":"\x7f"'), None),
        ("valid", _body(VALID, '{"value":null}', '{"key":"","partition":0}', extra=',"key_schema":"s"'), 3),
    ],
)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_each_difference_of_msgspec_and_the_walk_is_left_to_the_walk(
    name: str, body: bytes, max_records: int | None, implementation: str
) -> None:
    with _accel.use(implementation):
        reference = walked(body, max_records)
        fast = _fast_binary_rows(body, max_records)
        if fast is not None:
            assert list(fast) == reference, name
        assert answered(body, max_records) == reference, name


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_valid_body_takes_the_fast_path(implementation: str) -> None:
    body = _body(VALID, '{"key":null,"value":"YQ=="}')
    with _accel.use(implementation):
        fast = _fast_binary_rows(body, 2)
    assert isinstance(fast, ProduceColumns)
    assert list(fast) == [(b"key", b"value", 2), (None, b"a", None)]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_body(*[VALID] * 4), InvalidBodyError),
        (_body('{"value":"YQ="}'), BadRequestError),
    ],
)
def test_the_fast_path_declines_what_the_walk_refuses(body: bytes, error: type[TierlogError]) -> None:
    assert _fast_binary_rows(body, 3) is None
    with pytest.raises(error):
        parse_produce_rows(body, BINARY, max_records=3)


def test_too_many_records_are_left_to_the_walk_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """More records than rest.produce.max.records (going by their braces) build no struct at all."""
    monkeypatch.setattr(produce_body, "_DECODER", None)  # decoding would fail the test, with either codec
    monkeypatch.setattr(produce_body, "_TEXT_DECODER", None)
    assert _fast_binary_rows(_body(*["{}"] * 11), 10) is None
    assert _fast_binary_rows(_body(VALID, extra=',"key_schema":"{{{"'), 1) is None  # a schema's braces too


def test_a_body_over_the_bound_is_walked() -> None:
    one = '{"value":"' + base64.b64encode(b"x" * 3000).decode() + '"}'
    body = _body(*[one] * (FAST_PATH_MAX_BYTES // len(one) + 1))
    assert len(body) > FAST_PATH_MAX_BYTES
    assert _fast_binary_rows(body, None) is None
    assert len(parse_produce_rows(body, BINARY)) == FAST_PATH_MAX_BYTES // len(one) + 1


def test_the_gil_is_handed_over_from_worker_threads_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the event loop's thread (small bodies run inline) a hand-over would make the loop wait for a busy
    worker: hand_over does nothing there."""
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)

    async def on_the_loop() -> None:
        produce_body.hand_over()

    asyncio.run(on_the_loop())
    assert calls == []
    worker = threading.Thread(target=produce_body.hand_over)
    worker.start()
    worker.join()
    assert calls == [0]


@pytest.mark.skipif(_accel.available is None, reason="the compiled codec is not loaded")
def test_decode_base64_list_decodes_in_place_or_leaves_the_list_as_it_was() -> None:
    native = _accel.available
    assert native is not None
    raw = [bytes([i % 256]) * (i * 37) for i in range(300)]  # past 64 KiB of text: the GIL is released
    texts: list[object] = [None if i % 7 == 0 else base64.b64encode(r).decode() for i, r in enumerate(raw)]
    items = list(texts)
    assert native.decode_base64_list(items)
    assert items == [None if i % 7 == 0 else r for i, r in enumerate(raw)]
    for bad in (b"QQ==", 5, "QQ=", "Q\u00e9==", "QQ==QQ=="):  # bytes, an int, a length, not ASCII, padding
        items = [*texts, bad]
        assert not native.decode_base64_list(items)
        assert items == [*texts, bad]
    assert native.decode_base64_list([]) and native.decode_base64_list([None, ""])


try:
    from tierlog.service.rest_v2 import _restjson
except ImportError:  # pragma: no cover - no compiler at install
    _restjson = None  # type: ignore[assignment]
_NO_C = "the compiled extensions are not built (no C compiler at install, or TIERLOG_PURE_CODEC)"
_WS = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])


@pytest.mark.skipif(_restjson is None or _accel.available is None, reason=_NO_C)
@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "key": st.none() | st.binary(max_size=9),
                "value": st.none() | st.binary(max_size=40),
                "partition": st.none() | st.integers(0, 10**18 - 1),
            },
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(_WS, min_size=8, max_size=8),
)
def test_the_c_parse_of_a_plain_body_is_json_and_b64decode(
    rows: list[dict[str, object]], ws: list[str]
) -> None:
    """parse_binary_records (service/rest_v2/_restjson.c) on {"records": [...]} bodies with whitespace
    anywhere JSON allows: the records json.loads and b64decode(validate=True) read, as the fast path
    answers them."""
    assert _restjson is not None

    def text(value: object) -> object:
        return base64.b64encode(value).decode() if isinstance(value, bytes) else value

    records = ("," + ws[0]).join(
        "{"
        + ws[1]
        + ("," + ws[2]).join(f'"{k}"{ws[3]}:{ws[4]}{json.dumps(text(v))}' for k, v in r.items())
        + ws[5]
        + "}"
        for r in rows
    )
    body = f'{ws[6]}{{"records"{ws[7]}:[{records}]}}{ws[0]}'.encode()
    parsed = _restjson.parse_binary_records(body, 12)
    expected = [(r.get("key"), r.get("value"), r.get("partition")) for r in rows]
    assert parsed is not None and list(zip(*parsed, strict=True)) == expected
    assert [(r.get("key"), r.get("value"), r.get("partition")) for r in json.loads(body)["records"]] == [
        tuple(text(x) for x in row) for row in expected
    ]
    with _accel.use("compiled"):  # the fast path takes bodies that start with '{' (no BOM, not UTF-16/32)
        fast = _fast_binary_rows(body.lstrip(), None)
    assert fast is not None and list(fast) == expected


@pytest.mark.skipif(_restjson is None or _accel.available is None, reason=_NO_C)
@pytest.mark.parametrize(
    "body",
    [
        b'{"records":[]}',
        b'{"records":[{"value":"YQ=="}],"key_schema":"s"}',  # another body field: msgspec decides
        b'{"records":[{"value":"YQ==","value":"Yg=="}]}',  # a repeated field
        b'{"records":[{"valu":"YQ=="}]}',
        b'{"records":[{"value":"YQ="}]}',
        b'{"records":[{"value":"Y===="}]}',
        b'{"records":[{"value":"Y=Q="}]}',
        b'{"records":[{"value":5}]}',
        b'{"records":[{"partition":-1}]}',
        b'{"records":[{"partition":01}]}',
        b'{"records":[{"partition":1.0}]}',
        b'{"records":[{"partition":1e3}]}',
        b'{"records":[{"partition":1000000000000000000}]}',  # 19 digits: msgspec decides
        b'{"records":[{"partition":true}]}',
        b'{"records":[{}],}',
        b'{"records":[{},]}',
        b'{"records":[{}]} x',
        b'{"records":[{"value":"YQ==}]}',
        b'{"records":[{}, {}, {}]}',  # over the limit of 2
    ],
)
def test_the_c_parse_declines_every_other_body(body: bytes) -> None:
    assert _restjson is not None
    assert _restjson.parse_binary_records(body, 2) is None


@pytest.mark.skipif(_restjson is None or _accel.available is None, reason=_NO_C)
def test_the_c_parse_checks_every_byte_of_base64_at_every_position() -> None:
    """Every byte value at every position of texts 16 bytes at a time and past (the SSE2 blocks and the
    tail): only the 64 characters are taken, and '=' only at the end."""
    assert _restjson is not None
    alphabet = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    for length in (16, 20, 36):
        for position in range(length):
            for byte in range(256):
                if byte == 0x22:  # a quote ends the string
                    continue
                text = bytearray(b"A" * length)
                text[position] = byte
                got = _restjson.parse_binary_records(b'{"records":[{"value":"' + bytes(text) + b'"}]}', 1)
                taken = byte in alphabet or (byte == 0x3D and position == length - 1)
                assert (got is not None) == taken, (length, position, byte)
                if got is not None:
                    assert got[1] == [base64.b64decode(bytes(text), validate=True)]
