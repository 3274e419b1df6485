"""The controller and membership on a real etcd: brokers (a Membership and a Controller each, with their own
etcd client) in this process, a 2 s session. A broker that stops without revoking its lease is gone when
the lease expires in etcd, and another takes over with a higher epoch. Waits are on the controllers' own
progress, bounded by deadlines; nothing sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import pytest

from tierlog.service.cluster.controller import Controller
from tierlog.service.cluster.etcd_store import EtcdMetadataStore
from tierlog.service.cluster.membership import Membership
from tierlog.service.cluster.metadata_store import Compare, Put
from tierlog.service.cluster.model import (
    CONTROLLER,
    AlterPartitionRequest,
    BrokerRegistration,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    partition_key,
    topic_key,
)
from tierlog.service.settings.config import build_settings, parse_metadata_uri
from tierlog.wire.errors import FencedLeaderEpochError, IneligibleReplicaError, InvalidUpdateVersionError

pytestmark = pytest.mark.integration

SESSION_MS = 2000
HEARTBEAT_MS = 500
DEADLINE_S = 30
SETTINGS = build_settings(
    {"broker.session.timeout.ms": str(SESSION_MS), "broker.heartbeat.interval.ms": str(HEARTBEAT_MS)}
)


@dataclass
class Node:
    broker_id: int
    store: EtcdMetadataStore
    membership: Membership
    controller: Controller | None

    async def crash(self) -> None:
        """Stop without revoking the lease: etcd deletes the registration when the lease expires."""
        if self.controller is not None:
            await self.controller.close()
        await self.membership.close(revoke=False)
        await self.store.close()

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.close()
        await self.membership.close()
        await self.store.close()


class Cluster:
    def __init__(self, uri: str) -> None:
        self.uri = parse_metadata_uri(uri)
        self.nodes: dict[int, Node] = {}

    async def start(self, broker_id: int, *, controller: bool = True) -> Node:
        store = EtcdMetadataStore(self.uri)
        await store.start()
        registration = BrokerRegistration(broker_id, f"http://127.0.0.1:{9000 + broker_id}", None, "i")
        membership = Membership(
            store, registration, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS
        )
        await membership.start()
        node = Node(broker_id, store, membership, None)
        if controller:
            node.controller = Controller(store, broker_id, membership, SETTINGS)
            await node.controller.start()
        self.nodes[broker_id] = node
        return node

    def controllers(self) -> list[Controller]:
        return [n.controller for n in self.nodes.values() if n.controller is not None]

    async def first(self, check: Callable[[Controller], bool]) -> Controller:
        """The first controller for which ``check`` holds, re-checked after each of their passes."""
        async with asyncio.timeout(DEADLINE_S):
            while True:
                for controller in self.controllers():
                    if check(controller):
                        return controller
                waits = [asyncio.ensure_future(c.wait_for(bound(check, c))) for c in self.controllers()]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for wait in waits:
                        wait.cancel()
                    await asyncio.gather(*waits, return_exceptions=True)

    async def active(self) -> Controller:
        """The one active controller, once there is one."""
        winner = await self.first(lambda c: c.active)
        assert [c for c in self.controllers() if c.active] == [winner]
        return winner

    async def settle(self, store: EtcdMetadataStore) -> int:
        """Wait until every controller has done all that etcd's current revision calls for; the revision."""
        _, revision = await store.range(CONTROLLER)
        async with asyncio.timeout(DEADLINE_S):
            for controller in self.controllers():
                assert await controller.wait_reconciled(revision)
        return revision

    async def state(self, store: EtcdMetadataStore, topic: str, partition: int) -> PartitionState:
        kv = await store.get(partition_key(topic, partition))
        assert kv is not None
        return PartitionState.decode(kv.key, kv.value)

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.stop()


def bound(check: Callable[[Controller], bool], controller: Controller) -> Callable[[], bool]:
    return lambda: check(controller)


def beyond(revision: int) -> Callable[[Controller], bool]:
    return lambda c: c.reconciled_revision > revision


@pytest.fixture
async def cluster(etcd_uri: str) -> AsyncIterator[Cluster]:
    cluster = Cluster(etcd_uri)
    yield cluster
    await cluster.close()


async def wait_state(
    cluster: Cluster, store: EtcdMetadataStore, topic: str, leaders: Sequence[int]
) -> list[PartitionState]:
    """Wait (bounded) until the active controller has written these leaders, then the states."""
    async with asyncio.timeout(DEADLINE_S):
        while True:
            await cluster.active()
            revision = await cluster.settle(store)
            states = [await cluster.state(store, topic, p) for p in range(len(leaders))]
            if [s.leader for s in states] == list(leaders):
                return states
            await cluster.first(beyond(revision))  # the next change in etcd


async def test_a_crashed_controller_is_replaced_with_a_higher_epoch(cluster: Cluster) -> None:
    for broker_id in (1, 2, 3):
        await cluster.start(broker_id)
    first = await cluster.active()
    old_epoch = first.epoch
    record = await cluster.nodes[2].store.get(CONTROLLER)
    assert record is not None
    assert ControllerRecord.decode(record.key, record.value) == ControllerRecord(first.broker_id, old_epoch)

    await cluster.nodes.pop(first.broker_id).crash()
    second = await cluster.active()
    assert second.broker_id != first.broker_id
    assert second.epoch == old_epoch + 1
    for controller in cluster.controllers():
        async with asyncio.timeout(DEADLINE_S):
            assert await controller.wait_for(bound(lambda c: c.epoch == old_epoch + 1, controller))
    # The old controller's fence no longer holds: a write under it is refused by etcd.
    survivor = cluster.nodes[second.broker_id].store
    assert await survivor.commit([Compare(CONTROLLER, record.mod_revision)], [Put("probe", b"x")]) is None

    await cluster.nodes.pop(second.broker_id).stop()  # a clean stop revokes the lease: at once
    third = await cluster.active()
    assert third.epoch == old_epoch + 2


async def test_leadership_follows_brokers_on_etcd(cluster: Cluster) -> None:
    await cluster.start(1)
    await cluster.start(2, controller=False)
    store = cluster.nodes[1].store
    assignment = TopicAssignment("t", "id-t", ((2, 3), (3, 2)))
    assert await store.commit([Compare(topic_key("t"), 0)], [Put(topic_key("t"), assignment.encode())])
    states = await wait_state(cluster, store, "t", [2, 2])  # 3 is not live: 2 leads both, alone in sync
    assert [(s.leader_epoch, s.isr) for s in states] == [(0, (2,)), (0, (2,))]
    await cluster.start(3, controller=False)  # live, but not in sync: only a leader's ISR change adds it

    await cluster.nodes.pop(2).crash()  # gone when its lease expires
    states = await wait_state(cluster, store, "t", [-1, -1])
    assert [(s.leader_epoch, s.isr) for s in states] == [(1, (2,))] * 2  # the last in-sync replica is kept

    await cluster.start(2, controller=False)
    states = await wait_state(cluster, store, "t", [2, 2])
    assert [s.leader_epoch for s in states] == [2, 2]


async def test_a_new_controller_fails_over_the_partitions_of_the_old_one(cluster: Cluster) -> None:
    await cluster.start(1)
    first = await cluster.active()
    await cluster.start(2)
    store = cluster.nodes[2].store
    # Seeded as replication will leave it: both replicas in sync, the controller's broker leading.
    assignment = TopicAssignment("t", "id-t", ((1, 2),))
    seeded = PartitionState(1, 0, (1, 2), 0, first.epoch)
    assert await store.commit(
        [Compare(topic_key("t"), 0)],
        [Put(topic_key("t"), assignment.encode()), Put(partition_key("t", 0), seeded.encode())],
    )
    await cluster.settle(store)
    await cluster.nodes.pop(1).crash()
    states = await wait_state(cluster, store, "t", [2])
    second = await cluster.active()
    assert second.broker_id == 2
    assert states[0] == PartitionState(2, 1, (2,), 1, first.epoch + 1)


async def test_alter_partition_on_etcd(cluster: Cluster) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker, controller=broker == 1)
    controller = await cluster.active()
    store = cluster.nodes[1].store
    assignment = TopicAssignment("t", "id-t", ((2, 3),))
    assert await store.commit([Compare(topic_key("t"), 0)], [Put(topic_key("t"), assignment.encode())])
    (state,) = await wait_state(cluster, store, "t", [2])
    assert state == PartitionState(2, 0, (2, 3), 0, controller.epoch)

    shrunk = await controller.alter_partition(AlterPartitionRequest("t", 0, 2, 0, 0, (2,)))
    assert shrunk == PartitionState(2, 0, (2,), 1, controller.epoch)
    assert await cluster.state(store, "t", 0) == shrunk
    with pytest.raises(InvalidUpdateVersionError):
        await controller.alter_partition(AlterPartitionRequest("t", 0, 2, 0, 0, (2, 3)))
    with pytest.raises(FencedLeaderEpochError):
        await controller.alter_partition(AlterPartitionRequest("t", 0, 3, 0, 1, (3,)))
    grown = await controller.alter_partition(AlterPartitionRequest("t", 0, 2, 0, 1, (2, 3)))
    assert grown == PartitionState(2, 0, (2, 3), 2, controller.epoch)

    await cluster.nodes.pop(3).crash()  # a gone follower leaves the ISR when its lease expires in etcd
    async with asyncio.timeout(DEADLINE_S):
        while (state := await cluster.state(store, "t", 0)).isr != (2,):
            await cluster.first(beyond(await cluster.settle(store)))
    assert state == PartitionState(2, 0, (2,), 3, controller.epoch)
    with pytest.raises(IneligibleReplicaError):
        await controller.alter_partition(AlterPartitionRequest("t", 0, 2, 0, 3, (2, 3)))
