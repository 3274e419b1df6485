"""Choosing the implementation: the compiled core loads here, TIERLOG_PURE_CODEC=1 forces pure Python quietly,
and a missing extension falls back to pure Python with exactly one warning line."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.records import Headers, Record

COMPARES_IMPLEMENTATIONS = True

PROBE = "from tierlog.tiering.codec import _accel, build_batch, Record; build_batch([Record(b'k', b'v')]); "


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != _accel.ENV_PURE} | env
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60, check=True
    )


def test_the_compiled_codec_is_built_and_loaded_here() -> None:
    # gcc and the Python headers are on every machine tierlog runs on: `pip install` must have built it.
    assert python(PROBE + "print(_accel.native is not None)").stdout.strip() == "True"


def test_the_environment_variable_forces_pure_python_without_a_warning() -> None:
    done = python(PROBE + "print(_accel.native, _accel.available)", TIERLOG_PURE_CODEC="1")
    assert done.stdout.strip() == "None None"
    assert done.stderr == ""


BLOCK = (
    "import sys, importlib.abc\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.endswith('._speedups'): raise ImportError('no compiled codec in this test')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def test_a_missing_extension_falls_back_with_one_warning_line() -> None:
    done = python(BLOCK + PROBE + "print(_accel.native)")
    assert done.stdout.strip() == "None"
    lines = done.stderr.splitlines()
    assert any("CompiledCodecWarning" in line and "pure-Python codec" in line for line in lines), lines
    warning_lines = [line for line in lines if "tierlog" in line]
    assert len(warning_lines) == 1, lines


def test_the_fallback_survives_warnings_turned_into_errors() -> None:
    strict = "import warnings; warnings.simplefilter('error')\n"
    done = python(strict + BLOCK + PROBE + "print(_accel.native)")
    assert done.stdout.strip() == "None"


def test_use_refuses_unknown_names() -> None:
    with pytest.raises(ValueError), _accel.use("fortran"):
        pass


@given(
    st.one_of(st.none(), st.binary(max_size=8)),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))), max_size=2).map(
        tuple
    ),
    st.integers(-1, 2**63 - 1),
)
def test_make_record_makes_what_the_record_class_makes(
    key: bytes | None, value: bytes | None, headers: Headers, timestamp: int
) -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    made = native.make_record(key, value, headers, timestamp)
    assert type(made) is Record
    assert made == Record(key, value, headers, timestamp)
    assert made.offset == -1
    assert not gc.is_tracked(made)  # bytes, ints and tuples: never part of a cycle


def test_make_record_takes_exactly_four_fields() -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    with pytest.raises(TypeError, match="make_record"):
        native.make_record(b"k", b"v", ())  # type: ignore[call-arg]


class _Consumed(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Headers


@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=8),
            st.none() | st.binary(max_size=8),
            st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2).map(
                tuple
            ),
        ),
        max_size=6,
    ),
    st.integers(0, 8),
)
def test_consumer_records_match_the_python_loop_and_leave_the_collector(
    fields: list[tuple[bytes | None, bytes | None, Headers]], min_offset: int
) -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    records = [Record(k, v, h, 1000 + n, n) for n, (k, v, h) in enumerate(fields)]
    made = native.consumer_records(records, _Consumed, "t", 3, 1, min_offset)
    expected = [_Consumed("t", 3, r.offset, r.timestamp, 1, r.key, r.value, r.headers) for r in records]
    assert made == [c for c in expected if c.offset >= min_offset]
    assert all(type(c) is _Consumed for c in made)
    # untracked unless the headers tuple still is (the decoder's never are; the empty tuple is not): a
    # record of bytes, ints and untracked tuples is never part of a cycle
    assert all(gc.is_tracked(c) == gc.is_tracked(c.headers) for c in made)


def test_consumer_records_keep_a_record_with_a_container_on_the_collector_and_check_their_arguments() -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    listed = Record(b"k", b"v", [("h", b"x")], 5, 0)  # type: ignore[arg-type]  # a list: could join a cycle
    (made,) = native.consumer_records([listed], _Consumed, "t", 0, 0, 0)
    assert gc.is_tracked(made) and made.headers is listed.headers
    with pytest.raises(TypeError, match="consumer_records"):
        native.consumer_records([listed], dict, "t", 0, 0, 0)
    with pytest.raises(AttributeError):
        native.consumer_records([object()], _Consumed, "t", 0, 0, 0)  # type: ignore[list-item]


class _Loose(_Consumed):  # a subclass with a __dict__: a record could then hold itself
    pass


@pytest.mark.parametrize(
    "cls", [os.stat_result, _Loose, tuple, dict], ids=["struct-sequence", "dict", "tuple", "not-a-tuple"]
)
def test_consumer_records_refuse_classes_they_cannot_fill_safely(cls: type) -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    with pytest.raises(TypeError, match="named tuple"):
        native.consumer_records([Record(b"k", b"v", (), 1, 0)], cls, "t", 0, 0, 0)


def test_consumer_records_keep_records_with_possible_containers_tracked_and_hash_as_tuples() -> None:
    native = _accel.available
    if native is None:
        pytest.skip("the compiled codec is not loaded")
    plain = Record(b"k", b"v", (), 1, 2**70)  # an offset past int64 (the base offset is outside the CRC)
    (made,) = native.consumer_records([plain], _Consumed, "t", 0, 0, -5)
    assert not gc.is_tracked(made) and made.offset == 2**70 and hash(made) == hash(tuple(made))
    assert native.consumer_records([plain], _Consumed, "t", 0, 0, 2**71) == []
    keyed = Record({}, b"v", (), 1, 0)  # type: ignore[arg-type]  # an empty dict is untracked, yet mutable
    (made,) = native.consumer_records([keyed], _Consumed, "t", 0, 0, 0)
    assert gc.is_tracked(made)
    (made,) = native.consumer_records([plain], _Consumed, ["t"], 0, 0, 0)  # type: ignore[arg-type]
    assert gc.is_tracked(made)
