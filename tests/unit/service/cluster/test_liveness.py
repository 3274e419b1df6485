"""The failure detector against the in-process store: leases age by a manual clock, the TCP probe is a
stand-in (the e2e test, ``tests/e2e/test_failure_detection.py``, has real processes and real refusals).
The ``clock`` and ``store`` fixtures are the folder's (conftest.py)."""

from __future__ import annotations

import pytest

from tierlog.service.cluster.liveness import FailureDetector, origin, silence_limit_s
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import LeaseTime, Put
from tierlog.service.cluster.model import BrokerRegistration, broker_key
from tierlog.service.metrics import Metrics
from tierlog.tiering.log.clock import ManualClock

SESSION_MS = 9000
HEARTBEAT_MS = 500
URL = "http://127.0.0.1:9002"


async def register(store: LocalMetadataStore, broker_id: int = 2, url: str = URL) -> int:
    lease = await store.grant_lease(SESSION_MS // 1000)
    registration = BrokerRegistration(broker_id, url, None, f"incarnation-{broker_id}")
    await store.commit([], [Put(broker_key(broker_id), registration.encode(), lease=lease)])
    return lease


class Probe:
    """The TCP probe's stand-in: refused or not, counting calls."""

    def __init__(self, refused: bool) -> None:
        self.refused = refused
        self.calls: list[str] = []

    async def __call__(self, url: str) -> bool:
        self.calls.append(url)
        return self.refused


def detector(store: LocalMetadataStore, probe: Probe, metrics: Metrics | None = None) -> FailureDetector:
    registrations = {
        2: BrokerRegistration(2, URL, None, "i2"),
        1: BrokerRegistration(1, "http://h:1", None, "i1"),
    }
    return FailureDetector(
        store, 1, lambda: registrations, heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS,
        metrics=metrics, probe=probe,
    )  # fmt: skip


@pytest.mark.parametrize(("heartbeat_ms", "limit"), [(100, 2), (500, 2), (600, 3), (2000, 8)])
def test_silence_is_four_heartbeats_and_at_least_two_seconds(heartbeat_ms: int, limit: int) -> None:
    assert silence_limit_s(heartbeat_ms) == limit


def test_urls_match_by_scheme_host_and_port() -> None:
    assert origin("http://127.0.0.1:9002/native/v1/x?y=1") == origin("HTTP://127.0.0.1:9002")
    assert origin("https://h/") == "https://h:443"
    assert origin("http://h:1") != origin("http://h:2")


def test_lease_silence_is_a_lower_bound_in_whole_seconds() -> None:
    assert LeaseTime(9, 8).silent_s == 0  # renewed under a second ago
    assert LeaseTime(9, 6).silent_s == 2  # 6.x s left: more than 2 s without a renewal
    assert LeaseTime(9, 0).silent_s == 8


async def test_a_refused_address_is_fenced_at_once(store: LocalMetadataStore) -> None:
    lease = await register(store)
    metrics = Metrics()
    probe = Probe(refused=True)
    found = detector(store, probe, metrics)
    assert await found.check(2) is True
    assert await store.get(broker_key(2)) is None  # the lease went, and the registration with it
    assert probe.calls == [URL, URL]  # refused twice before it counts
    assert found.fenced == 1
    assert 'tierlog_brokers_fenced_total{reason="refused"} 1' in metrics.render()
    await store.revoke_lease(lease)  # already gone: nothing left to do


async def test_a_slow_broker_that_renews_its_lease_is_not_fenced(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    lease = await register(store)
    found = detector(store, Probe(refused=False))
    for _ in range(10):  # 5 s of a broker answering nothing, yet renewing every heartbeat
        clock.advance(HEARTBEAT_MS)
        await store.keep_alive(lease)
        assert await found.check(2) is False
    assert await store.get(broker_key(2)) is not None and found.fenced == 0


async def test_a_silent_lease_is_fenced_after_four_heartbeats(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    await register(store)
    found = detector(store, Probe(refused=False))
    clock.advance(1999)
    assert await found.check(2) is False  # under 2 s of silence: not yet
    clock.advance(1001)
    assert await found.check(2) is True
    assert await store.get(broker_key(2)) is None and found.fenced == 1


async def test_a_broker_already_gone_settles_the_suspicion(store: LocalMetadataStore) -> None:
    probe = Probe(refused=True)
    assert await detector(store, probe).check(2) is True
    assert probe.calls == []


async def test_suspects_are_found_by_url_and_never_include_this_broker(store: LocalMetadataStore) -> None:
    found = detector(store, Probe(refused=False))
    found.suspect_url("http://h:1/native/v1/metadata")  # this broker
    found.suspect_url("http://elsewhere:9/")  # nobody registered there
    assert found.suspects == frozenset()
    found.suspect_url(URL + "/native/v1/replication/topics/t/partitions/0/batches")
    assert found.suspects == frozenset({2})


async def test_watched_brokers_that_refuse_become_suspects(store: LocalMetadataStore) -> None:
    registrations = {
        2: BrokerRegistration(2, URL, None, "i2"),
        3: BrokerRegistration(3, "http://h:3", None, "i3"),
    }
    refusing = {URL}

    async def probe(url: str) -> bool:
        return url in refusing

    found = FailureDetector(
        store, 1, lambda: registrations, heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS,
        watched=lambda: [1, 2, 3, 4], probe=probe,
    )  # fmt: skip
    await found.watch_once()  # 1 is this broker, 4 is not registered: neither is tried
    assert found.suspects == frozenset({2})
