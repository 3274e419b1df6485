"""Broker state survives restarts; stray and half-deleted directories are dealt with at start; a data
directory of the single-broker layout before the local metadata store (``tierlog-state.json``) is imported."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tierlog.service.cluster.model import TopicAssignment
from tierlog.service.cluster.topics import commit_new_topic
from tierlog.service.topics.data_dir import CLEAN_SHUTDOWN_MARKER, CLUSTER_METADATA_FILE, STATE_FILE
from tierlog.tiering.codec.batch import iter_records
from tierlog.tiering.log import LogConfig, PartitionLog
from tierlog.wire.errors import InvalidConfigError, UnavailableError

from .conftest import Node, StartNode, batch


async def test_topics_configs_and_data_survive_restart(start_node: StartNode, data_dir: Path) -> None:
    first = await start_node()
    cluster_id = first.broker.cluster_id
    await first.create("keep", 2, retention_ms="123456", cleanup_policy="delete,compact")
    await first.broker.topic("keep").partition(1).append(batch(b"one", b"two"))
    await first.client.put(f"{first.v3}/topics/keep/configs/segment.bytes", json={"value": "4096"})
    await first.create("gone", 1)
    assert (await first.client.delete(f"{first.v3}/topics/gone")).status == 204
    await first.client.close()
    assert (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    assert (data_dir / "keep-1" / ".tierlog_cleanshutdown").exists()

    second = await start_node()
    assert second.broker.cluster_id == cluster_id
    assert second.broker.clean_start
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    topic = await (await second.client.get(f"/v3/clusters/{cluster_id}/topics/keep")).json()
    assert topic["partitions_count"] == 2
    configs = second.broker.topic("keep").configs()
    assert configs["retention.ms"] == "123456"
    assert configs["cleanup.policy"] == "delete,compact"
    assert configs["segment.bytes"] == "4096"
    partition = second.broker.topic("keep").partition(1)
    assert partition.log.config.segment_bytes == 4096
    assert [r.value for _, r in iter_records((await partition.read(0, 1 << 20)).data)] == [b"one", b"two"]
    assert (await second.client.get(f"/v3/clusters/{cluster_id}/topics/gone")).status == 404


async def test_topics_live_in_the_local_metadata_file(node: Node, data_dir: Path) -> None:
    await node.create("atomic", 3)
    doc = json.loads((data_dir / CLUSTER_METADATA_FILE).read_text())
    keys = {item["key"]: base64.b64decode(item["value"]) for item in doc["keys"]}
    assert json.loads(keys["topics/atomic"])["replicas"] == [[0], [0], [0]]
    assert keys["cluster/id"].decode() == node.broker.cluster_id
    assert not (data_dir / f"{CLUSTER_METADATA_FILE}.tmp").exists()
    assert not (data_dir / STATE_FILE).exists()


async def test_a_create_writes_the_topic_its_states_and_its_id_once(node: Node, data_dir: Path) -> None:
    # this broker is the controller: the topic and its partitions' states are one commit (one file write),
    # and the topic id is in tierlog-cluster.json before the partitions open
    await node.create("once", 2)
    doc = json.loads((data_dir / CLUSTER_METADATA_FILE).read_text())
    items = {item["key"]: item for item in doc["keys"]}
    keys = ("topics/once", "partitions/once/0", "partitions/once/1")
    written = {items[key]["mod_revision"] for key in keys}
    assert len(written) == 1
    topic_id = json.loads(base64.b64decode(items["topics/once"]["value"]))["topic_id"]
    assert json.loads((data_dir / "tierlog-cluster.json").read_text())["topics"]["once"] == topic_id


async def test_a_create_that_loses_takes_its_recorded_id_back(node: Node, data_dir: Path) -> None:
    # the topic is committed by someone else just before this broker's cache sees it: the create's own
    # commit loses, and tierlog-cluster.json ends with the winner's id, never the loser's
    cluster = node.broker.cluster
    winner = TopicAssignment("raced", "winner-id", ((0,),))
    assert await commit_new_topic(cluster.store, winner)
    with pytest.raises(InvalidConfigError, match="already exists"):
        await cluster.topics.create("raced", 1, {}, internal=False, replication_factor=None)
    assert cluster.topic_ids.topics.get("raced") in (None, "winner-id")

    def opened() -> bool:
        topic = node.broker.local_topics.get("raced")
        return topic is not None and topic.local(0) is not None

    assert await cluster.wait_for(opened, 30)
    assert json.loads((data_dir / "tierlog-cluster.json").read_text())["topics"]["raced"] == "winner-id"


def write_old_data_dir(data_dir: Path) -> dict[str, Any]:
    """A data directory as a broker without ``metadata.uri`` wrote it before it became a cluster of one:
    ``tierlog-state.json`` (as ``save_state`` wrote it) and partition directories holding records."""
    data_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "version": 1,
        "cluster_id": "OldClusterId0123456789",
        "broker_id": 0,
        "next_producer_id_block": 3000,
        "topics": {
            "keep": {"topic_id": "a" * 32, "partitions": 2, "configs": {"retention.ms": "123456"}},
            "plain": {"topic_id": "b" * 32, "partitions": 1, "configs": {}},
        },
    }
    (data_dir / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    for name, index, values in (("keep", 1, [b"one", b"two"]), ("plain", 0, [b"three"])):
        log = PartitionLog.open(data_dir / f"{name}-{index}", LogConfig(), topic=name, partition=index)
        log.append(batch(*values))
        log.close()
    return state


async def test_an_old_data_directory_is_imported_once(start_node: StartNode, data_dir: Path) -> None:
    state = write_old_data_dir(data_dir)
    first = await start_node()
    broker = first.broker
    assert broker.cluster_id == state["cluster_id"]
    assert broker.broker_id == 0
    assert broker.topic_names() == ["keep", "plain"]
    assert broker.topic("keep").topic_id == "a" * 32
    assert broker.topic("keep").configs()["retention.ms"] == "123456"
    partition = broker.topic("keep").partition(1)
    assert [r.value for _, r in iter_records((await partition.read(0, 1 << 20)).data)] == [b"one", b"two"]
    assert broker.topic("plain").partition(0).high_watermark == 1
    assert not (data_dir / STATE_FILE).exists()
    assert (data_dir / f"{STATE_FILE}.imported").exists()
    assert not await asyncio.to_thread(lambda: list(data_dir.glob("*-stray")))
    producer = await (await first.client.post("/native/v1/producers", json={})).json()
    assert producer["producer_id"] >= 3000
    await first.client.close()

    second = await start_node()  # the store holds it all now: the renamed file is not read again
    assert second.broker.cluster_id == state["cluster_id"]
    assert second.broker.topic_names() == ["keep", "plain"]
    keep = second.broker.topic("keep").partition(1)
    assert [r.value for _, r in iter_records((await keep.read(0, 1 << 20)).data)] == [b"one", b"two"]


async def test_an_import_stopped_before_the_rename_is_finished(start_node: StartNode, data_dir: Path) -> None:
    state = write_old_data_dir(data_dir)
    first = await start_node()
    await first.client.close()
    (data_dir / f"{STATE_FILE}.imported").rename(data_dir / STATE_FILE)  # as if stopped before the rename
    second = await start_node()
    assert second.broker.cluster_id == state["cluster_id"]
    assert second.broker.topic_names() == ["keep", "plain"]
    assert (data_dir / f"{STATE_FILE}.imported").exists()


def write_torn_state(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / STATE_FILE).write_text('{"version": 1, "cluster_id": "x"}')


async def test_a_torn_state_file_fails_start_naming_it(start_node: StartNode, data_dir: Path) -> None:
    write_torn_state(data_dir)
    node = await start_node(wait=False)
    with pytest.raises(UnavailableError, match=f"{STATE_FILE} is not a valid broker state"):
        await asyncio.wait_for(node.broker.wait_ready(), 30)
    assert (data_dir / STATE_FILE).exists()


async def test_unclean_start_is_reported(start_node: StartNode, data_dir: Path) -> None:
    first = await start_node()
    await first.client.close()
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    second = await start_node()
    assert not second.broker.clean_start


async def test_stray_and_deleted_dirs_at_start(start_node: StartNode, data_dir: Path) -> None:
    first = await start_node()
    await first.create("real", 1)
    await first.client.close()
    (data_dir / "orphan-0").mkdir()
    (data_dir / "orphan-0" / "00000000000000000000.log").write_bytes(b"")
    leftover = data_dir / f"old-0.{'a' * 32}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")

    second = await start_node()
    await second.broker.background.drain()
    assert not leftover.exists()
    assert not (data_dir / "orphan-0").exists()
    strays = await asyncio.to_thread(lambda: list(data_dir.glob("orphan-0.*-stray")))
    assert len(strays) == 1 and (strays[0] / "00000000000000000000.log").exists()
    assert "real" in second.broker.topic_names() and "orphan" not in second.broker.topic_names()
    assert (data_dir / CLUSTER_METADATA_FILE).is_file()  # the sweep leaves the metadata file alone
    await second.create("orphan", 1)
    assert second.broker.topic("orphan").partition(0).log_end_offset == 0
