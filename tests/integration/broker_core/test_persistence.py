"""Broker state survives restarts; stray and half-deleted directories are dealt with at start."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tierlog.service.topics.data_dir import CLEAN_SHUTDOWN_MARKER, STATE_FILE
from tierlog.tiering.codec.batch import iter_records

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


async def test_state_file_is_replaced_atomically(node: Node, data_dir: Path) -> None:
    await node.create("atomic", 3)
    state = json.loads((data_dir / STATE_FILE).read_text())
    assert state["topics"]["atomic"]["partitions"] == 3
    assert state["cluster_id"] == node.broker.cluster_id
    assert not (data_dir / f"{STATE_FILE}.tmp").exists()


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
    await second.create("orphan", 1)
    assert second.broker.topic("orphan").partition(0).log_end_offset == 0
