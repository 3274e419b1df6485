"""Rules the OpenAPI document states and the broker enforces, found by schemathesis (#34): internal topics
are not written, grown or deleted by clients; group ids and REST consumer waits are bounded."""

from __future__ import annotations

from tierlog.service.groups.state import GROUPS_READY

from .conftest import StartNode, batch

V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
BINARY = {"Content-Type": "application/vnd.kafka.binary.v2+json"}


async def test_internal_topics_are_not_produced_to_or_grown(start_node: StartNode) -> None:
    node = await start_node()
    await node.app[GROUPS_READY].wait()
    created = await node.client.post("/consumers/g", json={}, headers=V2)  # creates __consumer_offsets
    assert created.status == 200, await created.text()
    rest = await node.client.post(
        "/topics/__consumer_offsets", json={"records": [{"value": "aGk="}]}, headers=BINARY
    )
    assert rest.status == 400
    assert (await rest.json())["error_code"] == 40002
    native = await node.client.post(
        "/native/v1/topics/__consumer_offsets/partitions/0/batches",
        data=batch(b"forged"),
        headers={"Content-Type": "application/vnd.tierlog.batches"},
    )
    assert native.status == 400
    assert (await native.json())["error_code"] == 40002
    grown = await node.client.patch(f"{node.v3}/topics/__consumer_offsets", json={"partitions_count": 5})
    assert grown.status == 400
    assert "internal" in (await grown.json())["message"]
    described = await node.client.get(f"{node.v3}/topics/__consumer_offsets")
    assert (await described.json())["partitions_count"] == 1


async def test_group_ids_and_consumer_waits_are_bounded(start_node: StartNode) -> None:
    node = await start_node()
    await node.app[GROUPS_READY].wait()
    too_long = await node.client.post("/consumers/" + "g" * 256, json={}, headers=V2)
    assert too_long.status == 422
    assert (await too_long.json())["error_code"] == 42201
    slow = await node.client.post("/consumers/g", json={"consumer.request.timeout.ms": 300_001}, headers=V2)
    assert slow.status == 422
    assert (await slow.json())["error_code"] == 42204
    spaced = await node.client.post("/consumers/g", json={"fetch.min.bytes": " 5"}, headers=V2)
    assert spaced.status == 422
    created = await node.client.post(
        "/consumers/g", json={"name": "c", "consumer.request.timeout.ms": "10"}, headers=V2
    )
    assert created.status == 200, await created.text()
    records = "/consumers/g/instances/c/records"
    accept = {"Accept": "application/vnd.kafka.binary.v2+json"}
    over = await node.client.get(records, params={"timeout": "300001"}, headers=accept)
    assert over.status == 400
    assert (await node.client.get(records, params={"timeout": "+5"}, headers=accept)).status == 400
    # a null offsets list commits everything returned, as the document says
    committed = await node.client.post("/consumers/g/instances/c/offsets", json={"offsets": None}, headers=V2)
    assert committed.status == 200, await committed.text()
