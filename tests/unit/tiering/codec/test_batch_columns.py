"""``build_batch_columns`` (a batch from key and value columns, no Record per record in the compiled core)
against ``build_batch`` of ``Record(key, value)`` objects: the same bytes and the same errors. Like every
module of this folder it runs once per codec implementation (conftest.py), and the golden bytes tie the
two together."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.tiering.codec import Compression, Record, build_batch, decode_batch
from tierlog.tiering.codec.batch import build_batch_columns
from tierlog.wire.errors import InvalidRequestError

NOW = 1_750_000_000_000

maybe_bytes = st.none() | st.binary(max_size=30) | st.binary(min_size=1, max_size=2).map(lambda b: b * 150)
pairs = st.lists(st.tuples(maybe_bytes, maybe_bytes), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(
    rows=pairs,
    codec=st.sampled_from(Compression),
    base_offset=st.integers(0, 2**40),
    now=st.integers(0, 2**42) | st.just(0),
)
def test_the_columns_batch_is_the_records_batch(
    rows: list[tuple[bytes | None, bytes | None]],
    codec: Compression,
    base_offset: int,
    now: int,
) -> None:
    keys, values = [k for k, _ in rows], [v for _, v in rows]
    expected = build_batch(
        [Record(k, v) for k, v in rows], base_offset=base_offset, compression=codec, now_ms=now
    )
    got = build_batch_columns(keys, values, base_offset=base_offset, compression=codec, now_ms=now)
    assert got == expected
    decoded = decode_batch(got).records
    assert [(r.key, r.value, r.timestamp) for r in decoded] == [(k, v, now) for k, v in rows]


def test_the_golden_batch() -> None:
    """A known batch, its CRC-32C (35f38335) included, from both implementations."""
    golden = (
        "0000000000000005" "00000041" "ffffffff" "02" "35f38335" "0000" "00000001"  # base .. last delta
        "00000000000003e8" "00000000000003e8"  # base and max timestamp: now
        "ffffffffffffffff" "ffff" "ffffffff" "00000002"  # no producer, two records
        "0e" "00" "00" "00" "01" "02" "76" "00"  # record 0: no key, value "v", no headers
        "0e" "00" "00" "02" "02" "6b" "01" "00"  # record 1: key "k", no value
    )  # fmt: skip
    batch = build_batch_columns([None, b"k"], [b"v", None], base_offset=5, now_ms=1000)
    assert batch.hex() == golden


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: build_batch_columns([], []), InvalidRequestError),
        (lambda: build_batch_columns([b"a"], [b"b"], now_ms=-1), InvalidRequestError),
        (lambda: build_batch_columns([b"a"], [b"b"], base_offset=-1), InvalidRequestError),
        (lambda: build_batch_columns([b"a", None], [b"b"]), ValueError),
        (lambda: build_batch_columns([b"a"], ["text"]), TypeError),  # type: ignore[list-item]
    ],
)
def test_the_columns_batch_refuses_what_the_records_batch_refuses(
    call: Callable[[], bytes], error: type[Exception]
) -> None:
    with pytest.raises(error):
        call()
