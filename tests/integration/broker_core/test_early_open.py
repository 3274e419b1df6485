"""A create opens this broker's new partition directories while its commit is written; the reconcile takes
those logs, and the logs of a create that did not commit are set aside, never left holding a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.service.cluster.model import TopicAssignment
from tierlog.service.cluster.topics import commit_new_topic
from tierlog.tiering.log import LogConfig, PartitionLog
from tierlog.wire.errors import InvalidConfigError

from .conftest import Node, batch


def dirs_of(data_dir: Path, topic: str) -> list[str]:
    """The names in the data directory made for ``topic`` (``topic-N``, ``topic-N-delete``...)."""
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith(f"{topic}-"))


async def test_the_reconcile_takes_the_logs_a_create_opened(node: Node, data_dir: Path) -> None:
    await node.create("early", 2)
    cluster = node.broker.cluster
    assert cluster.early.pending == []
    topic = node.broker.topic("early")
    for index in (0, 1):
        partition = topic.partition(index)
        assert partition.path == data_dir / f"early-{index}"
        assert [(e.epoch, e.start_offset) for e in partition.log.epochs.entries()] == [(0, 0)]
        assert partition.leader_epoch == 0
        info = await partition.append(batch(b"x"))
        assert info.last_offset == 0


async def test_logs_opened_for_a_create_that_did_not_commit_are_set_aside(node: Node, data_dir: Path) -> None:
    early = node.broker.cluster.early
    early.start("lost", "id-1", [0, 1], LogConfig(), leads=frozenset({0}))
    assert early.pending == [("lost", 0), ("lost", 1)]
    await early.discard("lost", "id-1")
    assert early.pending == []
    assert dirs_of(data_dir, "lost") == []
    PartitionLog.open(data_dir / "lost-0", LogConfig()).close()  # no lock left behind


async def test_a_log_opened_for_another_id_or_config_is_not_taken(node: Node, data_dir: Path) -> None:
    early = node.broker.cluster.early
    early.start("other", "id-1", [0], LogConfig(), leads=frozenset())
    assert await early.take("other", "id-2", 0, LogConfig()) is None
    assert early.pending == [] and not (data_dir / "other-0").exists()
    early.start("other", "id-1", [0], LogConfig(), leads=frozenset())
    assert await early.take("other", "id-1", 0, LogConfig(segment_bytes=1 << 20)) is None
    assert early.pending == [] and not (data_dir / "other-0").exists()
    early.start("other", "id-1", [0], LogConfig(), leads=frozenset({0}))
    taken = await early.take("other", "id-1", 0, LogConfig())
    assert taken is not None and taken.path == data_dir / "other-0"
    assert [(e.epoch, e.start_offset) for e in taken.epochs.entries()] == [(0, 0)]
    taken.close()


async def test_an_existing_directory_is_not_opened_early(node: Node, data_dir: Path) -> None:
    kept = PartitionLog.open(data_dir / "held-0", LogConfig())
    kept.append(batch(b"old"))
    kept.close()
    early = node.broker.cluster.early
    early.start("held", "id-1", [0], LogConfig(), leads=frozenset())
    assert await early.take("held", "id-1", 0, LogConfig()) is None
    assert (data_dir / "held-0").exists()


async def test_a_create_that_loses_leaves_the_winner_its_directory(node: Node, data_dir: Path) -> None:
    # committed elsewhere before this broker's cache saw it: the create's early log is set aside and the
    # winner's partition opens in the directory of the name
    cluster = node.broker.cluster
    assert await commit_new_topic(cluster.store, TopicAssignment("raced", "winner-id", ((0,),)))
    with pytest.raises(InvalidConfigError, match="already exists"):
        await cluster.topics.create("raced", 1, {}, internal=False, replication_factor=None)
    assert cluster.early.pending == []

    def opened() -> bool:
        topic = node.broker.local_topics.get("raced")
        return topic is not None and topic.topic_id == "winner-id" and topic.local(0) is not None

    assert await cluster.wait_for(opened, 30)
    assert dirs_of(data_dir, "raced") == ["raced-0"]
