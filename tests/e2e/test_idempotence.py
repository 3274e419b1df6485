"""The idempotent producer against real ``tierlog serve`` processes (issue 16's proof; design 0011).

* The same batch sent twice is stored once, and both answers carry the same offsets (the second says
  ``duplicate``); an answer lost to a kill -9 right after the append is answered, on retry against the
  restarted broker, as a duplicate with the offsets the batch got.
* An out-of-order batch (40906) and a fenced one (40907) are refused and append nothing.
* Deduplication survives a clean restart (the producer snapshot taken at close) and a kill -9 with every
  ``.snapshot`` file deleted (the state rebuilt from the log), and a leader failover in a three-broker
  cluster (followers rebuild the state from the batches they copy).
* The Python client, idempotent by default, produces 100k keyed records through a proxy that drops answers
  and resets connections at random while the broker is killed with SIGKILL and restarted twice: every
  record is stored exactly once, in order per key.

Every wait polls a condition against a deadline; nothing asserts a timing.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.chaos_proxy import ChaosProxy
from tests.e2e.idempotence_harness import (
    EmbeddedBroker,
    Idempotent,
    create_topic,
    error_code,
    log_end,
    metric,
    new_producer_id,
    offsets,
    post_batch,
    read_partition,
    snapshot_files,
)
from tests.e2e.process import DEADLINE_S
from tests.e2e.replication_harness import FAILOVER_DEADLINE_S, ReplicatedCluster, wait_for
from tests.e2e.test_cluster_processes import Answer, free_port
from tests.integration.cluster.etcd import EtcdServer
from tierlog.client import Producer
from tierlog.client.sync_producer import RecordFuture
from tierlog.client.types import RecordMetadata

pytestmark = pytest.mark.integration

TOPIC = "idem"
OUT_OF_ORDER = 40906
FENCED = 40907
DUPLICATE_SEQUENCE = 40908


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """An embedded broker (restartable in place) with ``TOPIC`` of one partition; killed afterwards."""
    running = EmbeddedBroker(tmp_path / "broker")
    running.start()
    try:
        create_topic(running.url, TOPIC, 1)
        yield running
    finally:
        running.kill()


def duplicate_of(answer: Answer, first: tuple[int, int, tuple[int, ...]]) -> None:
    """Assert ``answer`` is a 200 ``duplicate`` answer with the offsets ``first`` named."""
    assert answer.status == 200, (answer.status, answer.body)
    assert answer.json()["duplicate"] is True, answer.body
    assert offsets(answer) == first


def values_of(url: str, partition: int = 0) -> list[bytes]:
    return [r.value for r in read_partition(url, TOPIC, partition)]


def test_the_same_batch_twice_is_stored_once_with_the_same_offsets(broker: EmbeddedBroker) -> None:
    producer = Idempotent.register(broker.url)
    assert producer.producer_id >= 0 and producer.epoch == 0
    assert post_batch(broker.url, TOPIC, 0, producer.batch([b"a0", b"a1"])).status == 200
    batch = producer.batch([b"b0", b"b1", b"b2"])
    first = post_batch(broker.url, TOPIC, 0, batch)
    assert first.status == 200 and first.json()["duplicate"] is False, first.body
    assert offsets(first) == (2, 4, (2,))
    duplicate_of(post_batch(broker.url, TOPIC, 0, batch), offsets(first))
    assert log_end(broker.url, TOPIC, 0) == 5
    assert values_of(broker.url) == [b"a0", b"a1", b"b0", b"b1", b"b2"]
    assert metric(broker.url, "tierlog_produce_duplicates_total", topic=TOPIC) == 1
    # the next sequence is still accepted after the duplicate
    after = post_batch(broker.url, TOPIC, 0, producer.batch([b"c0"]))
    assert after.status == 200 and after.json()["duplicate"] is False and offsets(after)[0] == 5


def test_a_retry_after_kill_9_between_the_append_and_the_answer_stores_the_batch_once(
    broker: EmbeddedBroker,
) -> None:
    producer = Idempotent.register(broker.url)
    assert post_batch(broker.url, TOPIC, 0, producer.batch([b"before"])).status == 200
    batch = producer.batch([b"lost-0", b"lost-1"])
    with ChaosProxy(broker.port, seed=16) as proxy:
        dropped = proxy.drop_next_answer()
        with pytest.raises(OSError):
            post_batch(proxy.url, TOPIC, 0, batch)
        assert dropped.wait(DEADLINE_S)
        broker.kill()  # the answer was lost; the broker dies before anyone could retry
        broker.start()
        retried = post_batch(proxy.url, TOPIC, 0, batch)
    stored = read_partition(broker.url, TOPIC, 0)
    assert [r.value for r in stored] == [b"before", b"lost-0", b"lost-1"], broker.logs()[-3000:]
    duplicate_of(retried, (1, 2, (1,)))
    assert {(r.producer_id, r.base_sequence) for r in stored[1:]} == {(producer.producer_id, 1)}


def test_an_out_of_order_and_a_fenced_batch_are_refused_and_append_nothing(broker: EmbeddedBroker) -> None:
    producer = Idempotent.register(broker.url)
    assert post_batch(broker.url, TOPIC, 0, producer.batch([b"s0", b"s1"])).status == 200
    gap = post_batch(broker.url, TOPIC, 0, producer.batch([b"gap"], sequence=5))
    assert (gap.status, error_code(gap)) == (409, OUT_OF_ORDER), gap.body
    # a bumped epoch writes; the old epoch is fenced from then on
    bumped = new_producer_id(broker.url, (producer.producer_id, producer.epoch))
    assert bumped == (producer.producer_id, producer.epoch + 1)
    new_instance = Idempotent(bumped[0], bumped[1])
    assert post_batch(broker.url, TOPIC, 0, new_instance.batch([b"new-0"])).status == 200
    end = log_end(broker.url, TOPIC, 0)
    fenced = post_batch(broker.url, TOPIC, 0, producer.batch([b"zombie"]))
    assert (fenced.status, error_code(fenced)) == (409, FENCED), fenced.body
    gap_again = post_batch(broker.url, TOPIC, 0, new_instance.batch([b"gap-2"], sequence=3))
    assert (gap_again.status, error_code(gap_again)) == (409, OUT_OF_ORDER), gap_again.body
    assert log_end(broker.url, TOPIC, 0) == end == 3
    assert values_of(broker.url) == [b"s0", b"s1", b"new-0"]
    assert metric(broker.url, "tierlog_produce_sequence_errors_total", topic=TOPIC) == 3


def test_deduplication_survives_a_clean_restart_from_the_snapshot(broker: EmbeddedBroker) -> None:
    producer = Idempotent.register(broker.url)
    for n in range(3):
        assert post_batch(broker.url, TOPIC, 0, producer.batch([b"x%d" % n])).status == 200
    last = producer.batch([b"last"])
    first = offsets(post_batch(broker.url, TOPIC, 0, last))
    assert broker.stop() == 0, broker.logs()[-3000:]
    snapshots = snapshot_files(broker.data_dir, TOPIC, 0)
    assert snapshots and snapshots[-1].name == f"{4:020d}.snapshot", snapshots  # taken at close, at the end
    broker.start()
    duplicate_of(post_batch(broker.url, TOPIC, 0, last), first)
    # the producer is known (not accepted at any sequence as an unknown one would be)
    gap = post_batch(broker.url, TOPIC, 0, producer.batch([b"gap"], sequence=producer.next_sequence + 3))
    assert (gap.status, error_code(gap)) == (409, OUT_OF_ORDER), gap.body
    assert values_of(broker.url) == [b"x0", b"x1", b"x2", b"last"]


def test_deduplication_survives_kill_9_with_every_snapshot_deleted(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.start()
    try:
        create_topic(broker.url, TOPIC, 1, {"segment.bytes": "1024"})
        producer = Idempotent.register(broker.url)
        answers = []
        batches = []
        for n in range(30):  # some 150 bytes per batch: a roll every few batches
            batches.append(producer.batch([b"%03d-" % n + b"v" * 80]))
            answers.append(offsets(post_batch(broker.url, TOPIC, 0, batches[-1])))
        assert snapshot_files(broker.data_dir, TOPIC, 0), "no snapshot after segment rolls"
        broker.kill()
        for path in snapshot_files(broker.data_dir, TOPIC, 0):
            path.unlink()
        broker.start()
        for batch, first in zip(batches[-5:], answers[-5:], strict=True):  # the five cached batches
            duplicate_of(post_batch(broker.url, TOPIC, 0, batch), first)
        older = post_batch(broker.url, TOPIC, 0, batches[0])  # stored, but older than the cached five
        assert (older.status, error_code(older)) == (409, DUPLICATE_SEQUENCE), older.body
        gap = post_batch(broker.url, TOPIC, 0, producer.batch([b"gap"], sequence=producer.next_sequence + 1))
        assert (gap.status, error_code(gap)) == (409, OUT_OF_ORDER), gap.body
        assert len(values_of(broker.url)) == 30
        assert post_batch(broker.url, TOPIC, 0, producer.batch([b"next"])).json()["duplicate"] is False
    except BaseException:
        print(broker.logs()[-5000:])
        raise
    finally:
        broker.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    """One etcd and brokers 1..3 (as ``test_replication_chaos``); every process killed afterwards."""
    etcd = EtcdServer(tmp_path / "etcd")
    etcd.start()
    running = ReplicatedCluster(etcd, tmp_path)
    try:
        for broker_id in (1, 2, 3):
            running.start(broker_id)
        yield running
    finally:
        for process in running.brokers.values():
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)
            process.kill()
        etcd.stop()


def post_until_answered(url: str, batch: bytes, deadline_s: float) -> Answer:
    """Post ``batch`` with acks=all until an answer that is not a retriable 5xx (a leader taking its role,
    an ISR still shrinking); the last answer at the deadline. Safe only because the batch is idempotent."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            answer = post_batch(url, TOPIC, 0, batch, acks="all")
        except OSError:
            answer = Answer(599, b"unreachable", {})
        if answer.status < 500 or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)  # a retry backoff; nothing asserts on it


@pytest.mark.slow
def test_deduplication_survives_a_leader_failover(cluster: ReplicatedCluster) -> None:
    settled = cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    leader = int(settled[0]["leader"])
    producer = Idempotent.register(cluster.url(leader))
    assert post_until_answered(cluster.url(leader), producer.batch([b"p0", b"p1"]), 10).status == 200
    batch = producer.batch([b"q0", b"q1", b"q2"])
    first = post_until_answered(cluster.url(leader), batch, 10)
    assert first.json()["duplicate"] is False, first.body
    first_offsets = offsets(first)
    assert first_offsets == (2, 4, (2,))
    cluster.brokers[leader].kill()

    def new_leader() -> int | None:
        state = cluster.partitions(TOPIC).get(0)
        if state is None or state["leader"] == leader or state["leader"] not in cluster.live():
            return None
        return int(state["leader"]) if cluster.serves(int(state["leader"]), TOPIC, 0) else None

    successor = wait_for("a new leader serving the partition", new_leader, FAILOVER_DEADLINE_S)
    again = post_until_answered(cluster.url(successor), batch, FAILOVER_DEADLINE_S)
    try:
        duplicate_of(again, first_offsets)
    except AssertionError:
        print(cluster.all_logs()[-8000:])
        raise
    assert values_of(cluster.url(successor)) == [b"p0", b"p1", b"q0", b"q1", b"q2"]


CHAOS_RECORDS = 100_000
CHAOS_KEYS = 200
CHAOS_PARTITIONS = 4


@pytest.mark.slow
def test_the_client_stores_every_record_once_in_order_through_chaos_and_kill_9(tmp_path: Path) -> None:
    """100k keyed records (value ``key:n``, n counting per key) from the idempotent Python client through a
    proxy dropping 3% of answers and resetting 2% of requests, the broker killed with SIGKILL and restarted
    twice while records are in flight; then every partition is read straight from the broker."""
    proxy_port = free_port()  # known before the broker starts: its metadata names the proxy
    broker = EmbeddedBroker(tmp_path / "broker", advertised_url=f"http://127.0.0.1:{proxy_port}")
    broker.start()
    proxy = ChaosProxy(broker.port, port=proxy_port, seed=16)
    counters: dict[bytes, int] = defaultdict(int)
    sent_values: list[bytes] = []
    futures: list[RecordFuture] = []
    try:
        create_topic(broker.url, TOPIC, CHAOS_PARTITIONS)
        proxy.drop_rate, proxy.reset_rate = 0.03, 0.02
        producer = Producer(
            proxy.url,
            linger_ms=5,
            batch_size=2048,
            delivery_timeout_ms=300_000,
            request_timeout_ms=10_000,
            retry_backoff_ms=20,
            retry_backoff_max_ms=500,
        )
        try:
            for kills, upto in enumerate((CHAOS_RECORDS // 3, 2 * CHAOS_RECORDS // 3, CHAOS_RECORDS)):
                while len(futures) < upto:
                    key = b"k%03d" % (len(futures) % CHAOS_KEYS)
                    sent_values.append(key + b":%d" % counters[key])
                    counters[key] += 1
                    futures.append(producer.send(TOPIC, sent_values[-1], key=key))
                if kills < 2:  # kill -9 once half of this third is acknowledged, the rest maybe in flight
                    futures[upto - CHAOS_RECORDS // 6].get(DEADLINE_S * 3)
                    broker.kill()
                    broker.start()
            producer.flush(300)
            metadata: list[RecordMetadata] = [f.get(0) for f in futures]
        finally:
            producer.close(30)
        stats = proxy.stats()
    except BaseException:
        print(broker.logs()[-8000:])
        raise
    finally:
        proxy.close()
    try:
        stored = {p: read_partition(broker.url, TOPIC, p) for p in range(CHAOS_PARTITIONS)}
    finally:
        broker.kill()
    print(f"chaos: {stats}")
    assert stats.dropped_answers > 0 and stats.resets > 0, stats
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for records in stored.values():
        for record in records:
            key, _, n = record.value.partition(b":")
            assert record.key == key, record
            per_key[key].append(int(n))
    assert sum(len(r) for r in stored.values()) == CHAOS_RECORDS
    assert {k: len(v) for k, v in per_key.items()} == dict(counters)
    for key, ns in per_key.items():
        assert ns == list(range(counters[key])), key  # once each, in the order sent
    by_offset = {(p, r.offset): r.value for p, records in stored.items() for r in records}
    for meta, value in zip(metadata, sent_values, strict=True):
        if meta.offset >= 0:  # -1: DuplicateSequenceError, stored but its offset unknown
            assert by_offset[(meta.partition, meta.offset)] == value
