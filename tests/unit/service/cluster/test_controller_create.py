"""A topic created on the active controller: one commit carries the topic and its partitions' initial states
(KRaft's CreateTopics batch), fenced as every controller write; elsewhere nothing is committed by this path
and :func:`commit_new_topic` commits the topic alone, for the controller to decide."""

from __future__ import annotations

import asyncio

from tests.unit.service.cluster.test_controller import WAIT_S, Cluster
from tierlog.service.cluster.controller import BATCH_PARTITIONS
from tierlog.service.cluster.metadata_store import Compare, Put
from tierlog.service.cluster.model import (
    CONTROLLER,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    partition_key,
    topic_key,
    topic_name_key,
)
from tierlog.service.cluster.topics import commit_new_topic
from tierlog.service.metrics import Metrics


def assignment(name: str, replicas: list[list[int]]) -> TopicAssignment:
    return TopicAssignment(name, f"id-{name}", tuple(tuple(r) for r in replicas))


def claim(topic: TopicAssignment) -> tuple[list[Compare], list[Put]]:
    key, name = topic_key(topic.name), topic_name_key(topic.name)
    return [Compare(key, 0), Compare(name, 0)], [Put(key, topic.encode()), Put(name, topic.name.encode())]


async def test_the_active_controller_commits_the_topic_and_its_states_at_one_revision(
    cluster: Cluster,
) -> None:
    metrics = Metrics()
    controller = await cluster.controller(1, metrics=metrics)
    await cluster.broker(2)
    assert await cluster.active() is controller
    await cluster.settle()
    before = cluster.store.revision

    topic = assignment("t", [[1, 2], [2, 1], [3, 1]])  # broker 3 is not live
    assert await commit_new_topic(cluster.store, topic, controller)

    assert cluster.store.revision == before + 1
    kv = await cluster.store.get(topic_key("t"))
    assert kv is not None and kv.mod_revision == before + 1
    assert await cluster.state("t", 0) == PartitionState(1, 0, (1, 2), 0, 1)
    assert await cluster.state("t", 1) == PartitionState(2, 0, (2, 1), 0, 1)
    assert await cluster.state("t", 2) == PartitionState(1, 0, (1,), 0, 1)
    assert metrics.value("tierlog_leader_elections_total", reason="new") == 3
    # the reconcile pass has nothing left to decide for it
    await cluster.settle()
    assert cluster.store.revision == before + 1


async def test_an_existing_topic_is_not_created_again(cluster: Cluster) -> None:
    controller = await cluster.controller(1)
    await cluster.active()
    assert await commit_new_topic(cluster.store, assignment("t", [[1]]), controller)
    await cluster.settle()
    state = await cluster.state("t", 0)
    assert not await commit_new_topic(cluster.store, assignment("t", [[1], [1]]), controller)
    assert await cluster.state("t", 0) == state
    assert await cluster.store.get(partition_key("t", 1)) is None


async def test_a_standby_controller_leaves_the_states_to_the_active_one(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.active()
    standby = await cluster.controller(2)
    await cluster.settle()
    topic = assignment("t", [[2, 1]])
    compares, ops = claim(topic)
    assert not await standby.commit_new_topic(topic, compares, ops)
    assert await cluster.store.get(topic_key("t")) is None
    assert await commit_new_topic(cluster.store, topic, standby)  # committed alone
    assert await cluster.store.get(partition_key("t", 0)) is None
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2, 1), 0, 1)


async def test_a_topic_too_large_for_one_commit_is_committed_alone(cluster: Cluster) -> None:
    controller = await cluster.controller(1)
    await cluster.active()
    topic = assignment("t", [[1]] * (BATCH_PARTITIONS + 1))
    compares, ops = claim(topic)
    assert not await controller.commit_new_topic(topic, compares, ops)
    assert await commit_new_topic(cluster.store, topic, controller)
    assert await cluster.store.get(partition_key("t", 0)) is None
    await cluster.settle()
    assert (await cluster.state("t", BATCH_PARTITIONS)).leader == 1


async def test_a_deposed_controller_commits_nothing_and_resigns(cluster: Cluster) -> None:
    controller = await cluster.controller(1)
    await cluster.active()
    await cluster.settle()
    # another controller's key lands; this one's view has not seen it when the create commits
    taken = ControllerRecord(2, 2).encode()
    assert await cluster.store.commit([], [Put(CONTROLLER, taken)])
    topic = assignment("t", [[1]])
    compares, ops = claim(topic)
    assert controller.active
    assert not await controller.commit_new_topic(topic, compares, ops)
    assert not controller.active
    assert await cluster.store.get(topic_key("t")) is None
    async with asyncio.timeout(WAIT_S):
        assert await controller.wait_for(lambda: controller.controller_id == 2)
