"""The Confluent v3 admin API against a real server on loopback: shapes, every route, every error code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.wire.errors import InvalidConfigError, NotFoundError

from .conftest import Node, StartNode, batch


async def test_clusters_and_brokers(node: Node) -> None:
    resp = await node.client.get("/v3/clusters")
    assert resp.status == 200
    body = await resp.json()
    assert body["kind"] == "KafkaClusterList"
    (cluster,) = body["data"]
    assert cluster["kind"] == "KafkaCluster"
    assert cluster["cluster_id"] == node.broker.cluster_id and len(cluster["cluster_id"]) == 22
    assert cluster["metadata"]["self"].endswith(f"/v3/clusters/{node.broker.cluster_id}")
    assert cluster["topics"]["related"].endswith("/topics")
    assert cluster["remote_uri"] == str(node.broker.data_dir / "remote")
    single = await (await node.client.get(node.v3)).json()
    assert single == cluster
    brokers = await (await node.client.get(f"{node.v3}/brokers")).json()
    assert [b["broker_id"] for b in brokers["data"]] == [0]
    assert (brokers["data"][0]["host"], brokers["data"][0]["port"]) == ("127.0.0.1", 8082)
    assert (await node.client.get(f"{node.v3}/brokers/0")).status == 200
    missing = await node.client.get(f"{node.v3}/brokers/7")
    assert missing.status == 404 and (await missing.json())["error_code"] == 404


async def test_unknown_cluster_is_404(node: Node) -> None:
    for method, path in [("GET", ""), ("GET", "/topics"), ("POST", "/topics"), ("DELETE", "/topics/x")]:
        resp = await node.client.request(method, f"/v3/clusters/nope{path}", json={"topic_name": "x"})
        assert resp.status == 404
        body = await resp.json()
        assert body["error_code"] == 404 and "nope" in body["message"]


async def test_create_describe_list_delete(node: Node) -> None:
    created = await node.create("orders", 3, retention_ms="3600000")
    assert created["kind"] == "KafkaTopic"
    assert created["topic_name"] == "orders"
    assert created["partitions_count"] == 3
    assert created["replication_factor"] == 1
    assert created["is_internal"] is False
    assert created["metadata"]["self"].endswith(f"{node.v3}/topics/orders")
    assert created["metadata"]["resource_name"] == f"crn:///kafka={node.broker.cluster_id}/topic=orders"
    described = await (await node.client.get(f"{node.v3}/topics/orders")).json()
    assert described == created
    listed = await (await node.client.get(f"{node.v3}/topics")).json()
    assert listed["kind"] == "KafkaTopicList"
    assert "orders" in [t["topic_name"] for t in listed["data"]]
    assert [d.name for d in sorted(node.broker.data_dir.glob("orders-*"))] == [
        "orders-0",
        "orders-1",
        "orders-2",
    ]

    resp = await node.client.delete(f"{node.v3}/topics/orders")
    assert resp.status == 204
    assert (await node.client.get(f"{node.v3}/topics/orders")).status == 404
    await node.broker.background.drain()
    assert not list(node.broker.data_dir.glob("orders-*"))


async def test_delete_then_recreate_starts_empty(node: Node) -> None:
    await node.create("reborn", 1)
    await node.broker.topic("reborn").partition(0).append(batch(b"a", b"b"))
    assert (await node.client.delete(f"{node.v3}/topics/reborn")).status == 204
    await node.create("reborn", 2)
    partition = node.broker.topic("reborn").partition(0)
    assert partition.log_end_offset == 0
    assert len(node.broker.topic("reborn").partitions) == 2


async def test_default_partition_count_and_validate_only(start_node: StartNode) -> None:
    node = await start_node(num_partitions="4")
    resp = await node.client.post(f"{node.v3}/topics", json={"topic_name": "dry", "validate_only": True})
    assert resp.status == 200
    assert (await resp.json())["partitions_count"] == 4
    assert (await node.client.get(f"{node.v3}/topics/dry")).status == 404
    resp = await node.client.post(f"{node.v3}/topics", json={"topic_name": "wet"})
    assert resp.status == 201 and (await resp.json())["partitions_count"] == 4


async def test_create_errors(node: Node) -> None:
    await node.create("taken", 1)
    await node.create("co.llide", 1)
    cases = [
        ({"topic_name": "taken"}, 400, 40002, "already exists"),
        ({"topic_name": "a/../../etc"}, 400, 40002, "illegal"),
        ({"topic_name": ".."}, 400, 40002, '".."'),
        ({"topic_name": "x" * 250}, 400, 40002, "249"),
        ({"topic_name": "__mine"}, 400, 40002, "reserved"),
        ({"topic_name": "co_llide"}, 400, 40002, "collides with existing topic: co.llide"),
        ({"topic_name": "ok", "partitions_count": 0}, 400, 40002, "partitions"),
        ({"topic_name": "ok", "replication_factor": 3}, 400, 40002, "Replication factor"),
        (
            {"topic_name": "ok", "configs": [{"name": "segment.bytes", "value": "5"}]},
            400,
            40002,
            "segment.bytes",
        ),
        ({"topic_name": "ok", "configs": [{"name": "no.such", "value": "5"}]}, 400, 40002, "no.such"),
        ({"topic_name": "ok", "partitions_count": "two"}, 400, 40001, "partitions_count"),
        ({"partitions_count": 1}, 400, 40001, "topic_name"),
    ]
    for body, status, code, text in cases:
        resp = await node.client.post(f"{node.v3}/topics", json=body)
        assert resp.status == status, body
        error = await resp.json()
        assert error["error_code"] == code, (body, error)
        assert text in error["message"], (body, error)
    assert [t for t in node.broker.topic_names() if not t.startswith("__")] == ["co.llide", "taken"]
    assert not (node.broker.data_dir.parent / "etc-0").exists()


async def test_malformed_bodies(node: Node) -> None:
    url = f"{node.v3}/topics"
    resp = await node.client.post(url, data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["error_code"] == 40001
    resp = await node.client.post(url, data=b"[1]", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json())["error_code"] == 40001
    resp = await node.client.post(url, data=b"topic_name=x", headers={"Content-Type": "text/plain"})
    assert resp.status == 415 and (await resp.json())["error_code"] == 41501


async def test_unknown_topic_and_partition(node: Node) -> None:
    for path in [
        "/topics/ghost",
        "/topics/ghost/configs",
        "/topics/ghost/partitions",
        "/topics/ghost/configs/x",
    ]:
        resp = await node.client.get(node.v3 + path)
        assert resp.status == 404
        assert (await resp.json())["error_code"] == 40401, path
    assert (await node.client.delete(f"{node.v3}/topics/ghost")).status == 404
    await node.create("two", 2)
    for p in ("2", "-1", "x"):
        resp = await node.client.get(f"{node.v3}/topics/two/partitions/{p}")
        assert resp.status == 404 and (await resp.json())["error_code"] == 40402, p


async def test_partitions_and_replicas(node: Node) -> None:
    await node.create("parts", 2)
    listed = await (await node.client.get(f"{node.v3}/topics/parts/partitions")).json()
    assert listed["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in listed["data"]] == [0, 1]
    one = await (await node.client.get(f"{node.v3}/topics/parts/partitions/1")).json()
    assert one["kind"] == "KafkaPartition" and one["topic_name"] == "parts"
    assert one["leader"]["related"].endswith("/topics/parts/partitions/1/replicas/0")
    replicas = await (await node.client.get(f"{node.v3}/topics/parts/partitions/1/replicas")).json()
    assert replicas["data"][0]["is_leader"] is True and replicas["data"][0]["broker_id"] == 0
    assert (await node.client.get(f"{node.v3}/topics/parts/partitions/1/replicas/0")).status == 200
    assert (await node.client.get(f"{node.v3}/topics/parts/partitions/1/replicas/3")).status == 404


async def test_increase_partition_count(node: Node) -> None:
    await node.create("grow", 1)
    resp = await node.client.patch(f"{node.v3}/topics/grow", json={"partitions_count": 3})
    assert resp.status == 200 and (await resp.json())["partitions_count"] == 3
    await node.broker.topic("grow").partition(2).append(batch(b"x"))
    resp = await node.client.patch(f"{node.v3}/topics/grow", json={"partitions_count": 2})
    assert resp.status == 400 and "higher than the requested" in (await resp.json())["message"]


async def test_configs_list_get_put_delete(node: Node) -> None:
    await node.create("cfg", 1, cleanup_policy="compact")
    listed = await (await node.client.get(f"{node.v3}/topics/cfg/configs")).json()
    assert listed["kind"] == "KafkaTopicConfigList"
    by_name = {c["name"]: c for c in listed["data"]}
    assert {"segment.bytes", "retention.ms", "remote.storage.enable", "compression.type"} <= set(by_name)
    assert by_name["cleanup.policy"]["value"] == "compact"
    assert by_name["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert by_name["cleanup.policy"]["is_default"] is False
    assert (
        by_name["retention.ms"] | {"value": "604800000", "is_default": True, "source": "DEFAULT_CONFIG"}
        == (by_name["retention.ms"])
    )
    assert by_name["retention.ms"]["synonyms"] == [
        {"name": "log.retention.ms", "value": "604800000", "source": "DEFAULT_CONFIG"}
    ]

    url = f"{node.v3}/topics/cfg/configs/retention.ms"
    assert (await node.client.put(url, json={"value": "1000"})).status == 204
    one = await (await node.client.get(url)).json()
    assert (
        one["kind"] == "KafkaTopicConfig"
        and one["value"] == "1000"
        and one["source"] == "DYNAMIC_TOPIC_CONFIG"
    )
    assert node.broker.topic("cfg").partition(0).log.config.retention_ms == 1000

    assert (await node.client.delete(url)).status == 204
    assert (await (await node.client.get(url)).json())["value"] == "604800000"
    assert node.broker.topic("cfg").partition(0).log.config.retention_ms == 604800000


async def test_config_errors_name_the_config(node: Node) -> None:
    await node.create("strict", 1)
    base = f"{node.v3}/topics/strict/configs"
    resp = await node.client.put(f"{base}/segment.bytes", json={"value": "ten"})
    assert resp.status == 400
    body = await resp.json()
    assert body["error_code"] == 40002 and "segment.bytes" in body["message"]
    resp = await node.client.put(f"{base}/local.retention.ms", json={"value": str(10**12)})
    assert resp.status == 400 and "local.retention.ms" in (await resp.json())["message"]
    resp = await node.client.get(f"{base}/no.such.config")
    assert resp.status == 404 and (await resp.json())["error_code"] == 404
    resp = await node.client.put(f"{base}/segment.bytes", json={})
    assert resp.status == 400 and (await resp.json())["error_code"] == 40001


async def test_alter_batch_is_all_or_nothing(node: Node) -> None:
    await node.create("batchy", 1, flush_ms="5000")
    url = f"{node.v3}/topics/batchy/configs:alter"
    bad = {"data": [{"name": "retention.ms", "value": "1000"}, {"name": "max.message.bytes", "value": "-5"}]}
    resp = await node.client.post(url, json=bad)
    assert resp.status == 400 and "max.message.bytes" in (await resp.json())["message"]
    assert node.broker.topic("batchy").configs()["retention.ms"] == "604800000"

    dry = {"data": [{"name": "retention.ms", "value": "1000"}], "validate_only": True}
    assert (await node.client.post(url, json=dry)).status == 204
    assert node.broker.topic("batchy").configs()["retention.ms"] == "604800000"

    good = {
        "data": [
            {"name": "retention.ms", "value": "1000"},
            {"name": "message.timestamp.type", "value": "LogAppendTime", "operation": "SET"},
            {"name": "flush.ms", "operation": "DELETE"},
        ]
    }
    assert (await node.client.post(url, json=good)).status == 204
    assert node.broker.topic("batchy").overrides == {
        "retention.ms": "1000",
        "message.timestamp.type": "LogAppendTime",
    }
    config = node.broker.topic("batchy").partition(0).log.config
    assert config.retention_ms == 1000 and config.log_append_time
    resp = await node.client.post(url, json={"data": [{"name": "retention.ms", "operation": "MERGE"}]})
    assert resp.status == 400 and (await resp.json())["error_code"] == 40001


async def test_unknown_route_and_method_are_json(node: Node, tmp_path: Path) -> None:
    resp = await node.client.get("/no/such/route")
    assert resp.status == 404
    assert (await resp.json())["error_code"] == 40400  # issue 12: five-digit codes for every error
    resp = await node.client.put("/v3/clusters")
    assert resp.status == 405
    assert (await resp.json())["error_code"] == 40501
    assert "GET" in resp.headers["Allow"]


async def test_auto_create_on_first_use(start_node: StartNode) -> None:
    node = await start_node(num_partitions="2")
    topic = await node.broker.ensure_topic("auto")
    assert len(topic.partitions) == 2
    assert await node.broker.ensure_topic("auto") is topic
    described = await (await node.client.get(f"{node.v3}/topics/auto")).json()
    assert described["partitions_count"] == 2


async def test_internal_topics_are_protected(node: Node) -> None:
    await node.broker.create_topic("__internal_state", 1, internal=True)
    described = await (await node.client.get(f"{node.v3}/topics/__internal_state")).json()
    assert described["is_internal"] is True
    resp = await node.client.delete(f"{node.v3}/topics/__internal_state")
    assert resp.status == 400 and "internal" in (await resp.json())["message"]
    await node.broker.delete_topic("__internal_state", internal=True)
    assert (await node.client.get(f"{node.v3}/topics/__internal_state")).status == 404


async def test_auto_create_disabled(start_node: StartNode) -> None:
    node = await start_node(auto_create_topics_enable="false")
    with pytest.raises(NotFoundError) as info:
        await node.broker.ensure_topic("manual")
    assert info.value.code == 40401
    assert "manual" not in node.broker.topic_names()


async def test_auto_create_rejects_illegal_names(node: Node) -> None:
    for name in ("../escape", "__internal", ""):
        with pytest.raises(InvalidConfigError):
            await node.broker.ensure_topic(name)
    assert not (node.broker.data_dir.parent / "escape-0").exists()
