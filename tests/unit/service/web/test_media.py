"""Content negotiation of the REST Proxy v2 routes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.web.media import (
    KAFKA_V1_JSON,
    KAFKA_V2_BINARY,
    KAFKA_V2_JSON,
    KAFKA_V2_JSON_JSON,
    METADATA_OFFERS,
    RECORDS_OFFERS,
    EmbeddedFormat,
    KafkaMediaType,
    consumer_records_offers,
    negotiate,
    parse_accept,
    parse_kafka_type,
    produce_format,
    response_offers,
)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, KAFKA_V2_JSON),
        ("", KAFKA_V2_JSON),
        ("*/*", KAFKA_V2_JSON),
        ("application/*", KAFKA_V2_JSON),
        ("application/vnd.kafka.v2+json", KAFKA_V2_JSON),
        ("application/vnd.kafka+json", "application/vnd.kafka+json"),
        ("application/json", "application/json"),
        ("application/json, application/vnd.kafka.v2+json", KAFKA_V2_JSON),
        ("application/vnd.kafka.v2+json;q=0.1, application/json", "application/json"),
        ("application/vnd.kafka.v2+json, application/vnd.kafka+json, application/json", KAFKA_V2_JSON),
        ("text/html, */*;q=0.2", KAFKA_V2_JSON),
    ],
)
def test_metadata_negotiation(accept: str | None, expected: str) -> None:
    offer = negotiate(accept, METADATA_OFFERS)
    assert offer is not None
    assert offer.response_type == expected


@pytest.mark.parametrize(
    "accept",
    ["text/html", "application/xml", "application/json;q=0", "*/*;q=0", "application/vnd.kafka.avro.v3+json"],
)
def test_metadata_not_acceptable(accept: str) -> None:
    assert negotiate(accept, METADATA_OFFERS) is None


@pytest.mark.parametrize(
    ("accept", "fmt", "content_type"),
    [
        (KAFKA_V2_BINARY, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
        (KAFKA_V2_JSON_JSON, EmbeddedFormat.JSON, KAFKA_V2_JSON_JSON),
        ("application/vnd.kafka.json.v2+json; charset=utf-8", EmbeddedFormat.JSON, KAFKA_V2_JSON_JSON),
        ("*/*", EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
        (None, EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
        ("application/json", EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
        ("application/vnd.kafka.v2+json", EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
        (f"{KAFKA_V2_BINARY};q=0.5, {KAFKA_V2_JSON_JSON}", EmbeddedFormat.JSON, KAFKA_V2_JSON_JSON),
        (f"{KAFKA_V2_JSON_JSON};q=0.9, {KAFKA_V2_BINARY}", EmbeddedFormat.BINARY, KAFKA_V2_BINARY),
    ],
)
def test_records_negotiation(accept: str | None, fmt: EmbeddedFormat, content_type: str) -> None:
    offer = negotiate(accept, RECORDS_OFFERS)
    assert offer is not None
    assert offer.embedded is fmt
    assert offer.response_type == content_type


def test_records_refuses_schema_formats_and_text() -> None:
    assert negotiate("application/vnd.kafka.avro.v2+json", RECORDS_OFFERS) is None
    assert negotiate("text/plain", RECORDS_OFFERS) is None


@pytest.mark.parametrize(
    ("content_type", "fmt"),
    [
        ("application/vnd.kafka.binary.v2+json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka.v2+json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka.json.v2+json", EmbeddedFormat.JSON),
        ("Application/VND.Kafka.JSON.v2+json; charset=UTF-8", EmbeddedFormat.JSON),
        ("application/vnd.kafka.avro.v2+json", EmbeddedFormat.AVRO),
        ("application/vnd.kafka.protobuf.v2+json", EmbeddedFormat.PROTOBUF),
        ("application/vnd.kafka.jsonschema.v2+json", EmbeddedFormat.JSONSCHEMA),
        # issue 12: the v1 types, the version-free ones and plain JSON produce as the peers read them
        ("application/json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka+json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka.v1+json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka.binary.v1+json", EmbeddedFormat.BINARY),
        ("application/vnd.kafka.json.v1+json", EmbeddedFormat.JSON),
        ("application/vnd.kafka.avro.v1+json", EmbeddedFormat.AVRO),
    ],
)
def test_produce_format(content_type: str, fmt: EmbeddedFormat) -> None:
    assert produce_format(content_type) is fmt


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/octet-stream",
        "application/vnd.kafka.binary.v3+json",
        "application/vnd.kafka.xml.v2+json",
    ],
)
def test_produce_format_unsupported(content_type: str | None) -> None:
    assert produce_format(content_type) is None


def test_parse_accept_skips_garbage_and_clamps_q() -> None:
    ranges = parse_accept("garbage, */json, text/html;q=abc, application/json;q=7")
    assert [(r.type, r.subtype, r.q) for r in ranges] == [("text", "html", 0.0), ("application", "json", 1.0)]


@given(st.text(max_size=80))
def test_negotiate_never_raises(header: str) -> None:
    offer = negotiate(header, RECORDS_OFFERS)
    assert offer is None or offer in RECORDS_OFFERS


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", KafkaMediaType(None, None)),
        ("application/vnd.kafka+json", KafkaMediaType(None, None)),
        ("application/vnd.kafka.v1+json", KafkaMediaType(None, "v1")),
        ("application/vnd.kafka.binary+json", KafkaMediaType(EmbeddedFormat.BINARY, None)),
        ("application/vnd.kafka.avro.v1+json", KafkaMediaType(EmbeddedFormat.AVRO, "v1")),
        (
            "APPLICATION/VND.KAFKA.JSONSCHEMA.V2+JSON; charset=utf-8",
            KafkaMediaType(EmbeddedFormat.JSONSCHEMA, "v2"),
        ),
        ("application/vnd.kafka.v3+json", None),
        ("application/vnd.kafka.xml.v2+json", None),
        ("application/vnd.kafka.v2+xml", None),
        ("application/octet-stream", None),
        ("text/plain", None),
        (None, None),
    ],
)
def test_parse_kafka_type(content_type: str | None, expected: KafkaMediaType | None) -> None:
    assert parse_kafka_type(content_type) == expected


@pytest.mark.parametrize(
    ("content_type", "accept", "expected"),
    [
        ("application/vnd.kafka.binary.v1+json", "*/*", KAFKA_V1_JSON),
        ("application/vnd.kafka.binary.v1+json", None, KAFKA_V1_JSON),
        ("application/vnd.kafka.binary.v1+json", KAFKA_V2_JSON, KAFKA_V2_JSON),
        ("application/vnd.kafka.binary.v2+json", "*/*", KAFKA_V2_JSON),
        (None, "*/*", KAFKA_V2_JSON),
        (None, KAFKA_V1_JSON, KAFKA_V1_JSON),
    ],
)
def test_a_v1_request_is_answered_in_v1(content_type: str | None, accept: str | None, expected: str) -> None:
    offer = negotiate(accept, response_offers(content_type))
    assert offer is not None and offer.response_type == expected


@pytest.mark.parametrize(
    ("fmt", "accept", "expected"),
    [
        (EmbeddedFormat.BINARY, None, KAFKA_V2_BINARY),
        (
            EmbeddedFormat.BINARY,
            "application/vnd.kafka.binary.v1+json",
            "application/vnd.kafka.binary.v1+json",
        ),
        (EmbeddedFormat.BINARY, KAFKA_V1_JSON, "application/vnd.kafka.binary.v1+json"),
        (EmbeddedFormat.JSON, "*/*", KAFKA_V2_JSON_JSON),
        (EmbeddedFormat.JSON, "application/json", KAFKA_V2_JSON_JSON),
        (EmbeddedFormat.JSON, f"{KAFKA_V2_BINARY}, {KAFKA_V2_JSON_JSON};q=0.2", KAFKA_V2_JSON_JSON),
        (EmbeddedFormat.JSON, KAFKA_V2_BINARY, None),
        (EmbeddedFormat.BINARY, KAFKA_V2_JSON_JSON, None),
    ],
)
def test_consumer_records_offers_follow_the_instance_format(
    fmt: EmbeddedFormat, accept: str | None, expected: str | None
) -> None:
    offer = negotiate(accept, consumer_records_offers(fmt))
    assert (offer.response_type if offer is not None else None) == expected
    assert offer is None or offer.embedded is fmt
