"""The controller's replication duties against the in-process metadata store: AlterPartition (every refusal,
a shrink and an expansion, requests made stale by a concurrent write) and the ISR rules of the reconcile pass
(new partitions, gone followers, ISR-only and unclean election). Leases expire by a manual clock; tests wait
on the controller's own progress, never on sleeps."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.service.cluster.test_controller import (
    INTERVAL_S,
    SESSION_MS,
    WAIT_S,
    Cluster,
    GatedStore,
    settings,
)
from tierlog.service.cluster.controller import Controller, decide_partition
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import Compare, KeyValue, Put
from tierlog.service.cluster.model import (
    AlterPartitionRequest,
    PartitionState,
    TopicAssignment,
    partition_key,
    topic_key,
)
from tierlog.service.metrics import Metrics
from tierlog.service.settings.config import build_settings
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    NotControllerError,
    UnknownPartitionError,
    UnknownTopicError,
)

UNCLEAN = "unclean.leader.election.enable"


async def seed(
    cluster: Cluster,
    replicas: Sequence[int],
    state: PartitionState,
    *,
    configs: dict[str, str] | None = None,
    topic: str = "t",
) -> None:
    """Write a one-partition topic and its state as replication would have left them."""
    assignment = TopicAssignment(topic, f"id-{topic}", (tuple(replicas),), dict(configs or {}))
    assert await cluster.store.commit(
        [Compare(topic_key(topic), 0)],
        [Put(topic_key(topic), assignment.encode()), Put(partition_key(topic, 0), state.encode())],
    )
    await cluster.settle()


async def led_by_2(cluster: Cluster, *, live: Sequence[int] = (2, 3, 4)) -> Controller:
    """Controller 1, brokers ``live``; topic t replicas (2, 3, 4) led by 2 with ISR (2, 3)."""
    controller = await cluster.controller(1)
    for broker in live:
        await cluster.broker(broker)
    await cluster.active()
    await seed(cluster, (2, 3, 4), PartitionState(2, 0, (2, 3), 0, 1))
    return controller


def ask(new_isr: Sequence[int], *, broker: int = 2, leader_epoch: int = 0, partition_epoch: int = 0,
        topic: str = "t", partition: int = 0) -> AlterPartitionRequest:  # fmt: skip
    return AlterPartitionRequest(topic, partition, broker, leader_epoch, partition_epoch, tuple(new_isr))


# ---- the decision rules, pure ------------------------------------------------------------------------------


def test_a_gone_follower_leaves_the_isr_and_the_leader_stays() -> None:
    current = PartitionState(2, 3, (2, 3, 4), 7, 1)
    assert decide_partition(current, (2, 3, 4), {2, 4}, controller_epoch=2) == (
        PartitionState(2, 3, (2, 4), 8, 2),
        None,
    )


def test_a_leader_is_elected_from_live_isr_members_only() -> None:
    current = PartitionState(2, 3, (2, 4), 7, 1)
    # 3 comes first in replica order and is live, but it is not in sync
    assert decide_partition(current, (2, 3, 4), {3, 4}, controller_epoch=2) == (
        PartitionState(4, 4, (4,), 8, 2),
        "failover",
    )


def test_unclean_election_takes_the_first_live_replica_only_when_no_isr_member_is_live() -> None:
    current = PartitionState(2, 3, (2,), 7, 1)
    assert decide_partition(current, (2, 3, 4), {4, 3}, controller_epoch=2) == (
        PartitionState(-1, 4, (2,), 8, 2),
        "offline",
    )
    assert decide_partition(current, (2, 3, 4), {4, 3}, controller_epoch=2, unclean=True) == (
        PartitionState(3, 4, (3,), 8, 2),
        "unclean",
    )
    leaderless = PartitionState(-1, 4, (2,), 8, 2)
    assert decide_partition(leaderless, (2, 3, 4), {4}, controller_epoch=2, unclean=True) == (
        PartitionState(4, 5, (4,), 9, 2),
        "unclean",
    )
    # a live ISR member is always preferred to an unclean choice
    in_sync = PartitionState(2, 3, (2, 4), 7, 1)
    assert decide_partition(in_sync, (2, 3, 4), {3, 4}, controller_epoch=2, unclean=True) == (
        PartitionState(4, 4, (4,), 8, 2),
        "failover",
    )
    # no live replica at all: nothing to elect
    assert decide_partition(leaderless, (2, 3, 4), set(), controller_epoch=2, unclean=True) is None


@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
    st.lists(st.tuples(st.frozensets(st.integers(1, 6)), st.booleans(), st.booleans()), max_size=25),
)
def test_decisions_with_unclean_election_keep_their_invariants(
    replicas: list[int], steps: list[tuple[frozenset[int], bool, bool]]
) -> None:
    """A leader is live and in the ISR (or -1); it comes from outside the previous ISR only by an unclean
    election, which happens only when no ISR member is live, and then leaves it alone in the ISR; a gone
    broker never stays in an ISR with a live member; a decision is final."""
    state: PartitionState | None = None
    for live, preferred, unclean in steps:
        decided = decide_partition(
            state, replicas, live, controller_epoch=3, preferred=preferred, unclean=unclean
        )
        if decided is None:
            continue
        new, reason = decided
        assert new.isr and set(new.isr) <= set(replicas)
        assert new.leader == -1 or (new.leader in live and new.leader in new.isr)
        if any(m in live for m in new.isr):
            assert set(new.isr) <= live
        if state is not None:
            assert new.leader_epoch == state.leader_epoch + (new.leader != state.leader)
            if new.leader not in (-1, state.leader) and new.leader not in state.isr:
                assert reason == "unclean" and unclean and new.isr == (new.leader,)
                assert not any(m in live for m in state.isr)
            if reason != "unclean":
                assert set(new.isr) <= set(state.isr)
        assert decide_partition(new, replicas, live, controller_epoch=3, unclean=unclean) is None
        state = new


# ---- AlterPartition: refusals ------------------------------------------------------------------------------


async def test_only_the_active_controller_alters_partitions(cluster: Cluster) -> None:
    await led_by_2(cluster)
    standby = await cluster.controller(5)
    await cluster.settle()
    with pytest.raises(
        NotControllerError, match=r"Broker 5 is not the active controller \(broker 1 is active\)"
    ):
        await standby.alter_partition(ask((2,)))
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2, 3), 0, 1)


async def test_unknown_topics_and_partitions_are_refused(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    with pytest.raises(UnknownTopicError):
        await controller.alter_partition(ask((2,), topic="nope"))
    with pytest.raises(UnknownPartitionError):
        await controller.alter_partition(ask((2,), partition=1))
    with pytest.raises(UnknownPartitionError):
        await controller.alter_partition(ask((2,), partition=-1))


async def test_a_request_from_a_broker_that_does_not_lead_at_that_epoch_is_fenced(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    revision = cluster.store.revision
    with pytest.raises(FencedLeaderEpochError, match="Broker 3 is not the leader of t-0"):
        await controller.alter_partition(ask((3,), broker=3))
    for epoch in (-1, 1):
        with pytest.raises(FencedLeaderEpochError, match=f"Leader epoch {epoch} of t-0"):
            await controller.alter_partition(ask((2,), leader_epoch=epoch))
    assert cluster.store.revision == revision


async def test_a_leader_whose_registration_is_gone_is_fenced(cluster: Cluster) -> None:
    """Its lease expired but the controller has not moved leadership yet (the request races the failover)."""
    gated = GatedStore(cluster.store)
    controller = await cluster.controller(1, store=gated)
    for broker in (2, 3):
        await cluster.broker(broker)
    await cluster.active()
    await seed(cluster, (2, 3), PartitionState(2, 0, (2, 3), 0, 1))
    gated.gate.clear()  # the failover decision waits at the gate
    gated.held.clear()
    await cluster.stop(2)
    async with asyncio.timeout(WAIT_S):
        await gated.held.wait()
    alter = asyncio.create_task(controller.alter_partition(ask((2,))))
    done, _ = await asyncio.wait([alter], timeout=WAIT_S)
    gated.gate.set()
    assert alter in done
    with pytest.raises(FencedLeaderEpochError, match="Broker 2 is not a live broker"):
        alter.result()
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)


async def test_a_stale_partition_epoch_is_refused(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    for epoch in (-1, 1):
        with pytest.raises(InvalidUpdateVersionError, match=f"Partition epoch {epoch} of t-0"):
            await controller.alter_partition(ask((2,), partition_epoch=epoch))


async def test_a_malformed_isr_is_refused(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    with pytest.raises(InvalidRequestError, match="empty"):
        await controller.alter_partition(ask(()))
    with pytest.raises(InvalidRequestError, match="twice"):
        await controller.alter_partition(ask((2, 3, 2)))
    with pytest.raises(InvalidRequestError, match="does not hold its leader 2"):
        await controller.alter_partition(ask((3,)))
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2, 3), 0, 1)


async def test_an_isr_may_only_add_live_replicas(cluster: Cluster) -> None:
    controller = await led_by_2(cluster, live=(2, 3, 9))
    with pytest.raises(IneligibleReplicaError, match=r"Brokers \[9\] cannot be in the ISR of t-0"):
        await controller.alter_partition(ask((2, 3, 9)))  # live, but not a replica
    with pytest.raises(IneligibleReplicaError, match="Broker 4 cannot join the ISR of t-0: it is not a live"):
        await controller.alter_partition(ask((2, 3, 4)))  # a replica, but not live
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2, 3), 0, 1)


# ---- AlterPartition: changes -------------------------------------------------------------------------------


async def test_a_leader_shrinks_and_expands_its_isr(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    shrunk = await controller.alter_partition(ask((2,)))
    assert shrunk == PartitionState(2, 0, (2,), 1, 1)
    assert await cluster.state("t", 0) == shrunk
    await cluster.settle()  # the reconcile pass leaves a leader's ISR change alone
    assert await cluster.state("t", 0) == shrunk

    grown = await controller.alter_partition(ask((2, 4, 3), partition_epoch=1))
    assert grown == PartitionState(2, 0, (2, 4, 3), 2, 1)
    assert await cluster.state("t", 0) == grown
    with pytest.raises(InvalidUpdateVersionError):  # a repeat of an applied request is stale
        await controller.alter_partition(ask((2, 4, 3), partition_epoch=1))


async def test_an_unchanged_isr_answers_the_current_state_without_writing(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    before = await cluster.store.get(partition_key("t", 0))
    assert await controller.alter_partition(ask((2, 3))) == PartitionState(2, 0, (2, 3), 0, 1)
    assert await cluster.store.get(partition_key("t", 0)) == before


class GetGate(GatedStore):
    """Holds the controller's first read of ``key`` (AlterPartition reads the registrations of the brokers
    it rests on after the partition state, so the state can change under it meanwhile)."""

    def __init__(self, inner: LocalMetadataStore, key: str) -> None:
        super().__init__(inner)
        self.key = key
        self.get_gate = asyncio.Event()
        self.get_held = asyncio.Event()

    async def get(self, key: str) -> KeyValue | None:
        if key == self.key and not self.get_held.is_set():
            self.get_held.set()
            await self.get_gate.wait()
        return await self.inner.get(key)


async def test_a_leader_change_during_a_request_fences_it(cluster: Cluster) -> None:
    gated = GetGate(cluster.store, "brokers/3")
    controller = await cluster.controller(1, store=gated)
    for broker in (2, 3):
        await cluster.broker(broker)
    await cluster.active()
    await seed(cluster, (2, 3), PartitionState(3, 4, (3, 2), 6, 1))  # 2, the preferred replica, follows

    alter = asyncio.create_task(
        controller.alter_partition(ask((3,), broker=3, leader_epoch=4, partition_epoch=6))
    )
    async with asyncio.timeout(WAIT_S):
        await gated.get_held.wait()  # the request has read the state it was made against
    await cluster.advance(INTERVAL_S * 1000)  # preferred-leader election moves leadership to 2 meanwhile
    assert await controller.tick()
    await cluster.settle()
    moved = PartitionState(2, 5, (3, 2), 7, 1)
    assert await cluster.state("t", 0) == moved
    gated.get_gate.set()
    with pytest.raises(FencedLeaderEpochError, match="Broker 3 is not the leader of t-0"):
        async with asyncio.timeout(WAIT_S):
            await alter
    assert await cluster.state("t", 0) == moved


async def test_a_follower_gone_during_a_request_makes_it_stale(cluster: Cluster) -> None:
    gated = GetGate(cluster.store, "brokers/4")
    controller = await cluster.controller(1, store=gated)
    for broker in (2, 3, 4):
        await cluster.broker(broker)
    await cluster.active()
    await seed(cluster, (2, 3, 4), PartitionState(2, 0, (2, 3), 0, 1))

    alter = asyncio.create_task(controller.alter_partition(ask((2, 3, 4))))
    async with asyncio.timeout(WAIT_S):
        await gated.get_held.wait()
    await cluster.crash(3)
    await cluster.advance(SESSION_MS)  # 3's lease expires: the controller drops it from the ISR
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 1, 1)
    gated.get_gate.set()
    with pytest.raises(InvalidUpdateVersionError, match="Partition epoch 0 of t-0"):
        async with asyncio.timeout(WAIT_S):
            await alter
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 1, 1)


async def test_a_controller_deposed_during_a_request_writes_nothing(cluster: Cluster) -> None:
    gated = GetGate(cluster.store, "brokers/2")
    controller = await cluster.controller(1, store=gated)
    for broker in (2, 3):
        await cluster.broker(broker)
    await cluster.active()
    await seed(cluster, (2, 3), PartitionState(2, 0, (2, 3), 0, 1))

    alter = asyncio.create_task(controller.alter_partition(ask((2,))))
    async with asyncio.timeout(WAIT_S):
        await gated.get_held.wait()
    await cluster.advance(SESSION_MS, keep=[2, 3])  # broker 1's lease, and the controller key, expire
    async with asyncio.timeout(WAIT_S):
        assert await controller.wait_for(lambda: not controller.active)
    gated.get_gate.set()
    with pytest.raises(NotControllerError, match="no controller is known to be active"):
        async with asyncio.timeout(WAIT_S):
            await alter
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2, 3), 0, 1)


async def test_concurrent_requests_of_one_epoch_apply_once(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    results = await asyncio.gather(
        controller.alter_partition(ask((2,))),
        controller.alter_partition(ask((2, 3, 4))),
        return_exceptions=True,
    )
    applied = [r for r in results if isinstance(r, PartitionState)]
    assert len(applied) == 1 and applied[0].partition_epoch == 1
    assert [type(r) for r in results if not isinstance(r, PartitionState)] == [InvalidUpdateVersionError]
    assert await cluster.state("t", 0) == applied[0]


# ---- the reconcile pass ----------------------------------------------------------------------------------


async def test_a_new_partition_has_its_live_replicas_in_sync(cluster: Cluster) -> None:
    await cluster.controller(1)
    for broker in (2, 3):
        await cluster.broker(broker)
    await cluster.create_topic("t", [[4, 3, 2], [4]])
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 0, (3, 2), 0, 1)
    assert await cluster.state("t", 1) == PartitionState(-1, 0, (4,), 0, 1)


async def test_a_gone_follower_leaves_the_isr(cluster: Cluster) -> None:
    controller = await led_by_2(cluster)
    await cluster.crash(3)
    await cluster.advance(SESSION_MS)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 1, 1)
    await cluster.broker(3)  # back, but only its leader's AlterPartition brings it into the ISR again
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 1, 1)
    assert await controller.alter_partition(ask((2, 3), partition_epoch=1)) == PartitionState(
        2, 0, (2, 3), 2, 1
    )


async def test_failover_elects_only_an_isr_member(cluster: Cluster) -> None:
    await cluster.controller(1)
    for broker in (2, 3, 4):
        await cluster.broker(broker)
    await seed(cluster, (2, 3, 4), PartitionState(2, 0, (2, 4), 0, 1))
    await cluster.stop(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(4, 1, (4,), 1, 1)  # not 3: it is not in sync


async def test_no_unclean_election_by_default(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    await cluster.controller(1)
    for broker in (2, 3):
        await cluster.broker(broker)
    await seed(cluster, (2, 3), PartitionState(2, 0, (2,), 0, 1))
    await cluster.stop(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(-1, 1, (2,), 1, 1)
    assert "unclean" not in caplog.text


async def test_unclean_election_when_the_topic_enables_it(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    await cluster.controller(1, metrics=metrics)
    for broker in (2, 3):
        await cluster.broker(broker)
    await seed(cluster, (2, 3), PartitionState(2, 0, (2,), 0, 1), configs={UNCLEAN: "true"})
    caplog.set_level(logging.WARNING, logger="tierlog.cluster.controller")
    await cluster.stop(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)
    assert "t-0 unclean leader election: leader 2 -> 3" in caplog.text and "may be lost" in caplog.text
    assert metrics.value("tierlog_leader_elections_total", reason="unclean") == 1
    await cluster.broker(2)  # the old leader returns as a follower: it is not in sync any more
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)


async def test_the_broker_default_enables_unclean_election_and_a_topic_may_refuse_it(
    cluster: Cluster,
) -> None:
    base = settings()
    default_on = build_settings(
        {"broker.session.timeout.ms": str(SESSION_MS), "unclean.leader.election.enable": "true"}
    )
    assert base.topic_defaults.get(UNCLEAN, "false") == "false"
    membership = await cluster.broker(1)
    controller = Controller(cluster.store, 1, membership, default_on, clock=cluster.clock)
    await controller.start()
    cluster.controllers[1] = controller
    for broker in (2, 3):
        await cluster.broker(broker)
    await seed(cluster, (2, 3), PartitionState(2, 0, (2,), 0, 1))
    await seed(cluster, (2, 3), PartitionState(2, 0, (2,), 0, 1), configs={UNCLEAN: "false"}, topic="u")
    await cluster.stop(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)
    assert await cluster.state("u", 0) == PartitionState(-1, 1, (2,), 1, 1)
