"""Kafka's request and response framing, sans I/O: size-prefixed frames and the request/response headers.

Every message on a Kafka connection is a frame::

    +----------------+------------------------------------------+
    | size: int32 BE | size bytes: header, then the message body |
    +----------------+------------------------------------------+

Request header (v1; v2 appends tagged fields, used by flexible versions)::

    request_api_key     int16
    request_api_version int16
    correlation_id      int32
    client_id           nullable string (int16 length, -1 for null)
    [tagged fields]     unsigned varint count, then (tag, size, bytes) each   (v2 only)

Response header (v0; v1 appends tagged fields, used by flexible versions except ApiVersions)::

    correlation_id      int32
    [tagged fields]     unsigned varint count                                 (v1 only)

:func:`parse_request_header` reads a header;
:func:`response_frame` builds an answer's frame. Nothing here does I/O, so tests and fuzzers drive it with
bytes. Every parser raises :class:`FrameError` on bytes it cannot read, never anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "FrameError",
    "RequestHeader",
    "parse_request_header",
    "response_frame",
]

_SIZE = struct.Struct(">i")  # frame size, excluding these 4 bytes
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_CLIENT_ID_LEN = struct.Struct(">h")  # client id length, -1 for null
_CORRELATION = struct.Struct(">i")  # response header: correlation id


class FrameError(ValueError):
    """Bytes that are not a Kafka frame or header; the connection they came on is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request's header; ``body_offset`` is where the message body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise FrameError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint longer than 5 bytes")


def parse_request_header(frame: bytes, *, flexible: bool | None) -> RequestHeader:
    """Read the header at the start of ``frame``. ``flexible``: whether the request's version uses header
    v2 (tagged fields); None reads only the fixed part (api key, version, correlation id, client id) to
    learn which API it is, before the version's flexibility is known.

    Raises: FrameError when the header is truncated or malformed.
    """
    if len(frame) < _HEADER.size + 2:
        raise FrameError(f"request header truncated: {len(frame)} bytes")
    api_key, api_version, correlation_id = _HEADER.unpack_from(frame)
    (length,) = _CLIENT_ID_LEN.unpack_from(frame, _HEADER.size)
    pos = _HEADER.size + 2
    client_id: str | None = None
    if length >= 0:
        if pos + length > len(frame):
            raise FrameError("client id runs past the frame")
        try:
            client_id = frame[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as err:
            raise FrameError(f"client id is not UTF-8: {err}") from None
        pos += length
    elif length != -1:
        raise FrameError(f"client id length {length}")
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise FrameError("tagged field runs past the frame")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_frame(correlation_id: int, body: bytes, *, flexible_header: bool) -> bytes:
    """The whole frame of an answer: size, response header (v1 with an empty tagged-field section when
    ``flexible_header``), body. Pure."""
    header = _CORRELATION.pack(correlation_id) + (b"\x00" if flexible_header else b"")
    return _SIZE.pack(len(header) + len(body)) + header + body
