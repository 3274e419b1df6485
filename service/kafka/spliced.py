"""Answers whose record bytes stay in segment files: zero-copy Fetch on plaintext listeners, sans I/O.

A handler that reads file regions (:class:`~tierlog.tiering.log.FileSlice`) answers a
:class:`SplicedAnswer`: its mapping holds a small :func:`marker` where each region's bytes go. The
listener encodes that mapping as usual (kio writes each marker as a short ``records`` field), then
:func:`splice` cuts the encoding at the markers and puts each region's length prefix (int32, or the
unsigned varint of a compact field in flexible versions) and the region itself in their place. The frame
is then written as its parts: the encoded bytes with ``write``, each region with ``sendfile`` straight
from the page cache (:mod:`tierlog.service.topics.send_region`), so no record byte is copied by the
broker. The frame's size prefix counts the regions' sizes, so the client sees exactly the bytes of the
copying path.

The markers are found in encoding order, each searched from the end of the one before; a marker starts
with bytes no topic name, client id or error message of an answer can hold before it (0xff and 0x00
around an ASCII tag), so a field written before a ``records`` field cannot be mistaken for one.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlog.tiering.log import FileSlice

__all__ = ["Outgoing", "SplicedAnswer", "marker", "splice"]

_MARKER_HEAD = b"\xff\x00tierlog-region\x00\xff"
_INDEX = struct.Struct(">I")  # which region, in encoding order
_INT32 = struct.Struct(">i")  # a non-flexible records field's length
_SIZE = struct.Struct(">i")  # frame size, excluding these 4 bytes
_CORRELATION = struct.Struct(">i")


def marker(index: int) -> bytes:
    """What a ``records`` field holds in place of region ``index`` (counted in encoding order). Pure."""
    return _MARKER_HEAD + _INDEX.pack(index)


@dataclass(slots=True)
class SplicedAnswer:
    """A handler's answer ``answer`` (a mapping as :func:`~.messages.shape` takes) whose ``records``
    fields hold :func:`marker` ``(i)`` for ``regions[i]``. Owns the regions until :meth:`close` (the
    listener closes them once the answer is sent, or when it cannot be)."""

    answer: Mapping[str, Any]
    regions: list[FileSlice]

    def close(self) -> None:
        """Close every region. Idempotent."""
        for region in self.regions:
            region.close()


@dataclass(slots=True)
class Outgoing:
    """A whole answer frame as parts to send in order: bytes to write, regions to ``sendfile``. Owns the
    regions until :meth:`close`."""

    parts: list[bytes | FileSlice]
    regions: list[FileSlice] = field(default_factory=list)

    @property
    def size(self) -> int:
        """The frame's bytes on the wire, its size prefix included."""
        return sum(len(p) if isinstance(p, bytes) else p.size for p in self.parts)

    def close(self) -> None:
        """Close every region. Idempotent."""
        for region in self.regions:
            region.close()


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def splice(
    correlation_id: int,
    encoded: bytes,
    regions: Sequence[FileSlice],
    *,
    flexible: bool,
    flexible_header: bool,
) -> Outgoing:
    """The frame of ``encoded`` (a response body holding each region's :func:`marker` as its ``records``
    field, in order) with the regions in the markers' places: size prefix and response header first
    (header v1, with an empty tagged-field section, when ``flexible_header``). ``flexible``: whether the
    body's version writes compact fields. Pure; the regions are referenced, not read.

    Raises:
        ValueError: a marker is missing or out of order (a bug of the handler that built the answer).
    """
    parts: list[bytes | FileSlice] = []
    pos = 0
    for index, region in enumerate(regions):
        mark = marker(index)
        at = encoded.find(mark, pos)
        prefix = 1 if flexible else _INT32.size  # a marker's length prefix: uvarint(len + 1) or int32
        if at < 0 or at - prefix < pos:
            raise ValueError(f"the answer holds no marker of region {index} after byte {pos}")
        length = _uvarint(region.size + 1) if flexible else _INT32.pack(region.size)
        parts.append(encoded[pos : at - prefix] + length)
        parts.append(region)
        pos = at + len(mark)
    parts.append(encoded[pos:])
    header = _CORRELATION.pack(correlation_id) + (b"\x00" if flexible_header else b"")
    body_size = sum(len(p) if isinstance(p, bytes) else p.size for p in parts)
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _SIZE.pack(len(header) + body_size) + header + first
    return Outgoing([p for p in parts if not isinstance(p, bytes) or p], list(regions))
