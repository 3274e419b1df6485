"""The controller against the in-process metadata store: election and epochs, fencing of a deposed controller,
and every leadership rule. Leases expire by a manual clock; tests wait on the controller's own progress
(``wait_reconciled``, ``wait_for``), never on sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.cluster.controller import Controller, decide_partition
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.membership import Membership
from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    KeyValue,
    MetadataStore,
    Op,
    Put,
    WatchEvent,
)
from tierlog.service.cluster.model import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    BrokerRegistration,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    partition_key,
    partition_prefix,
    topic_key,
)
from tierlog.service.metrics import Metrics
from tierlog.service.settings.config import Settings, build_settings
from tierlog.tiering.log.clock import ManualClock

SESSION_MS = 6000
NEVER_MS = 3_600_000
INTERVAL_S = 300
WAIT_S = 30


def settings(*, rebalance: bool = True) -> Settings:
    return build_settings(
        {
            "broker.session.timeout.ms": str(SESSION_MS),
            "auto.leader.rebalance.enable": str(rebalance).lower(),
            "leader.imbalance.check.interval.seconds": str(INTERVAL_S),
        }
    )


# ---- the decision rules, pure ------------------------------------------------------------------------------


def test_a_new_partition_is_led_by_its_first_live_replica_and_its_live_replicas_are_in_sync() -> None:
    decided = decide_partition(None, (3, 1, 2), {1, 2}, controller_epoch=4)
    assert decided == (PartitionState(1, 0, (1, 2), 0, 4), "new")


def test_a_new_partition_without_live_replicas_is_led_by_the_first_replica_to_come() -> None:
    # an empty log is in sync everywhere: every replica is in the ISR until one comes
    assert decide_partition(None, (3, 1), set(), controller_epoch=4) == (
        PartitionState(-1, 0, (3, 1), 0, 4),
        None,
    )
    assert decide_partition(PartitionState(-1, 0, (3, 1), 0, 4), (3, 1), {1}, controller_epoch=4) == (
        PartitionState(1, 1, (1,), 1, 4),
        "recovered",
    )


def test_failover_picks_the_first_live_isr_member_in_replica_order() -> None:
    current = PartitionState(1, 3, (2, 1, 3), 7, 1)
    decided = decide_partition(current, (1, 3, 2), {2, 3}, controller_epoch=2)
    assert decided == (PartitionState(3, 4, (2, 3), 8, 2), "failover")


def test_the_last_isr_member_is_kept() -> None:
    current = PartitionState(1, 3, (1,), 7, 1)
    assert decide_partition(current, (1, 2), {2}, controller_epoch=2) == (
        PartitionState(-1, 4, (1,), 8, 2),
        "offline",
    )
    assert decide_partition(PartitionState(-1, 4, (1,), 8, 2), (1, 2), {2}, controller_epoch=2) is None


def test_an_unchanged_partition_is_not_written() -> None:
    current = PartitionState(2, 3, (2, 1), 7, 1)
    assert decide_partition(current, (1, 2), {1, 2}, controller_epoch=5) is None
    assert decide_partition(current, (1, 2), {2}, controller_epoch=5) == (
        PartitionState(2, 3, (2,), 8, 5),
        None,
    )


def test_a_restarted_broker_is_fenced_first_then_returns() -> None:
    # broker 1 led in epoch 3 and came back as a new incarnation before any controller saw it go
    alone = PartitionState(1, 3, (1,), 7, 1)
    fenced = decide_partition(alone, (1, 2), {1, 2}, controller_epoch=2, restarted={1})
    assert fenced == (PartitionState(-1, 4, (1,), 8, 2), "offline")
    # on the state just written it is no longer newer: it leads again, one more epoch up
    assert decide_partition(fenced[0], (1, 2), {1, 2}, controller_epoch=2) == (
        PartitionState(1, 5, (1,), 9, 2),
        "recovered",
    )
    # with an in-sync follower, the lead moves to it and the restarted broker leaves the ISR
    shared = PartitionState(1, 3, (1, 2), 7, 1)
    assert decide_partition(shared, (1, 2), {1, 2}, controller_epoch=2, restarted={1}) == (
        PartitionState(2, 4, (2,), 8, 2),
        "failover",
    )
    # a restarted follower only leaves the ISR; the leader keeps its epoch
    assert decide_partition(shared, (1, 2), {1, 2}, controller_epoch=2, restarted={2}) == (
        PartitionState(1, 3, (1,), 8, 2),
        None,
    )
    # a leaderless partition waiting for it: fencing changes nothing, so it counts as returned
    waiting = PartitionState(-1, 4, (1,), 8, 2)
    assert decide_partition(waiting, (1, 2), {1, 2}, controller_epoch=2, restarted={1}) == (
        PartitionState(1, 5, (1,), 9, 2),
        "recovered",
    )
    # a broker that is not a replica, or not live, changes nothing
    assert decide_partition(shared, (1, 2), {1, 2}, controller_epoch=2, restarted={3}) is None


def test_preferred_election_needs_the_preferred_replica_live_and_in_sync() -> None:
    current = PartitionState(2, 3, (2, 1), 7, 1)
    assert decide_partition(current, (1, 2), {1, 2}, controller_epoch=5, preferred=True) == (
        PartitionState(1, 4, (2, 1), 8, 5),
        "preferred",
    )
    not_in_sync = PartitionState(2, 3, (2,), 7, 1)
    assert decide_partition(not_in_sync, (1, 2), {1, 2}, controller_epoch=5, preferred=True) is None


@st.composite
def histories(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[frozenset[int], bool]]]:
    replicas = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)))
    steps = draw(
        st.lists(st.tuples(st.frozensets(st.integers(1, 6)), st.booleans()), min_size=1, max_size=25)
    )
    return replicas, steps


@given(histories())
def test_decisions_keep_the_leadership_invariants(
    history: tuple[tuple[int, ...], list[tuple[frozenset[int], bool]]],
) -> None:
    """Whatever brokers come and go: the leader is live and in sync or -1, only an ISR member is ever
    elected (no unclean election), the ISR is never empty and only shrinks to live members, epochs move as
    documented, a partition with a live ISR member is never left leaderless, and a decision is final."""
    replicas, steps = history
    state: PartitionState | None = None
    for live, preferred in steps:
        decided = decide_partition(state, replicas, live, controller_epoch=7, preferred=preferred)
        if decided is None:
            assert state is not None
            assert state.leader != -1 or not any(m in live for m in state.isr)
            continue
        new, reason = decided
        assert new.isr and set(new.isr) <= set(replicas)
        assert new.leader == -1 or (new.leader in live and new.leader in new.isr)
        assert new.controller_epoch == 7
        if state is None:
            assert (new.leader_epoch, new.partition_epoch) == (0, 0)
            assert (new.leader == -1) == (not live & set(replicas))
        else:
            assert new.leader == -1 or new.leader == state.leader or new.leader in state.isr
            assert set(new.isr) <= set(state.isr)
            assert new.partition_epoch == state.partition_epoch + 1
            assert new.leader_epoch == state.leader_epoch + (new.leader != state.leader)
            assert (reason is not None) == (new.leader != state.leader)
            if any(m in live for m in state.isr):
                assert new.leader != -1
        assert decide_partition(new, replicas, live, controller_epoch=7) is None
        state = new


# ---- a cluster of memberships and controllers on one store ------------------------------------------------


class Cluster:
    def __init__(self, store: LocalMetadataStore, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock
        self.members: dict[int, Membership] = {}
        self.controllers: dict[int, Controller] = {}

    async def broker(self, broker_id: int) -> Membership:
        registration = BrokerRegistration(broker_id, f"http://127.0.0.1:{9000 + broker_id}", None, "i")
        membership = Membership(
            self.store, registration, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=NEVER_MS
        )
        await membership.start()
        self.members[broker_id] = membership
        return membership

    async def controller(
        self,
        broker_id: int,
        *,
        store: MetadataStore | None = None,
        rebalance: bool = True,
        metrics: Metrics | None = None,
    ) -> Controller:
        membership = await self.broker(broker_id)
        controller = Controller(
            store or self.store,
            broker_id,
            membership,
            settings(rebalance=rebalance),
            metrics=metrics,
            clock=self.clock,
        )
        await controller.start()
        self.controllers[broker_id] = controller
        return controller

    async def crash(self, broker_id: int) -> None:
        """Stop a broker without revoking its lease (its registration stays until the lease expires)."""
        if broker_id in self.controllers:
            await self.controllers.pop(broker_id).close()
        await self.members.pop(broker_id).close(revoke=False)

    async def stop(self, broker_id: int) -> None:
        if broker_id in self.controllers:
            await self.controllers.pop(broker_id).close()
        await self.members.pop(broker_id).close()

    async def advance(self, ms: int, *, keep: Sequence[int] | None = None) -> None:
        """Move the clock by ``ms`` while the brokers in ``keep`` (default: all) keep their leases alive;
        the others' leases expire once ``ms`` reaches the session timeout."""
        keepers = [self.members[b] for b in (self.members if keep is None else keep)]
        while ms > 0:
            step = min(ms, SESSION_MS // 2)
            self.clock.advance(step)
            for membership in keepers:
                await membership.heartbeat()
            ms -= step
        self.store.expire_leases()

    async def settle(self) -> int:
        """Wait until every controller has done everything the store's current revision calls for."""
        revision = self.store.revision
        async with asyncio.timeout(WAIT_S):
            for controller in self.controllers.values():
                assert await controller.wait_reconciled(revision)
        return revision

    async def active(self) -> Controller:
        async with asyncio.timeout(WAIT_S):
            while True:
                await self.settle()
                winners = [c for c in self.controllers.values() if c.active]
                if winners:
                    assert len(winners) == 1
                    return winners[0]

    async def create_topic(self, name: str, replicas: Sequence[Sequence[int]]) -> None:
        assignment = TopicAssignment(name, f"id-{name}", tuple(tuple(r) for r in replicas))
        assert await self.store.commit(
            [Compare(topic_key(name), 0)], [Put(topic_key(name), assignment.encode())]
        )

    async def state(self, topic: str, partition: int) -> PartitionState:
        kv = await self.store.get(partition_key(topic, partition))
        assert kv is not None
        return PartitionState.decode(kv.key, kv.value)

    async def close(self) -> None:
        for controller in self.controllers.values():
            await controller.close()
        for membership in self.members.values():
            await membership.close()


async def controller_record(store: LocalMetadataStore) -> ControllerRecord | None:
    kv = await store.get(CONTROLLER)
    return None if kv is None else ControllerRecord.decode(kv.key, kv.value)


# ---- election ------------------------------------------------------------------------------------------


async def test_one_controller_is_elected_and_everyone_knows_it(cluster: Cluster) -> None:
    metrics = Metrics()
    first = await cluster.controller(1, metrics=metrics)
    second = await cluster.controller(2)
    winner = await cluster.active()
    assert winner is first  # the only candidate when it started
    assert (first.epoch, first.controller_id) == (1, 1)
    assert (second.active, second.epoch, second.controller_id) == (False, 1, 1)
    assert await controller_record(cluster.store) == ControllerRecord(1, 1)
    epoch = await cluster.store.get(CONTROLLER_EPOCH)
    assert epoch is not None and epoch.value == b"1"
    assert metrics.value("tierlog_controller_elections_total") == 1
    lines = metrics.render().splitlines()
    assert "tierlog_controller_active 1" in lines and "tierlog_controller_epoch 1" in lines


async def test_the_epoch_grows_with_every_change_of_controller(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.controller(2)
    assert (await cluster.active()).broker_id == 1
    await cluster.stop(1)  # a clean stop: the lease is revoked
    second = await cluster.active()
    assert (second.broker_id, second.epoch) == (2, 2)
    await cluster.controller(1)
    await cluster.crash(2)  # a crash: the controller key goes only when the lease expires
    await cluster.settle()
    assert not cluster.controllers[1].active
    await cluster.advance(SESSION_MS, keep=[1])
    third = await cluster.active()
    assert (third.broker_id, third.epoch) == (1, 3)
    assert await controller_record(cluster.store) == ControllerRecord(1, 3)


async def test_a_lost_lease_stops_the_controller_at_once_and_it_campaigns_again(cluster: Cluster) -> None:
    controller = await cluster.controller(1)
    await cluster.active()
    membership = cluster.members[1]
    seen: list[tuple[bool, bool]] = []
    membership.add_listener(lambda: seen.append((membership.lost.is_set(), controller.active)))
    cluster.clock.advance(SESSION_MS)
    await membership.heartbeat()  # finds the lease expired, then registers again
    assert seen[0] == (True, False)
    assert await cluster.active() is controller
    assert controller.epoch == 2


# ---- fencing --------------------------------------------------------------------------------------------


class GatedStore(MetadataStore):
    """A decorator of the real in-process store: partition-state commits wait at a gate (one controller
    uses it, so its writes can be held while the cluster moves on)."""

    def __init__(self, inner: LocalMetadataStore) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()
        self.results: list[int | None] = []
        self.refused = asyncio.Event()

    async def start(self) -> None:
        pass  # the inner store is started and closed by its fixture

    async def close(self) -> None:
        pass

    async def grant_lease(self, ttl_seconds: int) -> int:
        return await self.inner.grant_lease(ttl_seconds)

    async def keep_alive(self, lease: int) -> None:
        await self.inner.keep_alive(lease)

    async def revoke_lease(self, lease: int) -> None:
        await self.inner.revoke_lease(lease)

    async def get(self, key: str) -> KeyValue | None:
        return await self.inner.get(key)

    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        return await self.inner.range(prefix)

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        return self.inner.watch(prefix, start_revision)

    async def commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int | None:
        if not any(op.key.startswith("partitions/") for op in ops):
            return await self.inner.commit(compares, ops)
        self.held.set()
        await self.gate.wait()
        result = await self.inner.commit(compares, ops)
        self.results.append(result)
        if result is None:
            self.refused.set()
        return result


async def test_a_deposed_controller_cannot_change_any_partition(cluster: Cluster) -> None:
    gated = GatedStore(cluster.store)
    old = await cluster.controller(1, store=gated)
    assert await cluster.active() is old
    new = await cluster.controller(2)
    await cluster.broker(3)
    await cluster.create_topic("t", [[3, 2]])
    await cluster.settle()
    assert (await cluster.state("t", 0)).leader == 3

    gated.gate.clear()
    gated.held.clear()
    await cluster.stop(3)  # the old controller decides 2 should lead; its commit waits at the gate
    async with asyncio.timeout(WAIT_S):
        await gated.held.wait()
    await cluster.advance(SESSION_MS, keep=[2])  # broker 1's lease and the controller key expire
    assert await cluster.store.get("brokers/1") is None
    del cluster.controllers[1]  # keep our own handle on the old controller; the new one takes over
    async with asyncio.timeout(WAIT_S):
        assert await new.wait_for(lambda: new.active)
    await cluster.settle()
    decided = await cluster.store.get(partition_key("t", 0))
    assert decided is not None
    assert PartitionState.decode(decided.key, decided.value) == PartitionState(2, 1, (2,), 1, 2)
    assert not old.active

    gated.gate.set()  # the old controller's pending write reaches the store now
    async with asyncio.timeout(WAIT_S):
        await gated.refused.wait()
    assert gated.results[-1] is None
    assert await cluster.store.get(partition_key("t", 0)) == decided
    assert not old.active
    await old.close()


async def test_a_leader_is_chosen_only_from_the_registration_it_was_decided_on(cluster: Cluster) -> None:
    gated = GatedStore(cluster.store)
    await cluster.controller(1, store=gated)
    await cluster.active()
    await cluster.create_topic("t", [[2]])  # broker 2 is not live yet: the partition waits for it
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(-1, 0, (2,), 0, 1)

    gated.gate.clear()
    gated.held.clear()
    gated.results.clear()
    await cluster.broker(2)  # the controller decides broker 2 leads; its commit waits at the gate
    async with asyncio.timeout(WAIT_S):
        await gated.held.wait()
    await cluster.stop(2)  # that registration goes (and a new one comes) before the decision lands
    await cluster.broker(2)
    gated.gate.set()
    async with asyncio.timeout(WAIT_S):
        await gated.refused.wait()  # decided on the old registration: refused, nothing written from it
    assert gated.results[0] is None
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 1, (2,), 1, 1)  # decided again, on the new one


# ---- leadership -----------------------------------------------------------------------------------------


async def test_a_lost_leader_leaves_the_partition_leaderless_until_it_returns(cluster: Cluster) -> None:
    metrics = Metrics()
    await cluster.controller(1, metrics=metrics)
    await cluster.broker(2)
    await cluster.create_topic("t", [[2, 3]])
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 0, 1)
    await cluster.broker(3)  # not in sync: only its leader adds it (AlterPartition), never the controller
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 0, (2,), 0, 1)

    await cluster.crash(2)
    await cluster.advance(SESSION_MS // 2)  # nothing expires yet: the registration outlives the process
    await cluster.settle()
    assert (await cluster.state("t", 0)).leader == 2
    await cluster.advance(SESSION_MS // 2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(
        -1, 1, (2,), 1, 1
    )  # 3 is not in sync: no unclean leader

    await cluster.broker(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 2, (2,), 2, 1)
    assert metrics.value("tierlog_leader_elections_total", reason="new") == 1
    assert metrics.value("tierlog_leader_elections_total", reason="recovered") == 1


async def test_failover_to_a_live_isr_member(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.create_topic("t", [[2, 3]])  # no replica is live: every one is in sync (empty logs)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(-1, 0, (2, 3), 0, 1)
    await cluster.broker(3)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)  # the first to come leads
    await cluster.broker(2)
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(3, 1, (3,), 1, 1)  # 2 is not in sync any more

    other = TopicAssignment("u", "id-u", ((2, 3),))
    seeded = PartitionState(2, 5, (2, 3), 9, 1)  # as replication will leave it: both in sync
    await cluster.store.commit(
        [], [Put(topic_key("u"), other.encode()), Put(partition_key("u", 0), seeded.encode())]
    )
    await cluster.settle()
    await cluster.stop(2)
    await cluster.settle()
    assert await cluster.state("u", 0) == PartitionState(3, 6, (3,), 10, 1)


async def test_preferred_leader_election_on_the_interval(cluster: Cluster) -> None:
    controller = await cluster.controller(1)
    await cluster.broker(2)
    await cluster.broker(3)
    await cluster.active()
    assignment = TopicAssignment("t", "id-t", ((2, 3), (3, 2)))
    states = [PartitionState(3, 4, (3, 2), 6, 1), PartitionState(3, 1, (3,), 1, 1)]
    ops: list[Op] = [Put(topic_key("t"), assignment.encode())]
    ops += [Put(partition_key("t", p), s.encode()) for p, s in enumerate(states)]
    await cluster.store.commit([], ops)
    await cluster.settle()

    await cluster.advance(INTERVAL_S * 1000 - 1)
    assert await controller.tick()
    await cluster.settle()
    assert await cluster.state("t", 0) == states[0]
    await cluster.advance(1)
    assert await controller.tick()
    await cluster.settle()
    assert await cluster.state("t", 0) == PartitionState(2, 5, (3, 2), 7, 1)
    assert await cluster.state("t", 1) == states[1]  # already led by its preferred replica


async def test_no_preferred_election_when_disabled(cluster: Cluster) -> None:
    controller = await cluster.controller(1, rebalance=False)
    await cluster.broker(2)
    await cluster.broker(3)
    assignment = TopicAssignment("t", "id-t", ((2, 3),))
    state = PartitionState(3, 4, (3, 2), 6, 1)
    await cluster.store.commit(
        [], [Put(topic_key("t"), assignment.encode()), Put(partition_key("t", 0), state.encode())]
    )
    await cluster.settle()
    await cluster.advance(INTERVAL_S * 1000 * 3)
    assert await controller.tick()
    await cluster.settle()
    assert await cluster.state("t", 0) == state


async def test_partitions_added_to_a_topic_get_leaders(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.broker(2)
    await cluster.create_topic("t", [[1, 2]])
    await cluster.settle()
    kv = await cluster.store.get(topic_key("t"))
    assert kv is not None
    grown = TopicAssignment("t", "id-t", ((1, 2), (2, 1), (1, 2)))
    assert await cluster.store.commit([Compare(kv.key, kv.mod_revision)], [Put(kv.key, grown.encode())])
    await cluster.settle()
    assert [(await cluster.state("t", p)).leader for p in range(3)] == [1, 2, 1]
    assert (await cluster.state("t", 0)).partition_epoch == 0  # untouched


async def test_a_deleted_topic_is_left_deleted_and_stray_states_are_removed(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.create_topic("t", [[1], [1]])
    await cluster.settle()
    await cluster.store.commit([], [Delete(topic_key("t")), Delete(partition_prefix("t"), prefix=True)])
    stray = PartitionState(1, 0, (1,), 0, 1)
    await cluster.store.commit([], [Put(partition_key("gone", 0), stray.encode())])
    await cluster.settle()
    states, _ = await cluster.store.range("partitions/")
    assert states == []


async def test_a_partition_beyond_the_topic_is_removed(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.create_topic("t", [[1]])
    await cluster.store.commit([], [Put(partition_key("t", 5), PartitionState(1, 0, (1,), 0, 1).encode())])
    await cluster.settle()
    states, _ = await cluster.store.range("partitions/")
    assert [kv.key for kv in states] == [partition_key("t", 0)]


async def test_a_standby_controller_writes_nothing(cluster: Cluster) -> None:
    await cluster.controller(1)
    await cluster.active()
    standby = await cluster.controller(2)
    await cluster.create_topic("t", [[2, 1]])
    await cluster.settle()
    assert not standby.active
    assert (await cluster.state("t", 0)).controller_epoch == 1
    assert standby.reconciled_revision >= cluster.store.revision
