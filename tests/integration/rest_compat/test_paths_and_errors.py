"""Paths, request bodies and error responses as Confluent REST Proxy answers them: trailing slashes route
as without, ``null`` fields mean defaults, errors carry the peers' codes, message prefixes and the
negotiated Kafka content type, and malformed produce bodies are 422 with per-record detail."""

from __future__ import annotations

import json

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.rest_compat.helpers import AVRO_V2, BINARY_V2, V1, V2, b64, produce_binary, send


async def test_a_trailing_slash_routes_as_without(node: RunningBroker) -> None:
    client = node.client
    produced = await send(
        client, "POST", "/topics/t/", {"records": [{"value": b64(b"a")}]}, content_type=BINARY_V2
    )
    assert produced.status == 200 and produced.body["offsets"][0]["offset"] == 0
    assert (await send(client, "GET", "/topics/", content_type=None)).body == ["t"]
    offsets = await send(client, "GET", "/topics/t/partitions/0/offsets/", content_type=None)
    assert offsets.body == {"beginning_offset": 0, "end_offset": 1}
    records = await send(
        client, "GET", "/topics/t/partitions/0/records/?offset=0", content_type=None, accept=BINARY_V2
    )
    assert [r["value"] for r in records.body] == [b64(b"a")]
    created = await send(client, "POST", "/consumers/g/", {"name": "c"})
    assert created.status == 200
    assert (await send(client, "DELETE", "/consumers/g/instances/c/", content_type=None)).status == 204


@pytest.mark.parametrize("raw", [b"", b"null", b"{}"])
async def test_an_empty_or_null_consumer_create_body_means_defaults(node: RunningBroker, raw: bytes) -> None:
    answer = await send(node.client, "POST", "/consumers/g", raw=raw)
    assert answer.status == 200, answer.body
    assert answer.body["base_uri"].endswith(f"/consumers/g/instances/{answer.body['instance_id']}")


async def test_null_fields_mean_defaults_as_the_java_client_sends_them(node: RunningBroker) -> None:
    body = {
        "name": None,
        "format": None,
        "auto.offset.reset": None,
        "auto.commit.enable": None,
        "fetch.min.bytes": None,
        "consumer.request.timeout.ms": None,
    }
    answer = await send(node.client, "POST", "/consumers/g", body)
    assert answer.status == 200, answer.body
    records = await send(
        node.client,
        "GET",
        f"/consumers/g/instances/{answer.body['instance_id']}/records?timeout=0",
        content_type=None,
        accept=BINARY_V2,
    )
    assert (records.status, records.body) == (200, [])


async def test_not_found_codes_and_prefixes(node: RunningBroker) -> None:
    client = node.client
    await produce_binary(client, "t", [b"x"])
    (await send(client, "GET", "/topics/nope", content_type=None)).error(404, 40401, "Topic not found.")
    (await send(client, "GET", "/topics/nope/partitions", content_type=None)).error(
        404, 40401, "Topic not found."
    )
    (await send(client, "GET", "/topics/t/partitions/7", content_type=None)).error(
        404, 40402, "Partition not found."
    )
    (await send(client, "GET", "/topics/t/partitions/7/offsets", content_type=None)).error(
        404, 40402, "Partition not found."
    )
    produced = await send(
        client, "POST", "/topics/t/partitions/7", {"records": [{"value": None}]}, content_type=BINARY_V2
    )
    produced.error(404, 40402, "Partition not found.")
    missing = await send(client, "GET", "/consumers/g/instances/nobody/subscription", content_type=None)
    missing.error(404, 40403, "Consumer instance not found.")
    (await send(client, "DELETE", "/consumers/g/instances/nobody", content_type=None)).error(404, 40403)


@pytest.mark.parametrize("path", ["/no/such/route", "/topics/t/partitions/0/nothing", "/consumers"])
async def test_unknown_routes_get_a_five_digit_code(node: RunningBroker, path: str) -> None:
    answer = await send(node.client, "GET", path, content_type=None)
    answer.error(404, 40400)


async def test_errors_carry_the_negotiated_kafka_type(node: RunningBroker) -> None:
    client = node.client
    plain = await send(client, "GET", "/topics/nope", content_type=None)
    assert plain.content_type == V2
    as_json = await send(client, "GET", "/topics/nope", content_type=None, accept="application/json")
    assert as_json.content_type == "application/json"
    as_v1 = await send(
        client, "POST", "/topics/t/partitions/9", {"records": [{"value": None}]}, content_type=V1
    )
    as_v1.error(404, 40402)
    assert as_v1.content_type == V1
    route = await send(client, "GET", "/consumers/g/instances/c/nothing", content_type=None)
    assert (route.status, route.content_type) == (404, V2)


async def test_invalid_consumer_configuration_prefix(node: RunningBroker) -> None:
    client = node.client
    bad_reset = await send(client, "POST", "/consumers/g", {"name": "c", "auto.offset.reset": "sideways"})
    bad_reset.error(422, 42204, "Invalid consumer configuration: ")
    bad_format = await send(client, "POST", "/consumers/g", {"name": "c", "format": "xml"})
    bad_format.error(422, 42204, "Invalid consumer configuration: ")


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b"", "empty"),
        (b"{}", "records"),
        (b'{"records": []}', "records"),
        (b'{"records": [{"valur": "YQ=="}]}', "records[0]"),
        (b'{"records": [{"value": "YQ=="}, {"value": "YQ==", "partiton": 0}]}', "records[1]"),
    ],
)
async def test_malformed_produce_bodies_are_422_with_detail(
    node: RunningBroker, raw: bytes, detail: str
) -> None:
    client = node.client
    await produce_binary(client, "t", [b"first"])
    answer = await send(client, "POST", "/topics/t", raw=raw, content_type=BINARY_V2)
    message = answer.error(422, 422, "Invalid request format: ")
    assert detail in message
    end = await send(client, "GET", "/topics/t/partitions/0/offsets", content_type=None)
    assert end.body["end_offset"] == 1  # nothing was appended


async def test_a_misspelled_field_no_longer_stores_a_null(node: RunningBroker) -> None:
    client = node.client
    answer = await send(
        client, "POST", "/topics/t", {"records": [{"valur": b64(b"x")}]}, content_type=BINARY_V2
    )
    message = answer.error(422, 422)
    assert "'valur'" in message


@pytest.mark.parametrize("content_type", [BINARY_V2, "text/plain", "application/octet-stream", None])
async def test_an_oversized_body_is_413_whatever_its_type(
    node: RunningBroker, content_type: str | None
) -> None:
    body = json.dumps({"records": [{"value": b64(b"x" * 70_000)}]}).encode()
    answer = await send(node.client, "POST", "/topics/t", raw=body, content_type=content_type)
    answer.error(413, 41301)
    consumer = await send(node.client, "POST", "/consumers/g", raw=body, content_type=content_type)
    consumer.error(413, 41301)


@pytest.mark.parametrize(
    "content_type",
    [AVRO_V2, "application/vnd.kafka.protobuf.v2+json", "application/vnd.kafka.jsonschema.v2+json"],
)
async def test_schema_formats_need_a_schema_registry(node: RunningBroker, content_type: str) -> None:
    body = {"value_schema": '{"type": "string"}', "records": [{"value": "hello"}]}
    answer = await send(node.client, "POST", "/topics/t", body, content_type=content_type)
    answer.error(422, 42206, "Payload error. Schema Registry must be configured when using schemas.")
    assert answer.content_type == V2
