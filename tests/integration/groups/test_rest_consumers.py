"""The REST Proxy v2 consumer API against a real broker on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.integration.broker import Client
from tierlog.service.groups.state import CONSUMERS
from tierlog.tiering.log import ManualClock

from .conftest import StartBroker
from .helpers import BINARY, JSON, V2, call, create_topic, decoded, poll, produce, rest_consumer


async def test_confluent_quickstart_flow(start_broker: StartBroker) -> None:
    client = await start_broker(**{"num.partitions": "1"})
    await call(
        client,
        "POST",
        "/topics/jsontest",
        {"records": [{"value": {"foo": "bar"}}]},
        headers={"Content-Type": JSON},
    )
    answer = await call(
        client,
        "POST",
        "/consumers/my_json_consumer",
        {"name": "my_consumer_instance", "format": "json", "auto.offset.reset": "earliest"},
    )
    base = "/consumers/my_json_consumer/instances/my_consumer_instance"
    assert answer["base_uri"] == f"http://{client.host}:{client.port}{base}"
    await call(client, "POST", f"{base}/subscription", {"topics": ["jsontest"]}, status=204)
    assert await call(client, "GET", f"{base}/subscription") == {"topics": ["jsontest"]}
    records = await call(client, "GET", f"{base}/records", headers={"Accept": JSON})
    # since issue 12 a record also carries its timestamp, as Karapace's do
    assert [{k: v for k, v in r.items() if k != "timestamp"} for r in records] == [
        {"topic": "jsontest", "key": None, "value": {"foo": "bar"}, "partition": 0, "offset": 0}
    ]
    assert isinstance(records[0]["timestamp"], int)
    committed_now = await call(client, "POST", f"{base}/offsets", status=200)
    assert committed_now == [{"topic": "jsontest", "partition": 0, "consumed": 0, "committed": 1}]
    committed = await call(
        client, "GET", f"{base}/offsets", {"partitions": [{"topic": "jsontest", "partition": 0}]}
    )
    assert committed == {"offsets": [{"topic": "jsontest", "partition": 0, "offset": 1, "metadata": ""}]}
    await call(client, "DELETE", base, status=204)
    await call(client, "GET", f"{base}/subscription", status=404)


async def test_two_instances_split_the_partitions(client: Client) -> None:
    await create_topic(client, "t", 4)
    a = await rest_consumer(client, "g", "a")
    b = await rest_consumer(client, "g", "b")
    await call(client, "POST", f"{a}/subscription", {"topics": ["t"]}, status=204)
    await call(client, "POST", f"{b}/subscription", {"topics": ["t"]}, status=204)
    owned_a = {
        (p["topic"], p["partition"]) for p in (await call(client, "GET", f"{a}/assignments"))["partitions"]
    }
    owned_b = {
        (p["topic"], p["partition"]) for p in (await call(client, "GET", f"{b}/assignments"))["partitions"]
    }
    assert owned_a.isdisjoint(owned_b)
    assert owned_a | owned_b == {("t", p) for p in range(4)}
    assert len(owned_a) == len(owned_b) == 2


async def test_manual_assignment_seek_and_explicit_commit(client: Client) -> None:
    await create_topic(client, "t", 2)
    await produce(client, "t", 1, [f"v{i}" for i in range(5)])
    base = await rest_consumer(client, "g", "c", **{"auto.commit.enable": "false"})
    await call(
        client, "POST", f"{base}/assignments", {"partitions": [{"topic": "t", "partition": 1}]}, status=204
    )
    await call(
        client,
        "POST",
        f"{base}/positions",
        {"offsets": [{"topic": "t", "partition": 1, "offset": 3}]},
        status=204,
    )
    assert decoded(await poll(client, base)) == ["v3", "v4"]
    await call(
        client,
        "POST",
        f"{base}/positions/beginning",
        {"partitions": [{"topic": "t", "partition": 1}]},
        status=204,
    )
    assert decoded(await poll(client, base)) == ["v0", "v1", "v2", "v3", "v4"]
    await call(client, "POST", f"{base}/offsets", {"offsets": [{"topic": "t", "partition": 1, "offset": 2}]})
    got = await call(client, "GET", f"{base}/offsets", {"partitions": [{"topic": "t", "partition": 1}]})
    assert got["offsets"][0]["offset"] == 3  # the last consumed record's offset + 1, as REST proxies store it
    await call(
        client, "POST", f"{base}/positions/end", {"partitions": [{"topic": "t", "partition": 1}]}, status=204
    )
    assert await poll(client, base) == []


async def test_records_wait_for_a_produce(client: Client) -> None:
    await create_topic(client, "t", 1)
    base = await rest_consumer(client, "g", "c")
    await call(
        client, "POST", f"{base}/assignments", {"partitions": [{"topic": "t", "partition": 0}]}, status=204
    )
    assert await poll(client, base) == []  # position set at the end (latest)
    waiting = client.get(f"{base}/records?timeout=30000", headers={"Accept": BINARY})
    fetch = asyncio.ensure_future(waiting)
    await produce(client, "t", 0, ["late"])
    response = await fetch
    assert response.status == 200
    assert decoded(await response.json(content_type=None)) == ["late"]


async def test_a_commit_is_answered_while_a_long_poll_of_the_same_instance_waits(client: Client) -> None:
    """Issue 34: an instance's commit never queues behind its own pending fetch."""
    await create_topic(client, "t", 1)
    await produce(client, "t", 0, ["first"])
    base = await rest_consumer(client, "g", "c", **{"auto.offset.reset": "earliest"})
    await call(client, "POST", f"{base}/subscription", {"topics": ["t"]}, status=204)
    assert decoded(await poll(client, base)) == ["first"]
    manager = client.app[CONSUMERS]
    polling = asyncio.Event()
    real_poll = manager.poll

    async def observed_poll(*args: Any, **kwargs: Any) -> Any:
        polling.set()
        return await real_poll(*args, **kwargs)

    manager.poll = observed_poll  # type: ignore[method-assign]
    fetch = asyncio.ensure_future(client.get(f"{base}/records?timeout=60000", headers={"Accept": BINARY}))
    await polling.wait()  # the long poll is inside the broker, waiting for records
    answer = await call(
        client, "POST", f"{base}/offsets", {"offsets": [{"topic": "t", "partition": 0, "offset": 0}]}
    )
    assert answer == [{"topic": "t", "partition": 0, "consumed": 0, "committed": 1}]
    assert not fetch.done()
    stored = await call(client, "GET", f"{base}/offsets", {"partitions": [{"topic": "t", "partition": 0}]})
    assert stored["offsets"][0]["offset"] == 1
    assert not fetch.done()
    await produce(client, "t", 0, ["second"])
    response = await fetch
    assert decoded(await response.json(content_type=None)) == ["second"]


async def test_errors_as_rest_proxies_give_them(client: Client) -> None:
    await create_topic(client, "t", 1)
    missing = await call(client, "GET", "/consumers/g/instances/nope/subscription", status=404)
    assert missing["error_code"] == 40403
    base = await rest_consumer(client, "g", "c")
    dup = await call(client, "POST", "/consumers/g", {"name": "c"}, status=409)
    assert dup["error_code"] == 40902
    await call(
        client, "POST", f"{base}/assignments", {"partitions": [{"topic": "t", "partition": 0}]}, status=204
    )
    both = await call(client, "POST", f"{base}/subscription", {"topics": ["t"]}, status=409)
    assert both["error_code"] == 40903
    wrong = await call(client, "GET", f"{base}/records", headers={"Accept": JSON}, status=406)
    assert wrong["error_code"] == 40601
    bad = await call(client, "POST", "/consumers/g", {"name": "x", "format": "avro"}, status=422)
    assert bad["error_code"] == 42204
    response = await client.post(f"{base}/subscription", data="{", headers={"Content-Type": V2})
    assert response.status == 400
    assert (await response.json())["error_code"] == 40001
    response = await client.post(
        f"{base}/subscription", data=json.dumps({"topics": ["t"]}), headers={"Content-Type": "text/plain"}
    )
    assert response.status == 415


async def test_auto_commit_is_at_least_once_across_a_crash(client: Client, clock: ManualClock) -> None:
    await create_topic(client, "t", 1)
    await produce(client, "t", 0, [f"r{i}" for i in range(10)])
    first = await rest_consumer(client, "g", "first", **{"auto.offset.reset": "earliest"})
    await call(client, "POST", f"{first}/subscription", {"topics": ["t"]}, status=204)
    seen = decoded(await poll(client, first))
    assert seen == [f"r{i}" for i in range(10)]
    clock.advance(5_001)  # past auto.commit.interval.ms
    assert await poll(client, first) == []  # asking again acknowledges, and commits, the first ten
    await produce(client, "t", 0, [f"r{i}" for i in range(10, 15)])
    unacknowledged = decoded(await poll(client, first))
    assert unacknowledged == [f"r{i}" for i in range(10, 15)]
    # the consumer crashes: it never asks again and its instance expires without a final commit
    clock.advance(300_001)
    await client.app[CONSUMERS].tick()
    await call(client, "GET", f"{first}/subscription", status=404)
    second = await rest_consumer(client, "g", "second", **{"auto.offset.reset": "earliest"})
    await call(client, "POST", f"{second}/subscription", {"topics": ["t"]}, status=204)
    redelivered = decoded(await poll(client, second))
    assert redelivered == unacknowledged  # nothing skipped, nothing acknowledged delivered again


async def test_two_groups_read_independently(client: Client) -> None:
    await create_topic(client, "t", 1)
    await produce(client, "t", 0, ["a", "b", "c"])
    one = await rest_consumer(client, "g1", "c", **{"auto.offset.reset": "earliest"})
    two = await rest_consumer(client, "g2", "c", **{"auto.offset.reset": "earliest"})
    for base in (one, two):
        await call(client, "POST", f"{base}/subscription", {"topics": ["t"]}, status=204)
    assert decoded(await poll(client, one)) == ["a", "b", "c"]
    await call(client, "POST", f"{one}/offsets")
    assert decoded(await poll(client, two)) == ["a", "b", "c"]


async def test_committed_offsets_survive_a_restart(start_broker: StartBroker) -> None:
    client = await start_broker()
    await create_topic(client, "t", 2)
    base = await rest_consumer(client, "g", "c")
    await call(
        client,
        "POST",
        f"{base}/assignments",
        {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]},
        status=204,
    )
    await call(
        client,
        "POST",
        f"{base}/offsets",
        {
            "offsets": [
                {"topic": "t", "partition": 0, "offset": 41},
                {"topic": "t", "partition": 1, "offset": 6},
            ]
        },
    )
    await client.close()
    client = await start_broker()
    base = await rest_consumer(client, "g", "c")
    got = await call(
        client,
        "GET",
        f"{base}/offsets",
        {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]},
    )
    assert [o["offset"] for o in got["offsets"]] == [42, 7]
