"""Consumer groups against a real broker: sharing partitions, rebalances, auto-commit, eviction, fencing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.client.helpers import expire_sessions
from tierlog.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    CommitFailedError,
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
)
from tierlog.tiering.log import ManualClock

FAST = {"heartbeat_interval_ms": 50, "auto_offset_reset": "earliest"}


class Tracker(ConsumerRebalanceListener):
    """Records rebalance callbacks and wakes waiters on a shared condition."""

    def __init__(self, changed: asyncio.Condition) -> None:
        self.changed = changed
        self.assigned: set[TopicPartition] = set()
        self.events: list[tuple[str, set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", set(revoked)))
        self.assigned = set()
        async with self.changed:
            self.changed.notify_all()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", set(assigned)))
        self.assigned = set(assigned)
        async with self.changed:
            self.changed.notify_all()


async def wait_for(changed: asyncio.Condition, predicate: Callable[[], bool], within: float = 15.0) -> None:
    async with changed:
        await asyncio.wait_for(changed.wait_for(predicate), within)


async def produce(url: str, topic: str, count: int, start: int = 0) -> None:
    async with AsyncProducer(url, linger_ms=5) as producer:
        for i in range(start, start + count):
            await producer.send(topic, b"%d" % i, key=b"key-%d" % i)


async def drain(
    consumers: list[AsyncConsumer], count: int, within: float = 15.0
) -> list[list[ConsumerRecord]]:
    """Poll every consumer concurrently until ``count`` records arrived in total."""
    got: list[list[ConsumerRecord]] = [[] for _ in consumers]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within

    async def one(index: int) -> None:
        while sum(map(len, got)) < count and loop.time() < deadline:
            got[index] += await consumers[index].poll(timeout=0.1)

    await asyncio.gather(*(one(i) for i in range(len(consumers))))
    assert sum(map(len, got)) == count, f"{sum(map(len, got))} of {count} records"
    return got


async def test_three_members_share_six_partitions_and_rebalance_when_one_leaves(
    broker: RunningBroker,
) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("shared", 6)
    await produce(broker.url, "shared", 60)
    changed = asyncio.Condition()
    trackers = [Tracker(changed) for _ in range(3)]
    options = {**FAST, "group_id": "trio", "auto_commit_interval_ms": 600_000}
    consumers = [AsyncConsumer(bootstrap_servers=broker.url, **options) for _ in range(3)]
    try:
        for consumer, tracker in zip(consumers, trackers, strict=True):
            consumer.subscribe(["shared"], listener=tracker)

        def shared_by(members: list[Tracker], each: int) -> bool:
            owned = [t.assigned for t in members]
            union = set().union(*owned)
            return all(len(o) == each for o in owned) and len(union) == 6

        await wait_for(changed, lambda: shared_by(trackers, 2))
        got = await drain(consumers, 60)
        for consumer, records, tracker in zip(consumers, got, trackers, strict=True):
            assert {TopicPartition(r.topic, r.partition) for r in records} <= tracker.assigned
            assert consumer.assignment() == tracker.assigned
        assert sorted(int(r.value) for records in got for r in records) == list(range(60))
        for consumer in consumers:
            assert await consumer.poll(timeout=0) == []

        await consumers[0].close()
        await wait_for(changed, lambda: shared_by(trackers[1:], 3))
        kinds = [kind for kind, _ in trackers[1].events]
        assert kinds[-2:] == ["revoked", "assigned"]
        async with AsyncAdmin(broker.url) as admin:
            group = await admin.describe_group("trio")
        assert group["state"] == "Stable" and len(group["members"]) == 2
        assert {row["lag"] for row in group["lag"]} == {0}

        await produce(broker.url, "shared", 60, start=60)
        later = await drain(consumers[1:], 60)
        assert sorted(int(r.value) for records in later for r in records) == list(range(60, 120))
    finally:
        for consumer in consumers:
            await consumer.close()


async def test_an_evicted_member_rejoins_with_a_new_member_id(
    clocked_broker: tuple[RunningBroker, ManualClock],
) -> None:
    broker, clock = clocked_broker
    changed = asyncio.Condition()
    tracker = Tracker(changed)
    async with AsyncConsumer(bootstrap_servers=broker.url, group_id="evicted", **FAST) as consumer:
        await produce(broker.url, "solo", 3)
        consumer.subscribe(["solo"], listener=tracker)
        await wait_for(changed, lambda: len(tracker.assigned) == 3)
        membership = consumer._membership
        assert membership is not None
        first_id = membership.member_id
        seen = len(tracker.events)
        await expire_sessions(broker.app, clock, 60_000)
        await wait_for(changed, lambda: len(tracker.events) >= seen + 2 and len(tracker.assigned) == 3)
        assert [kind for kind, _ in tracker.events[seen:]] == ["revoked", "assigned"]
        assert membership.member_id not in ("", first_id)


async def test_a_fenced_member_cannot_commit(clocked_broker: tuple[RunningBroker, ManualClock]) -> None:
    broker, clock = clocked_broker
    changed = asyncio.Condition()
    tracker = Tracker(changed)
    options = {"auto_offset_reset": "earliest", "heartbeat_interval_ms": 30_000, "enable_auto_commit": False}
    async with AsyncConsumer(bootstrap_servers=broker.url, group_id="fenced", **options) as consumer:
        await produce(broker.url, "fence", 3)
        consumer.subscribe(["fence"], listener=tracker)
        await wait_for(changed, lambda: len(tracker.assigned) == 3)
        await consumer.commit({TopicPartition("fence", 0): 1})
        await expire_sessions(broker.app, clock, 60_000)
        with pytest.raises(CommitFailedError) as caught:
            await consumer.commit({TopicPartition("fence", 0): 2})
        assert caught.value.code == 40912
        assert await consumer.committed(TopicPartition("fence", 0)) == 1


async def test_pattern_subscription_picks_up_new_topics(broker: RunningBroker) -> None:
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("metrics-a", 1)
        await admin.create_topic("other", 1)
    changed = asyncio.Condition()
    tracker = Tracker(changed)
    async with AsyncConsumer(bootstrap_servers=broker.url, group_id="pattern", **FAST) as consumer:
        consumer.subscribe(pattern=r"metrics-.*", listener=tracker)
        await wait_for(changed, lambda: tracker.assigned == {TopicPartition("metrics-a", 0)})
        async with AsyncAdmin(broker.url) as admin:
            await admin.create_topic("metrics-b", 2)
        expected = {
            TopicPartition("metrics-a", 0),
            TopicPartition("metrics-b", 0),
            TopicPartition("metrics-b", 1),
        }
        await wait_for(changed, lambda: tracker.assigned == expected)
        await produce(broker.url, "metrics-b", 4)
        records = await drain([consumer], 4)
        assert {r.topic for r in records[0]} == {"metrics-b"}


async def test_auto_commit_commits_what_the_previous_poll_returned(broker: RunningBroker) -> None:
    await produce(broker.url, "auto", 30)
    tp_count = 3
    options = {**FAST, "group_id": "auto", "auto_commit_interval_ms": 20}
    async with AsyncConsumer("auto", bootstrap_servers=broker.url, **options) as consumer:
        records = (await drain([consumer], 30))[0]
        assert len(records) == 30
        committed: dict[TopicPartition, int | None] = {}

        async def all_committed() -> bool:
            for p in range(tp_count):
                committed[TopicPartition("auto", p)] = await consumer.committed(TopicPartition("auto", p))
            return sum(c or 0 for c in committed.values()) == 30

        assert await consumer.poll(timeout=0) == []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not await all_committed():
            assert loop.time() < deadline, f"auto-commit did not catch up: {committed}"
            await asyncio.sleep(0.02)


class Faulty(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls = 0

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls += 1
        raise RuntimeError("listener bug")


async def test_a_raising_listener_does_not_stop_membership(broker: RunningBroker) -> None:
    await produce(broker.url, "faulty", 5)
    listener = Faulty()
    async with AsyncConsumer(bootstrap_servers=broker.url, group_id="faulty", **FAST) as consumer:
        consumer.subscribe(["faulty"], listener=listener)
        records = (await drain([consumer], 5))[0]
        assert sorted(int(r.value) for r in records) == [0, 1, 2, 3, 4]
        assert listener.calls >= 1
        assert consumer._group_task is not None and not consumer._group_task.done()
