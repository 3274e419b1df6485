"""The compiled codec against the pure-Python reference: same bytes, same records, same verdicts.

Differential properties (Hypothesis): random records built by both; random batches mutated (bytes flipped,
inserted, deleted, truncated) then decoded and validated by both, which must both accept with equal
results or both raise CorruptRecordError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import Compression, Record, _accel, build_batch, decode_batch
from tierlog.tiering.codec.header import HEADER_SIZE
from tierlog.tiering.codec.records import decode_records
from tierlog.tiering.codec.validate import validate_batch, validate_records
from tierlog.tiering.codec.varint import decode_varint, decode_varlong, encode_varint, encode_varlong
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError

COMPARES_IMPLEMENTATIONS = True
pytestmark = pytest.mark.skipif(_accel.available is None, reason="the compiled codec is not loaded")

T = TypeVar("T")
NOW = 1_750_000_000_000
MAX = 1_048_588

maybe_bytes = st.none() | st.binary(max_size=30) | st.binary(min_size=1, max_size=2).map(lambda b: b * 150)
headers = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3).map(tuple)
records = st.builds(
    Record,
    key=maybe_bytes,
    value=maybe_bytes,
    headers=headers,
    timestamp=st.just(-1) | st.integers(0, 2**42) | st.integers(2**62, 2**63 - 1),
)
record_lists = st.lists(records, min_size=1, max_size=12)


def outcome(call: Callable[[], T]) -> tuple[str, T | None]:
    """("ok", result) or ("corrupt", None); any other exception propagates and fails the test."""
    try:
        return "ok", call()
    except CorruptRecordError:
        return "corrupt", None


def both(call: Callable[[], T]) -> tuple[tuple[str, T | None], tuple[str, T | None]]:
    with _accel.use("pure"):
        pure = outcome(call)
    with _accel.use("compiled"):
        compiled = outcome(call)
    return pure, compiled


@settings(max_examples=300, deadline=None)
@given(batch=record_lists, codec=st.sampled_from(Compression), append_time=st.booleans())
def test_build_writes_the_same_bytes(batch: list[Record], codec: Compression, append_time: bool) -> None:
    def build() -> bytes:
        return build_batch(
            batch, compression=codec, now_ms=NOW, base_offset=7, log_append_time=append_time,
            producer_id=3, producer_epoch=1, base_sequence=5, is_transactional=True,
        )  # fmt: skip

    pure, compiled = both(build)
    assert pure == compiled
    with _accel.use("compiled"):
        assert decode_batch(compiled[1] or b"").records == decode_batch(pure[1] or b"").records


@pytest.mark.parametrize(
    "bad",
    [
        [Record(b"k", b"v", timestamp=-2)],
        [Record(b"k", b"v", timestamp=2**63)],
        [Record(b"k", b"v", timestamp=-(2**64))],
        [Record(b"k", b"v", headers=((b"not str", b"v"),))],  # type: ignore[arg-type]
        [],
    ],
)
def test_build_refuses_the_same_records(bad: list[Record]) -> None:
    for implementation in ("pure", "compiled"):
        with _accel.use(implementation), pytest.raises(InvalidRequestError):
            build_batch(bad, now_ms=NOW)


def test_build_accepts_buffers_and_lists_like_the_reference() -> None:
    odd = [Record(bytearray(b"k"), memoryview(b"value"), [("h", bytearray(b"x"))], 5)]  # type: ignore[arg-type]
    pure, compiled = both(lambda: build_batch(odd, now_ms=NOW))
    assert pure == compiled


mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "truncate"]), st.integers(0), st.integers(0, 255)
)


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, byte in edits:
        if not out:
            break
        i = where % len(out)
        if kind == "flip":
            out[i] ^= byte or 1
        elif kind == "insert":
            out.insert(i, byte)
        elif kind == "delete":
            del out[i]
        else:
            del out[i:]
    return bytes(out)


@settings(max_examples=500, deadline=None)
@given(batch=record_lists, edits=st.lists(mutation, min_size=1, max_size=3), append=st.booleans())
def test_decode_and_validate_agree_on_corrupted_sections(
    batch: list[Record], edits: list[tuple[str, int, int]], append: bool
) -> None:
    good = build_batch(batch, now_ms=NOW, base_offset=2**40)
    section = mutate(good[HEADER_SIZE:], edits)
    count = len(batch)
    pure, compiled = both(lambda: decode_records(section, count, 2**40, NOW, NOW + 1 if append else None))
    assert pure == compiled
    pure_v, compiled_v = both(lambda: validate_records(section, 0, len(section), count, NOW))
    assert pure_v == compiled_v


@settings(max_examples=300, deadline=None)
@given(batch=record_lists, edits=st.lists(mutation, max_size=2))
def test_validate_batch_agrees_on_whole_batches(
    batch: list[Record], edits: list[tuple[str, int, int]]
) -> None:
    from tierlog.tiering.codec.header import crc32c

    data = bytearray(mutate(build_batch(batch, now_ms=NOW), [(k, HEADER_SIZE + w, b) for k, w, b in edits]))
    if len(data) >= HEADER_SIZE:
        data[8:12] = (len(data) - 12).to_bytes(4, "big")
        data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    pure, compiled = both(lambda: validate_batch(bytes(data), max_size=MAX))
    assert pure == compiled


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=12), pos=st.integers(-2, 13))
def test_varint_decoders_agree(data: bytes, pos: int) -> None:
    for decode in (decode_varint, decode_varlong):
        pure, compiled = both(lambda decode=decode: decode(data, pos))  # type: ignore[misc]
        assert pure == compiled


@settings(max_examples=300, deadline=None)
@given(value=st.integers(-(2**64), 2**64))
def test_varint_encoders_agree(value: int) -> None:
    for encode in (encode_varint, encode_varlong):
        results = []
        for implementation in ("pure", "compiled"):
            with _accel.use(implementation):
                try:
                    results.append(encode(value))
                except InvalidRequestError:
                    results.append(b"refused")
        assert results[0] == results[1]
