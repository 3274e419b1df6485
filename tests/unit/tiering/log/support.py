"""Helpers shared by the log engine tests (no tests here): batch builders and a reference model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record

NOW = 1_700_000_000_000


def make_batch(
    values: Sequence[bytes], timestamps: Sequence[int] | int = NOW, *, base_offset: int = 0
) -> bytes:
    """One uncompressed v2 batch of ``values`` (keys None) with the given record timestamps."""
    stamps = [timestamps] * len(values) if isinstance(timestamps, int) else list(timestamps)
    records = [Record(None, value, timestamp=ts) for value, ts in zip(values, stamps, strict=True)]
    return build_batch(records, base_offset=base_offset, now_ms=NOW)


def decode(data: bytes) -> list[tuple[int, bytes | None, int]]:
    """``(offset, value, timestamp)`` of every record in ``data`` (whole batches)."""
    return [(rec.offset, rec.value, rec.timestamp) for _, rec in iter_records(data)]


@dataclass
class Model:
    """The reference model: a plain list of records and the batch boundaries, indexed by offset."""

    start: int = 0
    records: list[tuple[bytes, int]] = field(default_factory=list)
    batches: list[tuple[int, int]] = field(default_factory=list)  # (base, last) offsets

    @property
    def end(self) -> int:
        return self.start + len(self.records)

    def append(self, values: Sequence[bytes], timestamps: Sequence[int]) -> None:
        base = self.end
        self.records.extend(zip(values, timestamps, strict=True))
        self.batches.append((base, self.end - 1))

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= ``offset`` (as the log does)."""
        while self.batches and self.batches[-1][1] >= offset:
            base, _ = self.batches.pop()
            del self.records[base - self.start :]

    def drop_before(self, new_start: int) -> None:
        del self.records[: new_start - self.start]
        self.batches = [b for b in self.batches if b[0] >= new_start]
        self.start = new_start

    def expected_from(self, offset: int) -> list[tuple[int, bytes | None, int]]:
        """The records a read at ``offset`` returns, starting at the base of the batch holding it."""
        base = next((b for b, last in self.batches if last >= offset), self.end)
        return [(base + i, v, t) for i, (v, t) in enumerate(self.records[base - self.start :])]
