"""Content negotiation as Confluent's API reference describes it: ``application/vnd.kafka[.embedded_format]
.[api_version]+[serialization_format]``, ``application/vnd.kafka+json`` and ``application/json``, with
q-values and wildcards in ``Accept``; format-specific types accepted on the consumer routes."""

from __future__ import annotations

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.rest_compat.helpers import (
    AVRO_V2,
    BINARY_V1,
    BINARY_V2,
    JSON_V1,
    JSON_V2,
    V1,
    V2,
    b64,
    send,
)

FORMAT_TYPES = [
    BINARY_V2,
    JSON_V2,
    AVRO_V2,
    "application/vnd.kafka.protobuf.v2+json",
    "application/vnd.kafka.jsonschema.v2+json",
    V2,
    V1,
    BINARY_V1,
    JSON_V1,
    "application/vnd.kafka.avro.v1+json",
    "application/vnd.kafka+json",
    "application/json",
    "application/vnd.kafka.v2+json; charset=utf-8",
]


@pytest.mark.parametrize("content_type", FORMAT_TYPES)
async def test_consumer_routes_accept_every_rest_proxy_type(node: RunningBroker, content_type: str) -> None:
    client = node.client
    created = await send(client, "POST", "/consumers/g", {"name": "c"}, content_type=content_type)
    assert created.status == 200, created.body
    base = "/consumers/g/instances/c"
    subscribed = await send(
        client, "POST", f"{base}/subscription", {"topics": ["t"]}, content_type=content_type
    )
    assert subscribed.status == 204, subscribed.body
    assert (await send(client, "GET", f"{base}/subscription", content_type=None)).body == {"topics": ["t"]}


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/vnd.kafka.v3+json"])
async def test_other_types_are_415(node: RunningBroker, content_type: str) -> None:
    answer = await send(node.client, "POST", "/consumers/g", {"name": "c"}, content_type=content_type)
    answer.error(415, 41501)
    produced = await send(
        node.client, "POST", "/topics/t", {"records": [{"value": None}]}, content_type=content_type
    )
    produced.error(415, 41501)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, V2),
        ("*/*", V2),
        ("application/*", V2),
        (V2, V2),
        (V1, V1),
        ("application/vnd.kafka+json", "application/vnd.kafka+json"),
        ("application/json", "application/json"),
        ("application/json;q=0.9, application/vnd.kafka.v2+json;q=0.1", "application/json"),
        ("application/json, application/vnd.kafka.v2+json", V2),
        ("text/html, */*;q=0.1", V2),
        (BINARY_V2, BINARY_V2),
    ],
)
async def test_accept_negotiation_on_metadata(node: RunningBroker, accept: str | None, expected: str) -> None:
    answer = await send(node.client, "GET", "/topics", content_type=None, accept=accept)
    assert (answer.status, answer.content_type) == (200, expected)


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "*/*;q=0", "application/json;q=0"])
async def test_unacceptable_is_406_in_kafka_json(node: RunningBroker, accept: str) -> None:
    answer = await send(node.client, "GET", "/topics", content_type=None, accept=accept)
    answer.error(406, 40601)
    assert answer.content_type == V2


@pytest.mark.parametrize(
    ("content_type", "value", "stored_as"),
    [
        (BINARY_V1, b64(b"raw"), BINARY_V2),
        (V1, b64(b"raw"), BINARY_V2),
        ("application/vnd.kafka+json", b64(b"raw"), BINARY_V2),
        ("application/json", b64(b"raw"), BINARY_V2),
        (JSON_V1, {"a": 1}, JSON_V2),
    ],
)
async def test_v1_and_generic_types_produce(
    node: RunningBroker, content_type: str, value: object, stored_as: str
) -> None:
    client = node.client
    produced = await send(
        client, "POST", "/topics/t", {"records": [{"value": value}]}, content_type=content_type
    )
    assert produced.status == 200, produced.body
    assert produced.body["offsets"][0]["error_code"] is None
    expected_type = V1 if ".v1+" in content_type else V2
    assert produced.content_type == expected_type
    fetched = await send(
        client, "GET", "/topics/t/partitions/0/records?offset=0", content_type=None, accept=stored_as
    )
    assert [r["value"] for r in fetched.body] == [value]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [(BINARY_V2, BINARY_V2), (BINARY_V1, BINARY_V1), (V2, BINARY_V2), ("*/*", BINARY_V2), (None, BINARY_V2)],
)
async def test_consumer_records_negotiation(node: RunningBroker, accept: str | None, expected: str) -> None:
    client = node.client
    await send(client, "POST", "/consumers/g", {"name": "c", "format": "binary"})
    answer = await send(
        client, "GET", "/consumers/g/instances/c/records?timeout=0", content_type=None, accept=accept
    )
    assert (answer.status, answer.content_type, answer.body) == (200, expected, [])


async def test_a_json_consumer_refuses_binary_records(node: RunningBroker) -> None:
    client = node.client
    await send(client, "POST", "/consumers/g", {"name": "c", "format": "json"})
    answer = await send(
        client, "GET", "/consumers/g/instances/c/records", content_type=None, accept=BINARY_V2
    )
    answer.error(406, 40601)
    ok = await send(
        client, "GET", "/consumers/g/instances/c/records?timeout=0", content_type=None, accept=JSON_V2
    )
    assert (ok.status, ok.content_type) == (200, JSON_V2)
