"""Splicing file regions into an encoded answer (:mod:`tierlog.service.kafka.spliced`): the frame's parts
read back, with each region's bytes in place of its marker, as the frame the copying path encodes."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.service.kafka.frames import response_frame
from tierlog.service.kafka.spliced import marker, splice
from tierlog.tiering.log import FileSlice


@pytest.fixture
def regions(tmp_path: Path) -> Iterator[list[FileSlice]]:
    path = tmp_path / "segment.log"
    path.write_bytes(bytes(range(256)) * 4)
    out = [
        FileSlice(os.open(path, os.O_RDONLY), position, size, 0, 0, 0)
        for position, size in ((3, 200), (500, 130))
    ]
    yield out
    for region in out:
        region.close()


def _compact(value: bytes) -> bytes:
    assert len(value) + 1 < 0x80
    return bytes([len(value) + 1]) + value


def _flat(parts: list[bytes | FileSlice]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in parts)


def test_a_non_flexible_answer_reads_as_the_copied_one(regions: list[FileSlice]) -> None:
    def body(records: list[bytes]) -> bytes:  # two int32-prefixed records fields between other fields
        return b"\x00\x01" + b"".join(struct.pack(">i", len(r)) + r + b"\x00\x07" for r in records)

    spliced = splice(9, body([marker(0), marker(1)]), regions, flexible=False, flexible_header=False)
    copied = response_frame(9, body([r.read() for r in regions]), flexible_header=False)
    assert _flat(spliced.parts) == copied
    assert spliced.size == len(copied)
    assert [p for p in spliced.parts if not isinstance(p, bytes)] == regions


def test_a_flexible_answer_gets_varint_lengths(regions: list[FileSlice]) -> None:
    def body(records: list[bytes], compact: bool) -> bytes:
        def field(r: bytes) -> bytes:
            if compact:
                return _compact(r)
            n, out = len(r) + 1, bytearray()  # uvarint of a region too long for one byte
            while n >= 0x80:
                out.append(n & 0x7F | 0x80)
                n >>= 7
            return bytes(out) + bytes([n]) + r

        return b"\x05" + b"".join(field(r) + b"\x00" for r in records)

    spliced = splice(3, body([marker(0), marker(1)], True), regions, flexible=True, flexible_header=True)
    copied = response_frame(3, body([r.read() for r in regions], False), flexible_header=True)
    assert _flat(spliced.parts) == copied


def test_a_missing_marker_is_refused(regions: list[FileSlice]) -> None:
    body = struct.pack(">i", 22) + marker(1)  # region 0's marker absent
    with pytest.raises(ValueError, match="marker of region 0"):
        splice(1, body, regions, flexible=False, flexible_header=False)
