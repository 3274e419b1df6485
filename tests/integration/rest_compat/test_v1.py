"""The v1 API of Confluent's REST Proxy, served from the same machinery as v2: produce with v1 types,
consumer instances with ``smallest``/``largest``, and the v1 read route
``GET /consumers/{group}/instances/{instance}/topics/{topic}``."""

from __future__ import annotations

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.rest_compat.helpers import BINARY_V1, JSON_V1, V1, b64, produce_binary, send, unb64


async def test_v1_produce_answers_in_v1(node: RunningBroker) -> None:
    body = {"records": [{"key": b64(b"k"), "value": b64(b"v")}, {"value": b64(b"w"), "partition": 0}]}
    answer = await send(node.client, "POST", "/topics/t", body, content_type=BINARY_V1, accept=V1)
    assert (answer.status, answer.content_type) == (200, V1)
    assert [(o["partition"], o["offset"]) for o in answer.body["offsets"]] == [(0, 0), (0, 1)]
    to_partition = await send(
        node.client,
        "POST",
        "/topics/t/partitions/0",
        {"records": [{"value": {"a": 1}}]},
        content_type=JSON_V1,
    )
    assert to_partition.body["offsets"][0]["offset"] == 2


@pytest.mark.parametrize(("reset", "expected"), [("smallest", [b"old", b"new"]), ("largest", [b"new"])])
async def test_v1_consumer_reads_a_topic(node: RunningBroker, reset: str, expected: list[bytes]) -> None:
    client = node.client
    await produce_binary(client, "t", [b"old"])
    created = await send(
        client,
        "POST",
        "/consumers/g",
        {"id": "c", "format": "binary", "auto.offset.reset": reset},
        content_type=V1,
    )
    assert (created.status, created.content_type, created.body["instance_id"]) == (200, V1, "c")
    base = "/consumers/g/instances/c"
    first = await send(client, "GET", f"{base}/topics/t?timeout=0", content_type=None, accept=BINARY_V1)
    assert (first.status, first.content_type) == (200, BINARY_V1)
    await produce_binary(client, "t", [b"new"])
    second = await send(client, "GET", f"{base}/topics/t?timeout=0", content_type=None, accept=BINARY_V1)
    values = [unb64(r["value"]) for r in first.body + second.body]
    assert values == expected
    committed = await send(client, "POST", f"{base}/offsets", content_type=V1, accept=V1)
    assert (committed.status, committed.content_type) == (200, V1)
    assert committed.body == [{"topic": "t", "partition": 0, "consumed": 1, "committed": 2}]
    assert (await send(client, "DELETE", base, content_type=None)).status == 204


async def test_v1_read_of_an_unknown_topic_is_40401(node: RunningBroker) -> None:
    client = node.client
    await send(client, "POST", "/consumers/g", {"name": "c"}, content_type=V1)
    answer = await send(
        client, "GET", "/consumers/g/instances/c/topics/nope", content_type=None, accept=BINARY_V1
    )
    answer.error(404, 40401, "Topic not found.")
    assert answer.content_type == BINARY_V1


async def test_v1_reads_only_the_named_topic(node: RunningBroker) -> None:
    client = node.client
    await produce_binary(client, "a", [b"from-a"])
    await produce_binary(client, "b", [b"from-b"])
    await send(
        client, "POST", "/consumers/g", {"name": "c", "auto.offset.reset": "smallest"}, content_type=V1
    )
    base = "/consumers/g/instances/c"
    from_a = await send(client, "GET", f"{base}/topics/a?timeout=0", content_type=None, accept=BINARY_V1)
    from_b = await send(client, "GET", f"{base}/topics/b?timeout=0", content_type=None, accept=BINARY_V1)
    assert [unb64(r["value"]) for r in from_a.body] == [b"from-a"]
    assert [unb64(r["value"]) for r in from_b.body] == [b"from-b"]
    subscription = await send(client, "GET", f"{base}/subscription", content_type=None)
    assert sorted(subscription.body["topics"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        (BINARY_V1, BINARY_V1),
        (V1, BINARY_V1),
        ("*/*", BINARY_V1),
        ("application/vnd.kafka.binary.v2+json", "application/vnd.kafka.binary.v2+json"),
    ],
)
async def test_v1_partition_read_of_messages(node: RunningBroker, accept: str, content_type: str) -> None:
    client = node.client
    await produce_binary(client, "t", [b"m0", b"m1", b"m2", b"m3"])
    one = await send(
        client, "GET", "/topics/t/partitions/0/messages?offset=1", content_type=None, accept=accept
    )
    assert (one.status, one.content_type) == (200, content_type)
    assert [(r["offset"], unb64(r["value"])) for r in one.body] == [(1, b"m1")]
    some = await send(
        client, "GET", "/topics/t/partitions/0/messages?offset=1&count=2", content_type=None, accept=accept
    )
    assert [r["offset"] for r in some.body] == [1, 2]
    at_end = await send(
        client, "GET", "/topics/t/partitions/0/messages?offset=4&count=5", content_type=None, accept=accept
    )
    assert (at_end.status, at_end.body) == (200, [])


async def test_v1_partition_read_as_json_and_its_errors(node: RunningBroker) -> None:
    client = node.client
    produced = await send(
        client, "POST", "/topics/t", {"records": [{"value": {"n": 1}}]}, content_type=JSON_V1
    )
    assert produced.status == 200
    read = await send(
        client, "GET", "/topics/t/partitions/0/messages?offset=0", content_type=None, accept=JSON_V1
    )
    assert (read.content_type, [r["value"] for r in read.body]) == (JSON_V1, [{"n": 1}])
    (await send(client, "GET", "/topics/t/partitions/3/messages?offset=0", content_type=None)).error(
        404, 40402, "Partition not found."
    )
    (await send(client, "GET", "/topics/t/partitions/0/messages?offset=9", content_type=None)).error(
        416, 41601
    )
    (await send(client, "GET", "/topics/t/partitions/0/messages", content_type=None)).error(400, 40001)
