"""Kafka's own clients against a 3-broker cluster (issue 30, "Cluster"): brokers are in-process apps sharing
one metadata store (:class:`~tests.integration.cluster.inproc.InprocCluster`), each with its Kafka listener
on a free port; topics have RF 3 and ``min.insync.replicas=2``.

Metadata lists every broker's endpoint and each partition's leader; an idempotent ``acks=all``
confluent-kafka producer reaches every leader; a follower refuses Produce, Fetch before v11 (KIP-392 lets
later ones read it), ListOffsets and OffsetForLeaderEpoch with NOT_LEADER_OR_FOLLOWER and the current
leader where the version has it (KIP-951 for Produce); a producer whose metadata names a deposed leader
is refused by it and re-routes (the preferred replica taking its partition back); and when a partition's
leader stops while records are being produced, the client finds the new leader and every acknowledged
record is read back through Fetch exactly once, at contiguous offsets, by a consumer that was reading
before the failover and goes on after it (OffsetForLeaderEpoch validation, ListOffsets on the new
leader). DeleteRecords is refused by a
follower and moves the leader's log start offset, which the followers then follow.

confluent-kafka's calls block, so they run in threads (``asyncio.to_thread``) while the brokers serve
from the test's event loop. Every wait is bounded by :data:`DEADLINE_S`. The failover test prints the
time from the stop to the first record acknowledged after it (``-s``); nothing asserts a timing. The crash
case (SIGKILL, failover after the broker session timeout) is ``tests/e2e/test_kafka_failover.py``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.cluster.inproc import DEADLINE_S, InprocCluster
from tests.integration.kafka.test_fetch import Raw
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 3
PRODUCE_KEY = 0
FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23
DELETE_RECORDS_KEY = 21
NOT_LEADER_OR_FOLLOWER = 6
BEFORE_STOP = 150  # records acknowledged before the leader is stopped
AFTER_STOP = 150  # ... and after it
# preferred-leader election every second, so a restarted leader takes its partitions back quickly
SETTINGS = {"auto.create.topics.enable": "false", "leader.imbalance.check.interval.seconds": "1"}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path) as running:
        await running.start(3, SETTINGS)
        await running.brokers[1].broker.create_topic(
            TOPIC, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=3
        )
        await running.wait_for(lambda: full_isr(running), "every partition led, with an ISR of 3")
        yield running


def full_isr(cluster: InprocCluster) -> bool:
    if not cluster.converged(TOPIC):
        return False
    view = next(iter(cluster.brokers.values())).broker.cluster_view()
    return all(len(p.isr) == len(cluster.brokers) for p in view.partitions[TOPIC])


def bootstrap(cluster: InprocCluster) -> str:
    return ",".join(r.kafka_bootstrap for r in cluster.brokers.values())


def producer(cluster: InprocCluster, **config: Any) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 200,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
            "message.timeout.ms": int(DEADLINE_S * 1000),
            **config,
        }
    )


def consumer(cluster: InprocCluster, **config: Any) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": "unused",  # required by the client; manual assignment uses no group
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 500,
            **config,
        }
    )


def consume(client: confluent_kafka.Consumer, count: int) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of the next ``count`` records (blocking, bounded by DEADLINE_S)."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        for message in client.consume(count - len(got), timeout=0.5):
            error = message.error()
            assert error is None or error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
            if error is None:
                offset = message.offset()
                value = message.value()
                assert offset is not None and value is not None
                got.append((offset, value))
    return got


# ---- Metadata and routing -----------------------------------------------------------------------------


async def test_metadata_lists_every_broker_and_produce_reaches_each_leader(cluster: InprocCluster) -> None:
    client = producer(cluster)
    metadata = await asyncio.to_thread(client.list_topics, TOPIC, DEADLINE_S)
    endpoints = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    assert endpoints == {i: r.kafka_bootstrap for i, r in cluster.brokers.items()}
    leaders = cluster.leaders(TOPIC)
    topic = metadata.topics[TOPIC]
    assert topic.error is None
    assert [topic.partitions[i].leader for i in range(PARTITIONS)] == leaders
    assert all(sorted(p.replicas) == sorted(p.isrs) == [1, 2, 3] for p in topic.partitions.values())
    assert sorted(leaders) == [1, 2, 3]  # one partition led by each broker: produce reaches all three

    delivered: list[tuple[int, int]] = []

    def report(err: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
        assert err is None, err
        delivered.append((message.partition() or 0, message.offset() or 0))

    for i in range(30):
        client.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=report)
    assert await asyncio.to_thread(client.flush, DEADLINE_S) == 0
    assert sorted(delivered) == [(p, o) for p in range(PARTITIONS) for o in range(10)]
    for index, leader in enumerate(leaders):
        partition = cluster.brokers[leader].broker.local_topics[TOPIC].local(index)
        assert partition is not None and partition.log_end_offset == 10


def _call(endpoint: str, key: int, version: int, **fields: Any) -> Any:
    """One request of ``key`` at ``version`` (built with kio) on a connection of its own; its answer."""
    connection = Raw(endpoint)
    try:
        return connection.call(key, version, **fields)
    finally:
        connection.close()


def _produce(endpoint: str, version: int, partition: int) -> Any:
    """One ``acks=all`` Produce of ``version`` to ``endpoint``; its answer."""
    batch = build_batch([Record(None, b"misrouted")])
    wanted = {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}
    return _call(
        endpoint, PRODUCE_KEY, version, transactional_id=None, acks=-1, timeout=10_000, topic_data=[wanted]
    )


@pytest.mark.parametrize("version", [8, 10, 12])
async def test_a_follower_refuses_produce_naming_the_leader(cluster: InprocCluster, version: int) -> None:
    leader = cluster.leaders(TOPIC)[0]
    follower = next(i for i in cluster.brokers if i != leader)
    answer = await asyncio.to_thread(_produce, cluster.brokers[follower].kafka_bootstrap, version, 0)
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == NOT_LEADER_OR_FOLLOWER
    if version >= 10:  # KIP-951: the leader and its endpoint, so the client re-routes at once
        assert part.current_leader.leader_id == leader
        assert part.current_leader.leader_epoch == leader_epoch(cluster, 0)
        (node,) = answer.node_endpoints
        assert (node.node_id, f"{node.host}:{node.port}") == (leader, cluster.brokers[leader].kafka_bootstrap)
    partition = cluster.brokers[leader].broker.local_topics[TOPIC].local(0)
    assert partition is not None and partition.log_end_offset == 0


@pytest.mark.parametrize("version", [4, 10])
async def test_a_follower_refuses_reads_naming_the_leader(cluster: InprocCluster, version: int) -> None:
    """Fetch before v11 (which carries the consumer's rack: KIP-392 lets it read a follower, see
    test_follower_fetch.py), ListOffsets and OffsetForLeaderEpoch are for the leader only."""
    leader = cluster.leaders(TOPIC)[1]
    follower = next(i for i in cluster.brokers if i != leader)
    endpoint = cluster.brokers[follower].kafka_bootstrap
    wanted = {
        "topic": TOPIC,
        "partitions": [{"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1024}],
    }
    fetched = await asyncio.to_thread(
        _call, endpoint, FETCH_KEY, version, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1024,
        topics=[wanted],
    )  # fmt: skip
    (part,) = fetched.responses[0].partitions
    assert part.error_code == NOT_LEADER_OR_FOLLOWER
    for key, asked in (
        (LIST_OFFSETS_KEY, {"name": TOPIC, "partitions": [{"partition_index": 1, "timestamp": -1}]}),
        (OFFSET_FOR_LEADER_EPOCH_KEY, {"topic": TOPIC, "partitions": [{"partition": 1, "leader_epoch": 0}]}),
    ):
        answer = await asyncio.to_thread(_call, endpoint, key, 4, replica_id=-1, topics=[asked])
        assert answer.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER, key


def leader_epoch(cluster: InprocCluster, index: int) -> int:
    view = next(iter(cluster.brokers.values())).broker.cluster_view()
    return view.partitions[TOPIC][index].leader_epoch


# ---- Leader failover ----------------------------------------------------------------------------------


class Acks:
    """Delivery reports of a producing thread: ``(offset, value, monotonic time)`` of each, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[tuple[int, bytes, float]] = []
        self.errors: list[confluent_kafka.KafkaError] = []

    def report(self, err: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(err)
                return
            value = message.value()
            assert value is not None
            self.acked.append((message.offset() or 0, value, time.monotonic()))

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def after(self, moment: float) -> int:
        with self.lock:
            return sum(1 for _, _, at in self.acked if at > moment)

    def first_after(self, moment: float) -> float:
        with self.lock:
            return min(at for _, _, at in self.acked if at > moment)


def produce_until(client: confluent_kafka.Producer, acks: Acks, stop: threading.Event) -> int:
    """Produce to partition 0, a few records in flight at a time, until ``stop``; flush; how many sent."""
    sent = 0
    while not stop.is_set():
        if sent - acks.count() - len(acks.errors) < 20:
            client.produce(TOPIC, f"record-{sent}".encode(), partition=0, on_delivery=acks.report)
            sent += 1
        client.poll(0.005)
    assert client.flush(DEADLINE_S) == 0, "records still undelivered"
    return sent


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_leader_failover_loses_and_duplicates_no_acknowledged_record(cluster: InprocCluster) -> None:
    old = cluster.leaders(TOPIC)[0]
    old_epoch = leader_epoch(cluster, 0)
    lines, logger = debug_log("test.rdkafka.failover")
    reader = consumer(cluster, debug="protocol", logger=logger)
    try:
        reader.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
        sent, before, failover_s = await produce_across_failover(cluster, reader)
        print(f"failover: stop -> first acknowledged record on the new leader in {failover_s:.3f} s")
        new = cluster.leaders(TOPIC)[0]
        assert new not in (old, -1) and leader_epoch(cluster, 0) > old_epoch

        # the consumer that read before the failover validates its position on the new leader and goes on
        lines.clear()
        after = await asyncio.to_thread(consume, reader, sent - len(before))
        assert [offset for offset, _ in before + after] == list(range(sent))
        assert [value for _, value in before + after] == [f"record-{i}".encode() for i in range(sent)]
        watermarks = await asyncio.to_thread(
            reader.get_watermark_offsets, confluent_kafka.TopicPartition(TOPIC, 0), DEADLINE_S
        )
        assert watermarks == (0, sent)
        by_time = await asyncio.to_thread(
            reader.offsets_for_times, [confluent_kafka.TopicPartition(TOPIC, 0, 0)], DEADLINE_S
        )
        assert [tp.offset for tp in by_time] == [0]
    finally:
        await asyncio.to_thread(reader.close)
    new_at = f"{cluster.brokers[new].kafka_bootstrap}/{new}: Received"
    for api in ("OffsetForLeaderEpochResponse", "ListOffsetsResponse"):
        assert any(new_at in line and api in line for line in lines), f"no {api} from the new leader"


async def produce_across_failover(
    cluster: InprocCluster, reader: confluent_kafka.Consumer
) -> tuple[int, list[tuple[int, bytes]], float]:
    """Produce to partition 0 with an idempotent ``acks=all`` producer, read some of it with ``reader``,
    stop the leader, produce on; check that every record sent was acknowledged once, at contiguous offsets.
    Returns (records sent, what ``reader`` read, seconds from the stop to the first record acknowledged
    after it)."""
    acks = Acks()
    stop = threading.Event()
    producing = asyncio.create_task(asyncio.to_thread(produce_until, producer(cluster), acks, stop))
    try:
        await wait_until(lambda: acks.count() >= BEFORE_STOP, f"{BEFORE_STOP} acknowledged records")
        before = await asyncio.to_thread(consume, reader, BEFORE_STOP // 2)  # reading while producing
        stopped_at = time.monotonic()
        await cluster.stop_broker(cluster.leaders(TOPIC)[0])
        stop_done = time.monotonic()
        await wait_until(lambda: acks.after(stop_done) > 0, "a record acknowledged by the new leader")
        failover_s = acks.first_after(stop_done) - stopped_at
        await wait_until(lambda: acks.after(stop_done) >= AFTER_STOP, f"{AFTER_STOP} more records")
    finally:
        stop.set()
        sent = await producing
    assert acks.errors == []
    acked = sorted((offset, value) for offset, value, _ in acks.acked)
    assert [offset for offset, _ in acked] == list(range(sent))  # contiguous: no gap, no duplicate
    assert sorted(value for _, value in acked) == sorted(f"record-{i}".encode() for i in range(sent))
    return sent, before, failover_s


def debug_log(name: str) -> tuple[list[str], logging.Logger]:
    """A logger for librdkafka's debug lines (``logger=`` in a client's config) and the list they go to."""
    lines: list[str] = []
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers = [ListHandler(lines)]
    return lines, logger


async def test_a_producer_on_a_deposed_leader_is_told_the_new_one_and_re_routes(
    cluster: InprocCluster,
) -> None:
    preferred = cluster.leaders(TOPIC)[0]
    lines, logger = debug_log("test.rdkafka.deposed")
    client = producer(cluster, debug="msg,protocol", logger=logger)
    acks = Acks()

    async def produce(count: int) -> None:
        first = acks.count()
        for _ in range(count):
            client.produce(TOPIC, f"record-{first}".encode(), partition=0, on_delivery=acks.report)
            first += 1
        assert await asyncio.to_thread(client.flush, DEADLINE_S) == 0

    try:
        await produce(10)
        await cluster.stop_broker(preferred)
        await cluster.wait_for(lambda: cluster.leaders(TOPIC)[0] not in (preferred, -1), "a new leader")
        interim = cluster.leaders(TOPIC)[0]
        await produce(10)  # the client learns of the interim leader (its old connection broke)
        await cluster.start_broker(preferred)
        await cluster.wait_for(
            lambda: cluster.leaders(TOPIC)[0] == preferred and cluster.converged(TOPIC),
            "the preferred replica to lead again",
        )
        lines.clear()
        await produce(10)  # its metadata still names the interim leader, which refuses and names the new one
    finally:
        logger.handlers = []
    assert acks.errors == []
    assert sorted(offset for offset, _, _ in acks.acked) == list(range(30))
    partition = cluster.brokers[preferred].broker.local_topics[TOPIC].local(0)
    assert partition is not None and partition.log_end_offset == 30
    # librdkafka's own account: the interim leader refused, the preferred one took the same batch
    interim_at = f"{cluster.brokers[interim].kafka_bootstrap}/{interim}"
    preferred_at = f"{cluster.brokers[preferred].kafka_bootstrap}/{preferred}"
    assert any(interim_at in line and "Not leader for partition" in line for line in lines), lines
    assert any(preferred_at in line and "delivered" in line for line in lines), lines


class ListHandler(logging.Handler):
    """Collects the formatted log lines librdkafka's logger callback passes on."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


# ---- DeleteRecords --------------------------------------------------------------------------------------


async def test_delete_records_moves_the_leaders_log_start_then_its_followers(cluster: InprocCluster) -> None:
    leader = cluster.leaders(TOPIC)[2]
    client = producer(cluster)
    for i in range(5):
        client.produce(TOPIC, f"v{i}".encode(), partition=2)
    assert await asyncio.to_thread(client.flush, DEADLINE_S) == 0
    follower = next(i for i in cluster.brokers if i != leader)
    wanted = [{"name": TOPIC, "partitions": [{"partition_index": 2, "offset": 3}]}]
    refused = await asyncio.to_thread(
        _call, cluster.brokers[follower].kafka_bootstrap, DELETE_RECORDS_KEY, 2, topics=wanted, timeout=10_000
    )
    assert refused.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    (future,) = admin.delete_records([confluent_kafka.TopicPartition(TOPIC, 2, 3)]).values()
    assert (await asyncio.to_thread(future.result, DEADLINE_S)).low_watermark == 3

    def starts() -> list[int]:
        replicas = [r.broker.local_topics[TOPIC].local(2) for r in cluster.brokers.values()]
        return [-1 if p is None else p.log_start_offset for p in replicas]

    await cluster.wait_for(lambda: starts() == [3, 3, 3], "every replica's log start at 3")
