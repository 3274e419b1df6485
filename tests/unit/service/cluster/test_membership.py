"""Broker membership against the in-process metadata store; leases expire by a manual clock, no sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.membership import Membership, lease_ttl_seconds
from tierlog.service.cluster.metadata_store import MetadataStoreError
from tierlog.service.cluster.model import BrokerRegistration, broker_key
from tierlog.service.metrics import Metrics
from tierlog.tiering.log.clock import ManualClock
from tierlog.wire.errors import InvalidConfigError

SESSION_MS = 6000
NEVER_MS = 3_600_000  # heartbeat interval for tests that drive heartbeat() themselves


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[LocalMetadataStore]:
    store = LocalMetadataStore(clock=clock)
    await store.start()
    yield store
    await store.close()


def member(
    store: LocalMetadataStore,
    broker_id: int = 1,
    url: str = "http://127.0.0.1:9001",
    *,
    heartbeat_ms: int = NEVER_MS,
    metrics: Metrics | None = None,
) -> Membership:
    registration = BrokerRegistration(broker_id, url, None, f"incarnation-{url}")
    return Membership(
        store,
        registration,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=heartbeat_ms,
        metrics=metrics,
    )


def expire(store: LocalMetadataStore, clock: ManualClock, ms: int = SESSION_MS) -> None:
    clock.advance(ms)
    store.expire_leases()


@pytest.mark.parametrize(("session_ms", "ttl"), [(9000, 9), (2500, 3), (2000, 2), (1, 1), (0, 1)])
def test_lease_ttl_is_the_session_in_whole_seconds_rounded_up(session_ms: int, ttl: int) -> None:
    assert lease_ttl_seconds(session_ms) == ttl


async def test_start_registers_under_a_lease(store: LocalMetadataStore) -> None:
    membership = member(store)
    await membership.start()
    try:
        kv = await store.get(broker_key(1))
        assert kv is not None
        assert kv.lease == membership.lease != 0
        assert BrokerRegistration.decode(kv.key, kv.value) == membership.registration
        assert membership.registered.is_set() and not membership.lost.is_set()
        assert membership.ttl_seconds == 6
    finally:
        await membership.close()
    assert await store.get(broker_key(1)) is None  # revoked: gone at once


async def test_a_live_broker_id_cannot_register_twice(store: LocalMetadataStore) -> None:
    first = member(store, 1, "http://127.0.0.1:9001")
    await first.start()
    second = member(store, 1, "http://127.0.0.1:9002")
    with pytest.raises(InvalidConfigError) as caught:
        await second.start()
    assert str(caught.value) == "broker.id 1 is already registered by http://127.0.0.1:9001"
    assert not second.registered.is_set()
    await first.close()
    third = member(store, 1, "http://127.0.0.1:9003")  # the id is free once the first is gone
    await third.start()
    await third.close()


async def test_heartbeats_keep_the_registration(store: LocalMetadataStore, clock: ManualClock) -> None:
    membership = member(store)
    await membership.start()
    for _ in range(5):
        expire(store, clock, SESSION_MS - 1)
        await membership.heartbeat()
    assert membership.sessions == 1
    assert await store.get(broker_key(1)) is not None
    await membership.close()


async def test_a_lost_lease_sets_lost_and_registers_again(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    membership = member(store)
    seen: list[tuple[bool, bool]] = []
    membership.add_listener(lambda: seen.append((membership.registered.is_set(), membership.lost.is_set())))
    await membership.start()
    old_lease = membership.lease
    expire(store, clock)
    assert await store.get(broker_key(1)) is None
    await membership.heartbeat()
    assert seen == [(True, False), (False, True), (True, False)]
    assert membership.lease not in (0, old_lease)
    assert membership.sessions == 2
    kv = await store.get(broker_key(1))
    assert kv is not None and kv.lease == membership.lease
    await membership.close()


async def test_registering_again_waits_while_another_broker_holds_the_id(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    first = member(store, 1, "http://127.0.0.1:9001")
    await first.start()
    expire(store, clock)
    usurper = member(store, 1, "http://127.0.0.1:9002")
    await usurper.start()
    await first.heartbeat()
    assert first.lost.is_set() and not first.registered.is_set()
    await usurper.close()
    await first.heartbeat()
    assert first.registered.is_set() and not first.lost.is_set()
    kv = await store.get(broker_key(1))
    assert kv is not None and BrokerRegistration.decode(kv.key, kv.value).url == "http://127.0.0.1:9001"
    await first.close()


async def test_close_without_revoking_leaves_the_lease_to_expire(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    membership = member(store)
    await membership.start()
    await membership.close(revoke=False)
    assert await store.get(broker_key(1)) is not None
    await membership.heartbeat()  # does nothing once closed
    expire(store, clock)
    assert await store.get(broker_key(1)) is None


async def test_the_keep_alive_task_notices_a_lost_lease(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    membership = member(store, heartbeat_ms=10)
    again = asyncio.Event()
    membership.add_listener(lambda: again.set() if membership.sessions == 2 else None)
    await membership.start()
    clock.advance(SESSION_MS)  # the keep-alive task's next round finds the lease expired
    async with asyncio.timeout(30):
        await again.wait()
    assert membership.registered.is_set()
    await membership.close()
    assert await store.get(broker_key(1)) is None


async def test_metrics(store: LocalMetadataStore, clock: ManualClock) -> None:
    metrics = Metrics()
    membership = member(store, metrics=metrics)
    await membership.start()
    assert "tierlog_broker_registered 1" in metrics.render().splitlines()
    expire(store, clock)
    await membership.heartbeat()
    assert metrics.value("tierlog_broker_session_losses_total") == 1
    await membership.close()
    assert "tierlog_broker_registered 0" in metrics.render().splitlines()


class Unreachable(LocalMetadataStore):
    """The in-process store whose keep-alives fail as an unreachable etcd's would, while ``down``."""

    down = False

    async def keep_alive(self, lease: int) -> None:
        if self.down:
            raise MetadataStoreError("etcd unreachable")
        await super().keep_alive(lease)


async def test_a_broker_that_cannot_reach_the_store_keeps_its_membership_and_says_for_how_long(
    clock: ManualClock,
) -> None:
    store = Unreachable(clock=clock)
    await store.start()
    now = [100.0]
    registration = BrokerRegistration(1, "http://127.0.0.1:9001", None, "i")
    membership = Membership(
        store,
        registration,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=NEVER_MS,
        monotonic=lambda: now[0],
    )
    try:
        await membership.start()
        store.down = True
        now[0] += 2 * SESSION_MS / 1000
        with pytest.raises(MetadataStoreError):
            await membership.heartbeat()
        assert membership.registered.is_set()  # a whole etcd outage must not take every broker down
        assert membership.unconfirmed_s == 2 * SESSION_MS / 1000

        store.down = False
        clock.advance(SESSION_MS + 1000)  # meanwhile its lease expired in the store
        store.expire_leases()
        await membership.heartbeat()  # finds the lease gone: a new session
        assert membership.registered.is_set() and membership.sessions == 2
        assert membership.unconfirmed_s == 0
    finally:
        await membership.close()
        await store.close()
