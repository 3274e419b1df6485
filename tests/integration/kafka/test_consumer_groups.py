"""KIP-848 consumer groups with a real client that opts in (confluent-kafka's ``group.protocol=consumer``):
broker-side assignment, a rebalance when a member joins and when one leaves, commits with member epochs,
and every record consumed exactly once across the rebalances; and over raw requests: assignments by topic id
(which Metadata v12 resolves), fencing, ConsumerGroupDescribe, and a group kept to one protocol."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.integration.broker import BrokerThread, StartThread
from tests.integration.kafka.test_fetch import Raw

pytestmark = pytest.mark.integration

WAIT_S = 30.0
PARTITIONS = 4
INCONSISTENT_GROUP_PROTOCOL = 23
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_MEMBER_EPOCH = 110


@pytest.fixture
def broker(broker_threads: StartThread) -> Iterator[BrokerThread]:
    yield broker_threads(
        {"auto.create.topics.enable": "false", "group.consumer.heartbeat.interval.ms": "300"}
    )


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _create(broker: BrokerThread, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(WAIT_S)


def _produce(broker: BrokerThread, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": broker.kafka_bootstrap, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0


class _Member:
    """A KIP-848 consumer polled on its own thread: it records each value it processes and commits each
    record's offset synchronously before polling again, so a partition moves with nothing in flight."""

    def __init__(self, broker: BrokerThread, group: str, topic: str, **extra: str) -> None:
        self.values: list[str] = []
        self.assigned: set[int] = set()
        self.errors: list[KafkaError] = []
        self.lock = threading.Lock()
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.kafka_bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                **extra,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assigned |= {p.partition for p in partitions}

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assigned -= {p.partition for p in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            message: Message | None = self.consumer.poll(0.1)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                self.errors.append(error)
                continue
            with self.lock:
                self.values.append((message.value() or b"").decode())
            try:
                self.consumer.commit(message=message, asynchronous=False)
            except KafkaException as err:  # recorded: the test fails on it, not on a dead thread
                self.errors.append(err.args[0])

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def close(self) -> None:
        """Stop polling and leave the group (epoch -1). Idempotent."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(WAIT_S)
            self.consumer.close()


def test_two_members_share_the_partitions_through_rebalances_and_consume_each_record_once(
    broker: BrokerThread,
) -> None:
    topic, group = "kip848-orders", "kip848-group"
    _create(broker, topic)
    batches = [[f"{phase}-{i}" for i in range(40)] for phase in range(3)]
    members: list[_Member] = []

    def consumed() -> list[str]:
        return sorted(v for m in members for v in m.values)

    try:
        first = _Member(broker, group, topic, **{"client.id": "first"})
        members.append(first)
        _until(lambda: first.partitions() == set(range(PARTITIONS)), "the first member's assignment")
        _produce(broker, topic, batches[0])
        _until(lambda: len(consumed()) >= 40, "the first batch")

        second = _Member(broker, group, topic, **{"client.id": "second"})
        members.append(second)

        def split() -> bool:
            a, b = first.partitions(), second.partitions()
            return len(a) == len(b) == PARTITIONS // 2 and not a & b

        _until(split, "the partitions split between the two members")
        _produce(broker, topic, batches[1])
        _until(lambda: len(consumed()) >= 80, "the second batch")
        assert first.values and second.values[-1].startswith("1-")

        second.close()
        _until(lambda: first.partitions() == set(range(PARTITIONS)), "the first member to take all back")
        _produce(broker, topic, batches[2])
        _until(lambda: len(consumed()) >= 120, "the third batch")
        first.close()
    finally:
        for member in members:
            member.close()
    assert consumed() == sorted(v for batch in batches for v in batch)  # none twice, none missed
    assert not [e for m in members for e in m.errors if e.code() != KafkaError._PARTITION_EOF]
    reader = Consumer({"bootstrap.servers": broker.kafka_bootstrap, "group.id": group})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=WAIT_S)
        assert [tp.offset for tp in found] == [30] * PARTITIONS
    finally:
        reader.close()


def _heartbeat(raw: Raw, group: str, member: str, epoch: int, topics: list[str] | None) -> Any:
    return raw.call(
        68, 1, group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout=60_000,
        subscribed_topic_names=topics, topic_partitions=[] if epoch == 0 else None,
    )  # fmt: skip


def test_assignments_name_topic_ids_and_groups_keep_to_one_protocol(broker: BrokerThread) -> None:
    topic, group, classic = "kip848-ids", "kip848-raw", "kip848-classic"
    _create(broker, topic)
    raw = Raw(broker.kafka_bootstrap)
    try:
        # as clients do: FindCoordinator first (it creates __consumer_offsets), until it answers
        _until(
            lambda: (
                raw.call(10, 4, key_type=0, coordinator_keys=[group]).coordinators[0].error_code.value == 0
            ),
            "the coordinator",
        )
        joined = _heartbeat(raw, group, "m-1", 0, [topic])
        assert (joined.error_code.value, joined.member_epoch) == (0, 1)
        (assigned,) = joined.assignment.topic_partitions
        assert sorted(assigned.partitions) == list(range(PARTITIONS))
        found = raw.call(3, 12, topics=[{"topic_id": assigned.topic_id, "name": None}])
        assert [t.name for t in found.topics] == [topic]  # the id resolves to the name
        assert _heartbeat(raw, group, "m-1", 7, None).error_code.value == FENCED_MEMBER_EPOCH

        (described,) = raw.call(69, 1, group_ids=[group]).groups
        assert (described.group_state, described.assignor_name) == ("Stable", "uniform")
        (member,) = described.members
        assert [t.topic_name for t in member.assignment.topic_partitions] == [topic]
        with urllib.request.urlopen(f"{broker.url.rstrip('/')}/native/v1/groups/{group}", timeout=10) as got:
            over_http = json.loads(got.read())  # the HTTP APIs describe the group too
        assert (over_http["state"], over_http["members"][0]["member_id"]) == ("Stable", "m-1")

        protocols = [{"name": "range", "metadata": b""}]
        refused = raw.call(
            11, 5, group_id=group, session_timeout=10_000, rebalance_timeout=10_000, member_id="",
            protocol_type="consumer", protocols=protocols,
        )  # fmt: skip
        assert refused.error_code.value == INCONSISTENT_GROUP_PROTOCOL
        pending = raw.call(
            11, 5, group_id=classic, session_timeout=10_000, rebalance_timeout=10_000, member_id="",
            protocol_type="consumer", protocols=protocols,
        )  # fmt: skip
        assert pending.error_code.value == MEMBER_ID_REQUIRED  # a classic group with a pending member
        assert _heartbeat(raw, classic, "m-2", 0, [topic]).error_code.value == GROUP_ID_NOT_FOUND

        left = _heartbeat(raw, group, "m-1", -1, None)
        assert (left.error_code.value, left.member_epoch) == (0, -1)
        assert raw.call(69, 1, group_ids=[group]).groups[0].error_code.value == GROUP_ID_NOT_FOUND
    finally:
        raw.close()
