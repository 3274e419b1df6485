"""A partition leader SIGKILLed under an idempotent ``acks=all`` confluent-kafka producer, in a cluster of
real processes (one etcd, three ``tierlog serve`` brokers, each with its Kafka listener on a port of its own):
the lease expires, the controller elects an in-sync follower, the client finds it through Metadata, and
every record it acknowledged is read back through Fetch exactly once, at contiguous offsets (issue 30,
"leader failover in a 3-broker cluster without acked loss").

The in-process suite (``tests/integration/kafka/test_cluster.py``) covers a clean stop, routing and hints;
this one is the crash, where failover waits for the broker session timeout (3 s here). The time from the
kill to the first record acknowledged after it is printed (``-s``); nothing asserts a timing.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import pytest

from tests.e2e.process import BrokerProcess
from tests.e2e.replication_harness import FAILOVER_DEADLINE_S, ReplicatedCluster, wait_for
from tests.integration.cluster.etcd import EtcdServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "payments"
BEFORE_KILL = 200  # records acknowledged before the leader is killed
AFTER_KILL = 200  # ... and after it


LISTENER = re.compile(r"Kafka protocol listener on (127\.0\.0\.1:\d+)")


@dataclass
class KafkaCluster(ReplicatedCluster):
    """The process cluster with each broker's Kafka endpoint (its listener is on a free port)."""

    kafka: dict[int, str] = field(default_factory=dict)

    def start(self, broker_id: int) -> BrokerProcess:
        process = super().start(broker_id)
        self.kafka[broker_id] = process.wait_for_line(LISTENER).group(1)
        return process

    def bootstrap(self) -> str:
        return ",".join(self.kafka.values())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    etcd = EtcdServer(tmp_path / "etcd")
    etcd.start()
    running = KafkaCluster(etcd, tmp_path)
    try:
        with ThreadPoolExecutor(3) as pool:  # three interpreters starting at once: a third of the wait
            list(pool.map(running.start, (1, 2, 3)))
        yield running
    finally:
        for process in running.brokers.values():
            process.kill()
        etcd.stop()


class Producing:
    """An idempotent ``acks=all`` producer sending numbered records to partition 0 from a thread, a few in
    flight at a time, until :meth:`finish`; keeps ``(offset, value, monotonic time)`` of every ack."""

    def __init__(self, bootstrap: str) -> None:
        self.client = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 200,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
                "message.timeout.ms": int(FAILOVER_DEADLINE_S * 1000),
            }
        )
        self.lock = threading.Lock()
        self.acked: list[tuple[int, bytes, float]] = []
        self.errors: list[confluent_kafka.KafkaError] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-producer", daemon=True)
        self._thread.start()

    def _report(self, err: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(err)
                return
            value = message.value()
            assert value is not None
            self.acked.append((message.offset() or 0, value, time.monotonic()))

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                in_flight = self.sent - len(self.acked) - len(self.errors)
            if in_flight < 20:
                self.client.produce(
                    TOPIC, f"record-{self.sent}".encode(), partition=0, on_delivery=self._report
                )
                self.sent += 1
            self.client.poll(0.005)
        self.client.flush(FAILOVER_DEADLINE_S)

    def count(self, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for _, _, at in self.acked if at > since)

    def resumed_after(self, since: float) -> float:
        """When acks resumed after the longest pause that ended after ``since`` (reports of answers the
        old leader sent before it died may still come in just after ``since``)."""
        with self.lock:
            times = sorted(at for _, _, at in self.acked)
        pauses = [(later - earlier, later) for earlier, later in itertools.pairwise(times) if later > since]
        return max(pauses)[1]

    def finish(self) -> None:
        """Stop sending, flush (bounded) and join."""
        self._stop.set()
        self._thread.join(FAILOVER_DEADLINE_S + 10)
        assert not self._thread.is_alive(), "the producer thread did not finish"


def read_all(bootstrap: str, count: int) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of partition 0's first ``count`` records, through a Kafka consumer (Fetch)."""
    reader = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    got: list[tuple[int, bytes]] = []
    try:
        reader.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + FAILOVER_DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            for message in reader.consume(count - len(got), timeout=0.5):
                assert message.error() is None, message.error()
                offset, value = message.offset(), message.value()
                assert offset is not None and value is not None
                got.append((offset, value))
    finally:
        reader.close()
    return got


def test_a_killed_leader_loses_no_acknowledged_record(cluster: KafkaCluster) -> None:
    settled = cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    old = int(settled[0]["leader"])
    producing = Producing(cluster.bootstrap())
    try:
        wait_for(f"{BEFORE_KILL} acknowledged records", lambda: producing.count() >= BEFORE_KILL)
        killed_at = time.monotonic()
        cluster.brokers[old].kill()
        wait_for(
            "a record acknowledged after the kill",
            lambda: producing.count(killed_at) > 0,
            FAILOVER_DEADLINE_S,
        )
        wait_for(f"{AFTER_KILL} more records", lambda: producing.count(killed_at) >= AFTER_KILL)
    finally:
        producing.finish()
    failover_s = producing.resumed_after(killed_at) - killed_at
    print(f"failover after SIGKILL: first acknowledged record {failover_s:.3f} s after the kill")
    new = cluster.partitions(TOPIC)[0]["leader"]
    assert new not in (old, -1)
    assert producing.errors == []

    acked = sorted((offset, value) for offset, value, _ in producing.acked)
    sent = producing.sent
    assert [offset for offset, _ in acked] == list(range(sent))  # every record acked once, no gap
    read = read_all(cluster.bootstrap(), sent)
    assert read == acked
    assert [value for _, value in read] == [f"record-{i}".encode() for i in range(sent)]
