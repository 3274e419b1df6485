"""The broker as a cluster member: in-process brokers sharing one LocalMetadataStore (fast, no etcd), and
the same behaviours on a real etcd process.

Covered: a topic created from any broker gets leaders spread over the brokers and opened by them; a
produce to the leader succeeds and to another broker answers 503/50310 naming the leader; a leader that
leaves (its lease revoked) leaves its partitions leaderless (50311 elsewhere) and leads them again, with a
higher leader epoch and its data, when it returns; delete removes local data; configs altered on one
broker reach the leader; partitions added on one broker get leaders; every broker answers the same
cluster view; a single broker's view (a cluster of one) and replication factor check.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import START_MS, Brokers, RunningBroker
from tests.integration.cluster.inproc import DEADLINE_S, InprocCluster
from tierlog.service.cluster.cache import MetadataCache
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import Compare, Delete, Put
from tierlog.service.cluster.model import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    broker_key,
    partition_key,
    topic_key,
)
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import ManualClock
from tierlog.wire.errors import InvalidConfigError, LeaderNotAvailableError, NotLeaderOrFollowerError

BATCHES = "application/vnd.tierlog.batches"
SHORT_SESSION = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "500"}


def batch(*values: bytes) -> bytes:
    return build_batch([Record(None, v) for v in values])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path) as running:
        yield running


async def produce(running: RunningBroker, topic: str, partition: int, *values: bytes) -> tuple[int, Any]:
    resp = await running.client.post(
        f"/native/v1/topics/{topic}/partitions/{partition}/batches",
        data=batch(*values),
        headers={"Content-Type": BATCHES, "Accept": "application/json"},
    )
    return resp.status, await resp.json()


def leader_of(cluster: InprocCluster, topic: str, partition: int) -> tuple[int, int]:
    """(leader, leader_epoch) of the partition as the first running broker sees it."""
    view = next(iter(cluster.brokers.values())).broker.cluster_view()
    found = view.partitions[topic][partition]
    return found.leader, found.leader_epoch


# ---- in-process clusters on one LocalMetadataStore ------------------------------------------------------


async def test_a_topic_created_on_any_broker_gets_leaders_spread_and_opened(cluster: InprocCluster) -> None:
    b1, b2, b3 = await cluster.start(3)
    topic = await b2.broker.create_topic("t", 6)
    assert topic.partition_count == 6
    await cluster.wait_for(lambda: cluster.converged("t"))
    leaders = cluster.leaders("t")
    assert sorted(collections.Counter(leaders).values()) == [2, 2, 2]  # rack-unaware round robin
    for running in (b1, b2, b3):
        me = running.broker.broker_id
        local = running.broker.topic("t")
        assert [p.index for p in local.partitions] == [i for i, leader in enumerate(leaders) if leader == me]
        for index, leader in enumerate(leaders):
            if leader == me:
                assert local.partition(index) is local.local(index)
            else:
                with pytest.raises(NotLeaderOrFollowerError) as caught:
                    local.partition(index)
                assert caught.value.leader_id == leader
                assert caught.value.leader_url == cluster.brokers[leader].url
                assert caught.value.leader_epoch == 0


async def test_produce_to_the_leader_succeeds_and_elsewhere_names_the_leader(cluster: InprocCluster) -> None:
    await cluster.start(3)
    await cluster.brokers[1].broker.create_topic("t", 3)
    await cluster.wait_for(lambda: cluster.converged("t"))
    for index, leader in enumerate(cluster.leaders("t")):
        status, body = await produce(cluster.brokers[leader], "t", index, b"a", b"b")
        assert status == 200, body
        assert body["base_offset"] == 0
        other = next(b for b in cluster.brokers if b != leader)
        status, body = await produce(cluster.brokers[other], "t", index, b"c")
        assert status == 503
        assert body["error_code"] == 50310
        assert (body["leader_id"], body["leader_url"], body["leader_epoch"]) == (
            leader,
            cluster.brokers[leader].url,
            0,
        )


async def test_a_request_reaching_a_partition_just_handed_over_is_told_the_new_leader(
    cluster: InprocCluster,
) -> None:
    await cluster.start(2)
    await cluster.brokers[1].broker.create_topic("t", 1)
    await cluster.wait_for(lambda: cluster.converged("t"))
    leader, epoch = leader_of(cluster, "t", 0)
    other = next(b for b in cluster.brokers if b != leader)
    part = cluster.brokers[leader].broker.topic("t").partition(0)  # a request holding the local partition
    key, store = partition_key("t", 0), cluster.store
    assert store is not None
    found = await store.get(key)
    assert found is not None
    moved = PartitionState(leader=other, leader_epoch=epoch + 1, isr=(other,), partition_epoch=9)
    assert await store.commit([Compare(key, found.mod_revision)], [Put(key, moved.encode())])
    # the old leader is still a replica: it keeps the partition open as a follower, refusing clients
    await cluster.wait_for(lambda: part.role == "follower", "the old leader to follow")
    with pytest.raises(NotLeaderOrFollowerError) as raised:
        await part.append(batch(b"late"))
    assert (raised.value.leader_id, raised.value.leader_epoch) == (other, epoch + 1)


async def test_a_leader_that_leaves_and_returns_leads_again_with_a_higher_epoch(
    cluster: InprocCluster,
) -> None:
    await cluster.start(3)
    await cluster.brokers[3].broker.create_topic("t", 3)
    await cluster.wait_for(lambda: cluster.converged("t"))
    leader, epoch = leader_of(cluster, "t", 0)
    status, _ = await produce(cluster.brokers[leader], "t", 0, b"kept")
    assert status == 200

    await cluster.stop_broker(leader)  # clean stop: the lease is revoked, the broker leaves at once
    await cluster.wait_for(lambda: leader_of(cluster, "t", 0)[0] == NO_LEADER, "t-0 to lose its leader")
    for running in cluster.brokers.values():
        status, body = await produce(running, "t", 0, b"lost")
        assert (status, body["error_code"]) == (503, 50311)
        with pytest.raises(LeaderNotAvailableError):
            running.broker.topic("t").partition(0)

    back = await cluster.start_broker(leader)
    await cluster.wait_for(lambda: cluster.converged("t"), "the returning broker to lead again")
    again, new_epoch = leader_of(cluster, "t", 0)
    assert again == leader and new_epoch > epoch
    read = await back.broker.topic("t").partition(0).read(0, 1 << 20)
    assert b"kept" in read.data
    status, body = await produce(back, "t", 0, b"more")
    assert status == 200, body


async def test_delete_removes_the_topic_everywhere_and_the_leaders_local_data(cluster: InprocCluster) -> None:
    await cluster.start(3)
    await cluster.brokers[1].broker.create_topic("gone", 3)
    await cluster.wait_for(lambda: cluster.converged("gone"))
    leaders = cluster.leaders("gone")
    for index, leader in enumerate(leaders):
        status, _ = await produce(cluster.brokers[leader], "gone", index, b"x")
        assert status == 200
    dirs = [cluster.data_dir(leader) / f"gone-{index}" for index, leader in enumerate(leaders)]
    assert all(path.is_dir() for path in dirs)

    await cluster.brokers[2].broker.delete_topic("gone")

    def everywhere_gone() -> bool:
        return all("gone" not in r.broker.local_topics for r in cluster.brokers.values()) and not any(
            path.exists() for path in dirs
        )

    await cluster.wait_for(everywhere_gone, "every broker to drop the topic and its directories")
    for running in cluster.brokers.values():
        assert "gone" not in running.broker.topic_names()
        assert "gone" not in running.broker.cluster_view().partitions
    # the name is free again at once, with new leaders
    await cluster.brokers[3].broker.create_topic("gone", 1)
    await cluster.wait_for(lambda: cluster.converged("gone"))


async def test_configs_altered_on_one_broker_reach_the_leader(cluster: InprocCluster) -> None:
    await cluster.start(3)
    await cluster.brokers[1].broker.create_topic("t", 1)
    await cluster.wait_for(lambda: cluster.converged("t"))
    leader = cluster.leaders("t")[0]
    other = next(b for b in cluster.brokers if b != leader)
    await cluster.brokers[other].broker.alter_topic_configs("t", {"retention.ms": "12345"})
    partition = cluster.brokers[leader].broker.topic("t").partition(0)
    await cluster.wait_for(lambda: partition.config.retention_ms == 12345, "the leader to apply the config")

    def everywhere() -> bool:
        return all(
            r.broker.topic("t").overrides == {"retention.ms": "12345"} for r in cluster.brokers.values()
        )

    await cluster.wait_for(everywhere, "every broker to see the override")
    with pytest.raises(InvalidConfigError):
        await cluster.brokers[other].broker.alter_topic_configs("t", {"retention.ms": "soon"})
    await cluster.brokers[other].broker.alter_topic_configs("t", {"retention.ms": None})
    await cluster.wait_for(lambda: partition.config.retention_ms != 12345, "the reset to reach the leader")


async def test_a_tiered_topic_is_tiered_by_its_leaders(tmp_path: Path) -> None:
    remote = {"remote.uri": (tmp_path / "remote").as_uri()}  # one object store for the whole cluster
    async with InprocCluster(tmp_path, defaults=remote) as cluster:
        await cluster.start(3)
        await cluster.brokers[1].broker.create_topic("tiered", 3, {"remote.storage.enable": "true"})
        await cluster.brokers[2].broker.create_topic("later", 3)
        await cluster.wait_for(lambda: cluster.converged("tiered") and cluster.converged("later"))
        for name in ("tiered", "later"):
            for index, leader in enumerate(cluster.leaders(name)):
                partition = cluster.brokers[leader].broker.topic(name).partition(index)
                assert (partition.remote is not None) == (name == "tiered")
        await cluster.brokers[3].broker.alter_topic_configs("later", {"remote.storage.enable": "true"})

        def attached() -> bool:
            return all(
                cluster.brokers[leader].broker.topic("later").partition(index).remote is not None
                for index, leader in enumerate(cluster.leaders("later"))
            )

        await cluster.wait_for(attached, "the leaders to attach the remote tier")


async def test_partitions_added_on_one_broker_get_leaders(cluster: InprocCluster) -> None:
    await cluster.start(3)
    await cluster.brokers[1].broker.create_topic("t", 2)
    topic = await cluster.brokers[2].broker.add_partitions("t", 5)
    assert topic.partition_count == 5
    await cluster.wait_for(lambda: cluster.converged("t") and len(cluster.leaders("t")) == 5)
    with pytest.raises(InvalidConfigError):
        await cluster.brokers[3].broker.add_partitions("t", 4)


async def test_every_broker_answers_the_same_cluster_view(cluster: InprocCluster) -> None:
    await cluster.start(3, {"broker.rack": "r1"})
    await cluster.brokers[1].broker.create_topic("t", 3, replication_factor=2)
    await cluster.wait_for(lambda: cluster.converged("t"))

    def agreed() -> bool:
        views = [r.broker.cluster_view() for r in cluster.brokers.values()]
        return len({(v.controller_id, v.partitions["t"]) for v in views}) == 1

    await cluster.wait_for(agreed, "every broker to see the same leaders and controller")
    views = [r.broker.cluster_view() for r in cluster.brokers.values()]
    first = views[0]
    assert [b.broker_id for b in first.brokers] == [1, 2, 3]
    assert {b.url for b in first.brokers} == {r.url for r in cluster.brokers.values()}
    assert {b.rack for b in first.brokers} == {"r1"}
    assert first.controller_id in (1, 2, 3) and first.controller_epoch >= 1
    assert len({v.cluster_id for v in views}) == 1 and first.cluster_id
    for partition in first.partitions["t"]:
        assert len(partition.replicas) == 2 and len(set(partition.replicas)) == 2
        assert partition.leader == partition.replicas[0]
        assert set(partition.isr) == set(partition.replicas)  # a new partition: its live replicas
    with pytest.raises(InvalidConfigError, match="Replication factor: 4 larger than available brokers: 3"):
        await cluster.brokers[2].broker.create_topic("too-wide", 1, replication_factor=4)
    with pytest.raises(InvalidConfigError, match="already exists"):
        await cluster.brokers[3].broker.create_topic("t", 1)


async def test_health_and_ready_report_the_cluster(cluster: InprocCluster) -> None:
    b1, _, _ = await cluster.start(3)
    # every broker is registered once start() returns; the controller is elected independently of that
    await cluster.wait_for(lambda: b1.broker.cluster_view().controller_id != NO_LEADER, "a controller")
    resp = await b1.client.get("/health")
    body = await resp.json()
    assert resp.status == 200 and body["status"] == "UP"
    assert body["cluster"]["broker_id"] == 1 and body["cluster"]["registered"] is True
    assert body["cluster"]["metadata_revision"] > 0
    assert body["cluster"]["controller_id"] in (1, 2, 3)
    metrics = await (await b1.client.get("/metrics")).text()
    assert 'tierlog_metadata_request_seconds_count{op="commit"}' in metrics
    resp = await b1.client.get("/ready")
    assert resp.status == 200 and (await resp.json())["cluster_id"] == b1.broker.cluster_id


async def test_a_produce_to_a_missing_topic_auto_creates_it_in_the_cluster(cluster: InprocCluster) -> None:
    await cluster.start(3, {"num.partitions": "3"})
    status, body = await produce(cluster.brokers[2], "auto", 0, b"x")
    assert status in (200, 503), body
    await cluster.wait_for(lambda: cluster.converged("auto"))
    leader = cluster.leaders("auto")[0]
    assert status == 200 if leader == 2 else body["error_code"] == 50310
    assert all(r.broker.topic("auto").partition_count == 3 for r in cluster.brokers.values())

    raced = await asyncio.gather(*(r.broker.ensure_topic("raced") for r in cluster.brokers.values()))
    assert len({topic.topic_id for topic in raced}) == 1  # created once, every broker answers that one
    with pytest.raises(InvalidConfigError):
        await cluster.brokers[1].broker.ensure_topic("not a name")


async def test_brokers_that_lose_their_sessions_register_again_and_lead_again(tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    async with InprocCluster(tmp_path, LocalMetadataStore(clock=clock)) as cluster:
        await cluster.start(3)
        await cluster.brokers[1].broker.create_topic("t", 3)
        await cluster.wait_for(lambda: cluster.converged("t"))
        before = cluster.brokers[1].broker.cluster_view().partitions["t"]
        clock.advance(60_000)  # past every lease: every registration (and the controller) goes
        assert cluster.store is not None and cluster.store.expire_leases() > 0

        def led_again() -> bool:
            nodes = [r.broker.cluster for r in cluster.brokers.values()]
            again = all(n is not None and n.membership.sessions >= 2 for n in nodes)
            return again and cluster.all_seen() and cluster.converged("t")

        await cluster.wait_for(led_again, "every broker to register again and lead its partitions again")
        after = cluster.brokers[1].broker.cluster_view().partitions["t"]
        # the same brokers lead (a controller elected after they were back saw no leader gone)
        assert [p.leader for p in after] == [p.leader for p in before]
        for index, leader in enumerate(cluster.leaders("t")):
            status, body = await produce(cluster.brokers[leader], "t", index, b"again")
            assert status == 200, body


async def test_a_second_broker_with_a_live_id_is_refused(cluster: InprocCluster, tmp_path: Path) -> None:
    await cluster.start(1)
    twin = InprocCluster(tmp_path / "twin", cluster.store, defaults=SHORT_SESSION)
    running = await twin.start_broker(1, wait=False)
    try:
        with pytest.raises(Exception, match="already registered"):
            await running.broker.wait_ready()  # after twice its own session timeout of waiting
    finally:
        await running.stop()


async def test_a_broker_whose_id_is_still_registered_waits_for_it_to_go(
    cluster: InprocCluster, tmp_path: Path
) -> None:
    await cluster.start(1)
    successor = InprocCluster(tmp_path / "next", cluster.store, defaults=SHORT_SESSION)
    running = await successor.start_broker(1, wait=False)
    try:
        await cluster.stop_broker(1)  # its registration goes: the successor registers
        await asyncio.wait_for(running.broker.wait_ready(), DEADLINE_S)
        assert [b.url for b in running.broker.cluster_view().brokers] == [running.url]
    finally:
        await running.stop()


async def test_a_topic_deleted_while_its_leader_was_down_loses_its_local_data(cluster: InprocCluster) -> None:
    await cluster.start(2)
    await cluster.brokers[1].broker.create_topic("t", 1)
    await cluster.wait_for(lambda: cluster.converged("t"))
    leader = cluster.leaders("t")[0]
    other = 3 - leader
    status, _ = await produce(cluster.brokers[leader], "t", 0, b"old")
    assert status == 200
    old_dir = cluster.data_dir(leader) / "t-0"
    assert old_dir.is_dir()
    await cluster.stop_broker(leader)
    await cluster.brokers[other].broker.delete_topic("t")
    await cluster.brokers[other].broker.create_topic("t", 1)  # the same name, a new topic id
    await cluster.start_broker(leader)
    await cluster.wait_for(lambda: not old_dir.exists(), "the stale directory to be removed")
    assert cluster.leaders("t") == [other]


async def test_a_data_dir_of_another_cluster_is_refused(tmp_path: Path) -> None:
    async with InprocCluster(tmp_path / "a") as first:
        await first.start(1)
    async with InprocCluster(tmp_path / "b") as second:
        second.base_dir = tmp_path / "a"  # broker 1's data directory of the first cluster
        running = await second.start_broker(1, wait=False)
        with pytest.raises(Exception, match="belongs to cluster"):
            await running.broker.wait_ready()


# ---- a single broker ------------------------------------------------------------------------------------


async def test_a_single_broker_is_a_cluster_of_one(brokers: Brokers) -> None:
    running = await brokers.start({"num.partitions": "2"})
    broker = running.broker
    assert broker.cluster.store_started.is_set()  # its local store, in the data directory
    await broker.create_topic("t", replication_factor=1)
    with pytest.raises(
        InvalidConfigError, match=r"^Replication factor: 3 larger than available brokers: 1\.$"
    ):
        await broker.create_topic("u", replication_factor=3)
    view = broker.cluster_view()
    assert (view.controller_id, view.controller_epoch) == (broker.broker_id, 1)  # its first election
    assert [(b.broker_id, b.url) for b in view.brokers] == [(broker.broker_id, broker.advertised_url)]
    assert [(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr) for p in view.partitions["t"]] == [
        (0, broker.broker_id, 0, (broker.broker_id,), (broker.broker_id,)),
        (1, broker.broker_id, 0, (broker.broker_id,), (broker.broker_id,)),
    ]


# ---- on a real etcd -------------------------------------------------------------------------------------


async def test_on_etcd_a_topic_created_anywhere_is_led_and_routed(tmp_path: Path, etcd_uri: str) -> None:
    async with InprocCluster(tmp_path, metadata_uri=etcd_uri) as cluster:
        await cluster.start(3)
        await cluster.brokers[2].broker.create_topic("t", 3)
        await cluster.wait_for(lambda: cluster.converged("t"))
        assert sorted(cluster.leaders("t")) == [1, 2, 3]
        for index, leader in enumerate(cluster.leaders("t")):
            status, body = await produce(cluster.brokers[leader], "t", index, b"a")
            assert status == 200, body
            other = next(b for b in cluster.brokers if b != leader)
            status, body = await produce(cluster.brokers[other], "t", index, b"b")
            assert (status, body["error_code"], body["leader_id"]) == (503, 50310, leader)


async def test_on_etcd_a_leader_that_leaves_and_returns_leads_again(tmp_path: Path, etcd_uri: str) -> None:
    async with InprocCluster(tmp_path, metadata_uri=etcd_uri) as cluster:
        await cluster.start(3)
        await cluster.brokers[1].broker.create_topic("t", 1)
        await cluster.wait_for(lambda: cluster.converged("t"))
        leader, epoch = leader_of(cluster, "t", 0)
        await cluster.stop_broker(leader)
        await cluster.wait_for(lambda: leader_of(cluster, "t", 0)[0] == NO_LEADER, "t-0 to lose its leader")
        for running in cluster.brokers.values():
            status, body = await produce(running, "t", 0, b"x")
            assert (status, body["error_code"]) == (503, 50311)
        await cluster.start_broker(leader)
        await cluster.wait_for(lambda: cluster.converged("t"), "the returning broker to lead again")
        assert leader_of(cluster, "t", 0)[0] == leader and leader_of(cluster, "t", 0)[1] > epoch


# ---- the metadata cache ---------------------------------------------------------------------------------


async def test_the_cache_reads_everything_again_after_its_watch_breaks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = LocalMetadataStore(history_limit=2)
    await store.start()
    cache = MetadataCache(store, retry_s=0.01)
    try:
        await cache.start()
        registration = BrokerRegistration(7, "http://127.0.0.1:1", "r")
        for index in range(10):  # no yield in between: the watcher falls behind and its watch breaks
            await store.commit([], [Put(topic_key(f"t{index}"), _assignment(f"t{index}").encode())])
        await store.commit([], [Put(broker_key(7), registration.encode())])
        assert await cache.wait_for(
            lambda: len(cache.topics()) == 10 and cache.brokers() == {7: registration}, 10
        )
        assert cache.revision == store.revision
        assert "reading everything again" in caplog.text  # the watch did break
        view = cache.view()
        assert [b.broker_id for b in view.brokers] == [7]
        assert all(p.leader == NO_LEADER for parts in view.partitions.values() for p in parts)
        await store.commit([], [Delete(topic_key("t3"))])
        assert await cache.wait_for(lambda: "t3" not in cache.topics(), 10)
    finally:
        await cache.close()
        await store.close()


async def test_the_cache_shows_no_leader_while_the_leader_is_newer_than_its_state() -> None:
    # broker 7 led t-0 in epoch 3, then restarted (a new registration) before any controller wrote again
    store = LocalMetadataStore()
    await store.start()
    cache = MetadataCache(store)
    try:
        await cache.start()
        registration = BrokerRegistration(7, "http://127.0.0.1:1", "r", incarnation="first")
        await store.commit([], [Put(broker_key(7), registration.encode())])
        await store.commit([], [Put(topic_key("t"), _assignment("t").encode())])
        led = PartitionState(7, 3, (7,), 5, 1)
        await store.commit([], [Put(partition_key("t", 0), led.encode())])
        assert await cache.wait_for(lambda: cache.leader_of("t", 0) == registration, 10)
        await store.commit([], [Delete(broker_key(7))])
        again = BrokerRegistration(7, "http://127.0.0.1:1", "r", incarnation="second")
        await store.commit([], [Put(broker_key(7), again.encode())])
        assert await cache.wait_for(lambda: cache.brokers() == {7: again}, 10)
        assert cache.partition_state("t", 0) == PartitionState(NO_LEADER, 3, (7,), 5, 1)
        assert cache.leader_of("t", 0) is None
        assert cache.view().partitions["t"][0].leader == NO_LEADER
        # the controller's next write (a new epoch) is newer than the registration: it leads again
        elected = PartitionState(7, 4, (7,), 6, 1)
        await store.commit([], [Put(partition_key("t", 0), elected.encode())])
        assert await cache.wait_for(lambda: cache.partition_state("t", 0) == elected, 10)
        assert cache.leader_of("t", 0) == again and cache.view().partitions["t"][0].leader == 7
    finally:
        await cache.close()
        await store.close()


def _assignment(name: str) -> TopicAssignment:
    return TopicAssignment(name, f"id-{name}", ((7,),))


async def test_colliding_names_created_on_two_brokers_at_once_cannot_both_exist(
    cluster: InprocCluster,
) -> None:
    await cluster.start(2)
    results = await asyncio.gather(
        cluster.brokers[1].broker.create_topic("a.b", 1),
        cluster.brokers[2].broker.create_topic("a_b", 1),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1, results
    assert isinstance(failures[0], InvalidConfigError) and "collides" in str(failures[0])
    names = {t.name for t in cluster.brokers[1].broker.topics()} & {"a.b", "a_b"}
    assert len(names) == 1
    survivor = names.pop()
    await cluster.brokers[1].broker.delete_topic(survivor)  # the folded name is free again
    await cluster.wait_for(lambda: survivor not in cluster.brokers[2].broker.topic_names())
    other = "a_b" if survivor == "a.b" else "a.b"
    await cluster.brokers[2].broker.create_topic(other, 1)
