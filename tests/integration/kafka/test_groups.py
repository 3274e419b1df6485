"""Consumer groups over the Kafka listener, with Kafka's own clients: FindCoordinator, the classic group
protocol with client-side assignment (range and cooperative-sticky), static membership, commits shared
with the HTTP API, and the group admin APIs.

Fetch is built elsewhere, so these tests watch the clients' assignment callbacks and commit explicit
offsets rather than consume records."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka.errors import InconsistentGroupProtocolError
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

from tests.integration.broker import BrokerThread

pytestmark = pytest.mark.integration

WAIT_S = 15.0


def _http(broker: BrokerThread, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.url.rstrip("/") + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


def _create_topic(broker: BrokerThread, name: str, partitions: int) -> None:
    cluster = _http(broker, "GET", "/v3/clusters")["data"][0]["cluster_id"]
    _http(
        broker, "POST", f"/v3/clusters/{cluster}/topics", {"topic_name": name, "partitions_count": partitions}
    )


def _http_committed(broker: BrokerThread, group: str) -> dict[tuple[str, int], int]:
    answer = _http(broker, "POST", f"/native/v1/groups/{group}/offsets/fetch", {})
    return {(o["topic"], o["partition"]): o["offset"] for o in answer["offsets"]}


class _Member:
    """A confluent-kafka consumer polled on its own thread, recording its current assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str, **extra: str) -> None:
        self.assigned: set[int] = set()
        self.cooperative = extra.get("partition.assignment.strategy") == "cooperative-sticky"
        self.lock = threading.Lock()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
                **extra,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assigned |= {p.partition for p in partitions}
        if self.cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self.assigned -= {p.partition for p in partitions}
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def stop_polling(self) -> None:
        """Stop the poll thread (the client's calls block while another thread polls it). Idempotent."""
        self._stop.set()
        self._thread.join(WAIT_S)

    def close(self) -> None:
        self.stop_polling()
        self.consumer.close()


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def four_partitions(kafka_broker: BrokerThread, topic_name: str) -> Iterator[str]:
    _create_topic(kafka_broker, topic_name, 4)
    yield topic_name


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_two_confluent_consumers_share_the_partitions_and_one_takes_all_when_the_other_leaves(
    kafka_broker: BrokerThread, four_partitions: str, assignor: str
) -> None:
    group = f"g-{assignor}-{four_partitions}"
    extra = {"partition.assignment.strategy": assignor}
    first = _Member(kafka_broker.kafka_bootstrap, group, four_partitions, **extra)
    second = _Member(kafka_broker.kafka_bootstrap, group, four_partitions, **extra)
    try:

        def split() -> bool:
            a, b = first.partitions(), second.partitions()
            return bool(a) and bool(b) and a | b == {0, 1, 2, 3} and not a & b

        _until(split, "both members to hold partitions")
        second.close()
        _until(lambda: first.partitions() == {0, 1, 2, 3}, "the remaining member to get all partitions")
    finally:
        first.close()


def test_commits_are_what_a_new_consumer_and_the_http_api_read(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    member = _Member(kafka_broker.kafka_bootstrap, group, four_partitions)
    try:
        _until(lambda: member.partitions() == {0, 1, 2, 3}, "the assignment")
        offsets = [TopicPartition(four_partitions, p, 10 + p) for p in range(4)]
        member.stop_polling()
        member.consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        member.close()
    assert _http_committed(kafka_broker, group) == {(four_partitions, p): 10 + p for p in range(4)}
    reader = Consumer({"bootstrap.servers": kafka_broker.kafka_bootstrap, "group.id": group})
    try:
        found = reader.committed([TopicPartition(four_partitions, p) for p in range(4)], timeout=WAIT_S)
        assert [(tp.partition, tp.offset) for tp in found] == [(p, 10 + p) for p in range(4)]
    finally:
        reader.close()


def test_a_commit_through_the_http_api_is_read_by_a_kafka_consumer(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    offsets = [{"topic": four_partitions, "partition": 2, "offset": 42}]
    _http(kafka_broker, "POST", f"/native/v1/groups/{group}/offsets/commit", {"offsets": offsets})
    reader = Consumer({"bootstrap.servers": kafka_broker.kafka_bootstrap, "group.id": group})
    try:
        (found,) = reader.committed([TopicPartition(four_partitions, 2)], timeout=WAIT_S)
        assert found.offset == 42
    finally:
        reader.close()


def test_admin_lists_describes_and_deletes_groups(kafka_broker: BrokerThread, four_partitions: str) -> None:
    group = f"g-{four_partitions}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.kafka_bootstrap})
    member = _Member(kafka_broker.kafka_bootstrap, group, four_partitions, **{"client.id": "one"})
    try:
        _until(lambda: member.partitions() == {0, 1, 2, 3}, "the assignment")
        member.stop_polling()
        member.consumer.commit(offsets=[TopicPartition(four_partitions, 0, 5)], asynchronous=False)
        listed = admin.list_consumer_groups(request_timeout=WAIT_S).result()
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group], request_timeout=WAIT_S)[group].result()
        assert described.state.name == "STABLE"
        (only,) = described.members
        assert only.client_id == "one"
        assert {tp.partition for tp in only.assignment.topic_partitions} == {0, 1, 2, 3}
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups([group], request_timeout=WAIT_S)[group].result()
    finally:
        member.close()
    admin.delete_consumer_groups([group], request_timeout=WAIT_S)[group].result()
    assert _http_committed(kafka_broker, group) == {}


def test_kafka_python_group_consumer_gets_an_assignment_and_commits(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    consumer = KafkaConsumer(
        four_partitions,
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=20_000,
        session_timeout_ms=10_000,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while len(consumer.assignment()) < 4 and time.monotonic() < deadline:
            # Group membership only: poll() would also look up positions (ListOffsets) and fetch,
            # which this listener does not serve yet.
            consumer._coordinator.poll(timeout_ms=100)
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2, 3}
        consumer.commit({KpTopicPartition(four_partitions, 1): OffsetAndMetadata(7, "", -1)})
        assert consumer.committed(KpTopicPartition(four_partitions, 1)) == 7
    finally:
        consumer.close()
    assert _http_committed(kafka_broker, group) == {(four_partitions, 1): 7}


async def test_aiokafka_group_consumer_gets_an_assignment_and_commits(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    consumer = AIOKafkaConsumer(
        four_partitions,
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=20_000,
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=100)
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2, 3}
        await consumer.commit({AioTopicPartition(four_partitions, 3): AioOffset(9, "")})
        assert await consumer.committed(AioTopicPartition(four_partitions, 3)) == 9
    finally:
        await consumer.stop()


def test_a_static_member_restarts_into_its_place(kafka_broker: BrokerThread, four_partitions: str) -> None:
    group = f"g-{four_partitions}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.kafka_bootstrap})
    extra = {"group.instance.id": "static-1", "session.timeout.ms": "30000"}
    first = _Member(kafka_broker.kafka_bootstrap, group, four_partitions, **extra)
    try:
        _until(lambda: first.partitions() == {0, 1, 2, 3}, "the first incarnation's assignment")
    finally:
        first.close()  # a static member does not leave the group when it closes
    second = _Member(kafka_broker.kafka_bootstrap, group, four_partitions, **extra)
    try:
        _until(lambda: second.partitions() == {0, 1, 2, 3}, "the second incarnation's assignment")
        described = admin.describe_consumer_groups([group], request_timeout=WAIT_S)[group].result()
        assert [m.group_instance_id for m in described.members] == ["static-1"]
    finally:
        second.close()


def test_a_group_with_kafka_members_refuses_http_members(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    member = _Member(kafka_broker.kafka_bootstrap, group, four_partitions)
    try:
        _until(lambda: member.partitions() == {0, 1, 2, 3}, "the assignment")
        with pytest.raises(urllib.error.HTTPError) as refused:
            _http(kafka_broker, "POST", f"/native/v1/groups/{group}/join", {"topics": [four_partitions]})
        assert refused.value.code == 409
        assert json.loads(refused.value.read())["error_code"] == 40914
    finally:
        member.close()


def test_a_group_with_http_members_refuses_kafka_members(
    kafka_broker: BrokerThread, four_partitions: str
) -> None:
    group = f"g-{four_partitions}"
    joined = _http(kafka_broker, "POST", f"/native/v1/groups/{group}/join", {"topics": [four_partitions]})
    consumer = KafkaConsumer(
        four_partitions,
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=20_000,
        session_timeout_ms=10_000,
    )
    try:
        with pytest.raises(InconsistentGroupProtocolError):
            consumer.poll(timeout_ms=int(WAIT_S * 1000))
    finally:
        consumer.close()
        _http(kafka_broker, "POST", f"/native/v1/groups/{group}/leave", {"member_id": joined["member_id"]})
