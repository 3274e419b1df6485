"""Kafka's topic name rule at every entry point (v3 create, v2 paths, native paths, auto-create), on a real
broker: illegal names are refused with a 400 and leave nothing behind (no topic, no directory)."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest
from yarl import URL

from tests.integration.broker import Brokers, Client, RunningBroker
from tests.integration.broker_data.helpers import BATCHES, BINARY, b64, expect_error, produce
from tierlog.wire.errors import InvalidConfigError

ILLEGAL = ["evil\n", "a b", "x" * 250, ".", "..", "tab\tname", "tópico", "a/b"]


def url(path_template: str, name: str) -> URL:
    """``path_template`` with ``{}`` replaced by ``name`` percent-encoded, sent exactly as written (so
    ``.`` and ``..`` reach the server as a path segment instead of being folded away by the client)."""
    return URL(path_template.format(quote(name, safe="").replace(".", "%2E")), encoded=True)


async def cluster_path(client: Client) -> str:
    body = await (await client.get("/v3/clusters")).json()
    return f"/v3/clusters/{body['data'][0]['cluster_id']}"


@pytest.fixture
async def running(brokers: Brokers) -> RunningBroker:
    return await brokers.start({"num.partitions": "1", "auto.create.topics.enable": "true"}, wait_groups=True)


def entries(running: RunningBroker) -> list[str]:
    """The data directory's subdirectories (partition directories and anything made by mistake)."""
    return sorted(e.name for e in os.scandir(running.broker.data_dir) if e.is_dir())


async def user_topics(client: Client) -> list[str]:
    names: list[str] = await (await client.get("/topics")).json(content_type=None)
    return names


@pytest.mark.parametrize("name", ILLEGAL)
async def test_v3_create_refuses_illegal_names(running: RunningBroker, name: str) -> None:
    client, before = running.client, entries(running)
    v3 = await cluster_path(client)
    response = await client.post(f"{v3}/topics", json={"topic_name": name, "partitions_count": 1})
    body = await expect_error(response, 400, 40002)
    assert "Topic name" in body["message"]
    listed = await (await client.get(f"{v3}/topics")).json()
    assert [t["topic_name"] for t in listed["data"] if not t["topic_name"].startswith("__")] == []
    assert entries(running) == before


@pytest.mark.parametrize("name", ILLEGAL)
async def test_v2_produce_does_not_auto_create_illegal_names(running: RunningBroker, name: str) -> None:
    client, before = running.client, entries(running)
    for template in ("/topics/{}", "/topics/{}/partitions/0"):
        response = await client.post(
            url(template, name),
            data='{"records":[{"value":null}]}',
            headers={"Content-Type": BINARY},
        )
        body = await expect_error(response, 400, 40001)
        assert "Topic name" in body["message"]
    assert await user_topics(client) == []
    assert entries(running) == before


@pytest.mark.parametrize("name", ILLEGAL)
async def test_v2_and_native_reads_refuse_illegal_names(running: RunningBroker, name: str) -> None:
    client = running.client
    for template in (
        "/topics/{}",
        "/topics/{}/partitions",
        "/topics/{}/partitions/0/offsets",
        "/native/v1/topics/{}",
        "/native/v1/topics/{}/partitions/0/offsets",
    ):
        await expect_error(await client.get(url(template, name)), 400, 40001)


@pytest.mark.parametrize("name", ILLEGAL)
async def test_native_produce_does_not_auto_create_illegal_names(running: RunningBroker, name: str) -> None:
    client, before = running.client, entries(running)
    response = await client.post(
        url("/native/v1/topics/{}/partitions/0/batches", name),
        data=b"",
        headers={"Content-Type": BATCHES},
    )
    await expect_error(response, 400, 40001)
    assert await user_topics(client) == []
    assert entries(running) == before


@pytest.mark.parametrize("name", ILLEGAL)
async def test_auto_create_refuses_illegal_names(running: RunningBroker, name: str) -> None:
    before = entries(running)
    with pytest.raises(InvalidConfigError, match="Topic name"):
        await running.broker.ensure_topic(name)
    assert name not in [t.name for t in running.broker.topics()]
    assert entries(running) == before


async def test_legal_edge_names_are_accepted(running: RunningBroker) -> None:
    client = running.client
    for name in ("x" * 249, "...", "a.b_c-D9"):
        await produce(client, f"/topics/{name}", [{"value": b64(b"v")}])
        assert (await client.get(f"/topics/{name}")).status == 200


async def test_a_249_character_topic_can_be_deleted(running: RunningBroker) -> None:
    """``<topic>-<p>.<uuid>-delete`` would be over 255 bytes: the topic part is cut, as Kafka cuts it."""
    client, name = running.client, "t" * 249
    v3 = await cluster_path(client)
    response = await client.post(f"{v3}/topics", json={"topic_name": name, "partitions_count": 2})
    assert response.status == 201, await response.text()
    assert f"{name}-1" in entries(running)
    response = await client.delete(f"{v3}/topics/{name}")
    assert response.status == 204, await response.text()
    assert not [e for e in entries(running) if e.startswith(f"{name}-")]
    assert (await client.get(f"/topics/{name}")).status == 404
