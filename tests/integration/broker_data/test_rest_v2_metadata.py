"""REST v2 metadata routes and their content negotiation, on a real broker."""

from __future__ import annotations

import pytest

from tests.integration.broker import Client
from tests.integration.broker_data.helpers import BINARY, V2, b64, expect_error, produce


async def test_brokers(client: Client) -> None:
    response = await client.get("/brokers")
    assert response.status == 200
    assert response.content_type == V2
    assert await response.json(content_type=None) == {"brokers": [0]}


async def test_topics_and_topic(client: Client) -> None:
    assert await (await client.get("/topics")).json(content_type=None) == []
    await produce(client, "/topics/orders", [{"value": b64(b"x")}])
    await produce(client, "/topics/audit", [{"value": b64(b"y")}])
    assert await (await client.get("/topics")).json(content_type=None) == ["audit", "orders"]

    topic = await (await client.get("/topics/orders")).json(content_type=None)
    assert topic["name"] == "orders"
    assert topic["configs"]["cleanup.policy"] == "delete"
    assert int(topic["configs"]["max.message.bytes"]) > 0
    assert topic["partitions"] == [
        {"partition": i, "leader": 0, "replicas": [{"broker": 0, "leader": True, "in_sync": True}]}
        for i in range(3)
    ]


async def test_partitions(client: Client) -> None:
    await produce(client, "/topics/t/partitions/1", [{"value": b64(b"a")}, {"value": b64(b"b")}])
    partitions = await (await client.get("/topics/t/partitions")).json(content_type=None)
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    one = await (await client.get("/topics/t/partitions/1")).json(content_type=None)
    assert one == {"partition": 1, "leader": 0, "replicas": [{"broker": 0, "leader": True, "in_sync": True}]}
    offsets = await (await client.get("/topics/t/partitions/1/offsets")).json(content_type=None)
    assert offsets == {"beginning_offset": 0, "end_offset": 2}


@pytest.mark.parametrize(
    "path", ["/topics/missing", "/topics/missing/partitions", "/topics/missing/partitions/0"]
)
async def test_unknown_topic_is_40401(client: Client, path: str) -> None:
    await expect_error(await client.get(path), 404, 40401)


@pytest.mark.parametrize("partition", ["3", "99", "-1", "x", "1.0"])
async def test_unknown_partition_is_40402(client: Client, partition: str) -> None:
    await produce(client, "/topics/t", [{"value": b64(b"a")}])
    await expect_error(await client.get(f"/topics/t/partitions/{partition}"), 404, 40402)


async def test_control_characters_in_topic_names_are_400(client: Client) -> None:
    await expect_error(await client.get("/topics/bad%01name"), 400, 40001)
    response = await client.post(
        "/topics/bad%7Fname", data='{"records":[{"value":null}]}', headers={"Content-Type": BINARY}
    )
    await expect_error(response, 400, 40001)
    assert await (await client.get("/topics")).json(content_type=None) == []


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/json", "application/json"),
        ("application/vnd.kafka+json", "application/vnd.kafka+json"),
        ("application/vnd.kafka.v2+json, application/json;q=0.9", V2),
        ("application/json, application/vnd.kafka.v2+json;q=0.1", "application/json"),
        ("*/*", V2),
    ],
)
async def test_accept_negotiation(client: Client, accept: str, content_type: str) -> None:
    response = await client.get("/topics", headers={"Accept": accept})
    assert response.status == 200
    assert response.content_type == content_type


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "application/json;q=0"])
async def test_unacceptable_accept_is_406(client: Client, accept: str) -> None:
    await expect_error(await client.get("/brokers", headers={"Accept": accept}), 406, 40601)
