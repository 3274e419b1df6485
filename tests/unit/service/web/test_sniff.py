"""What a connection's first bytes speak (issue 35): the sans-io part of naming protocol mix-ups."""

from __future__ import annotations

import struct

import pytest

from tierlog.service.web.sniff import classify


def kafka_request(api_key: int, version: int) -> bytes:
    body = struct.pack(">hhi", api_key, version, 7) + b"\x00\x07rdkafka"
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "tls"),  # a ClientHello record
        (b"\x16", "tls"),
        (b"GET /health HTTP/1.1\r\n", "http"),
        (b"POST /topics/t HTTP/1.1\r\n", "http"),
        (b"PRI * HTTP/2.0\r\n", "http"),
        (b"GE", "http"),
        (kafka_request(18, 3), "kafka"),  # ApiVersions, librdkafka's first request
        (kafka_request(3, 12), "kafka"),  # Metadata
        (b"\x00\x00\x00", "unknown"),
        (b"\xff\xff\xff\xffjunk", "unknown"),
        (b"hello", "unknown"),
    ],
)
def test_classify(first: bytes, kind: str) -> None:
    assert classify(first) == kind
