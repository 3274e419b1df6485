"""Which implementation of the record codec runs: the compiled core (``_speedups``) or the pure-Python one.

The compiled extension is built by ``pip install`` (setup.py) where a C compiler exists. When it cannot be
imported, the pure-Python codec runs and one warning line says so. ``TIERLOG_PURE_CODEC=1`` in the
environment forces the pure codec (no warning): the reference implementation, and the way to test the
fallback. Both implementations accept the same inputs, raise the same error kinds and write the same bytes.

:data:`native` is read by the codec functions on every call, so tests may swap it with :func:`use`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlog.tiering.codec.records import Headers, Record

Buffer = bytes | bytearray | memoryview

__all__ = ["ENV_PURE", "CompiledCodecWarning", "Native", "available", "native", "use"]

ENV_PURE = "TIERLOG_PURE_CODEC"
_T = TypeVar("_T")


class CompiledCodecWarning(RuntimeWarning):
    """The compiled codec could not be loaded; the (slower) pure-Python codec runs instead."""


class Native(Protocol):
    """The functions of the compiled module (tiering/codec/_speedups.c), as the pure modules call them."""

    def decode_varint(self, buf: Buffer, pos: int, /) -> tuple[int, int]: ...
    def decode_varlong(self, buf: Buffer, pos: int, /) -> tuple[int, int]: ...
    def encode_varint(self, value: int, /) -> bytes: ...
    def encode_varlong(self, value: int, /) -> bytes: ...
    def decode_records(
        self, data: Buffer, count: int, base_offset: int, base_timestamp: int, append_time: int | None, /
    ) -> list[Record]: ...
    def validate_records(
        self, buf: Buffer, start: int, end: int, count: int, base_timestamp: int, /
    ) -> None: ...
    def encode_records(self, records: Sequence[Record], now: int, /) -> tuple[bytes, int, int]: ...
    def build_uncompressed(
        self,
        records: Sequence[Record],
        now: int,
        base_offset: int,
        partition_leader_epoch: int,
        attributes: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        /,
    ) -> bytes: ...
    def build_uncompressed_columns(
        self,
        keys: Sequence[Buffer | None],
        values: Sequence[Buffer | None],
        now: int,
        base_offset: int,
        partition_leader_epoch: int,
        attributes: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        /,
    ) -> bytes: ...
    def decode_columns(
        self, sections: Sequence[tuple[Buffer, int, int, int, int | None]], /
    ) -> tuple[Any, ...]: ...
    def make_record(
        self, key: bytes | None, value: bytes | None, headers: Headers, timestamp: int, /
    ) -> Record: ...
    def set_record_type(self, cls: type, /) -> None: ...
    def count_bytes(self, buf: Buffer, needle: bytes, limit: int, /) -> int: ...
    def decode_base64_list(self, items: list[Any], /) -> bool: ...
    def consumer_records(
        self,
        records: list[Record],
        cls: type[_T],
        topic: str,
        partition: int,
        timestamp_type: int,
        min_offset: int,
        /,
    ) -> list[_T]: ...


def _load() -> Native | None:
    if os.environ.get(ENV_PURE, "") not in ("", "0"):
        return None
    try:
        from tierlog.tiering.codec import _speedups  # type: ignore[attr-defined]
    except ImportError as err:
        # warn_explicit with a file name that has no source lines: the warning prints as exactly one line.
        # A filter that makes it an error (pytest's -W error) must not stop the fallback.
        with suppress(CompiledCodecWarning):
            warnings.warn_explicit(
                f"compiled record codec unavailable ({err}); using the pure-Python codec",
                CompiledCodecWarning,
                filename="<tierlog>",
                lineno=0,
                module=__name__,
            )
        return None
    return cast(Native, _speedups)


#: The compiled module, or None when the pure-Python codec runs.
native: Native | None = _load()
#: The compiled module whether or not it is in use (None when it was not built or not loaded).
available: Native | None = native


@contextmanager
def use(implementation: str) -> Iterator[None]:
    """Run the codec as ``"pure"`` or ``"compiled"`` inside the block (for tests and benchmarks).

    Not thread-safe: it swaps a module global.

    Raises:
        RuntimeError: ``"compiled"`` was asked for but the extension is not loaded.
        ValueError: an unknown implementation name.
    """
    global native
    if implementation == "pure":
        chosen = None
    elif implementation == "compiled":
        if available is None:
            raise RuntimeError("the compiled codec is not built (or TIERLOG_PURE_CODEC is set)")
        chosen = available
    else:
        raise ValueError(f"unknown codec implementation {implementation!r}")
    before, native = native, chosen
    try:
        yield
    finally:
        native = before
