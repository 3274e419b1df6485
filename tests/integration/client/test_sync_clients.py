"""The synchronous Producer and Consumer (each on its own loop thread) against a broker in another thread."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.broker import BrokerThread
from tierlog.client import (
    BufferExhaustedError,
    ClientClosedError,
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    DeliveryTimeoutError,
    IllegalStateError,
    InvalidRequestError,
    OffsetAndMetadata,
    Producer,
    RecordMetadata,
    RecordTooLargeError,
    TopicPartition,
)


def poll_n(consumer: Consumer, count: int, within: float = 15.0) -> list[ConsumerRecord]:
    deadline = time.monotonic() + within
    records: list[ConsumerRecord] = []
    while len(records) < count and time.monotonic() < deadline:
        records += consumer.poll(timeout=0.2, max_records=count - len(records))
    assert len(records) == count, f"polled {len(records)} of {count}"
    return records


def test_producer_futures_callbacks_and_close(thread_broker: BrokerThread) -> None:
    successes: list[RecordMetadata] = []
    failures: list[Exception] = []
    delivered = threading.Event()
    producer = Producer(thread_broker.url, linger_ms=5, max_request_size=2048)
    try:
        assert producer.send("sync", b"first", partition=0).get(timeout=10).offset == 0
        future = producer.send("sync", b"second", partition=0).add_callback(successes.append)
        future.add_errback(failures.append)
        producer.send("sync", b"third", partition=0, callback=lambda m, e: delivered.set())
        for i in range(20):
            producer.send("sync", b"fire and forget %d" % i, partition=1)
        producer.flush()
        assert future.done() and delivered.is_set()
        assert successes == [future.result()] and successes[0].offset == 1 and failures == []
        with pytest.raises(RecordTooLargeError):
            producer.send("sync", b"x" * 4096)
        assert producer.partitions_for("sync") == {0, 1, 2}
    finally:
        producer.close()
    assert not producer._thread._thread.is_alive()
    producer.close()
    with pytest.raises(ClientClosedError):
        producer.send("sync", b"late")


def test_bad_options_fail_in_the_constructor() -> None:
    before = threading.active_count()
    with pytest.raises(InvalidRequestError, match="lingr_ms"):
        Producer("http://127.0.0.1:1", lingr_ms=5)
    with pytest.raises(InvalidRequestError, match="auto_offset_reset"):
        Consumer(bootstrap_servers="http://127.0.0.1:1", auto_offset_reset="oldest")
    assert threading.active_count() == before


class CommittingListener(ConsumerRebalanceListener):
    """Commits the consumer's positions when partitions are revoked: a blocking call from a callback."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.assigned: set[TopicPartition] = set()
        self.revocations = 0
        self.changed = threading.Condition()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        assert self.consumer is not None
        self.consumer.commit()
        with self.changed:
            self.revocations += 1
            self.assigned = set()
            self.changed.notify_all()

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        with self.changed:
            self.assigned = set(assigned)
            self.changed.notify_all()

    def wait(self, predicate: object, within: float = 15.0) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, within)  # type: ignore[arg-type]


def test_consumer_listener_may_commit_from_its_callback(thread_broker: BrokerThread) -> None:
    with Producer(thread_broker.url, linger_ms=5) as producer:
        for i in range(30):
            producer.send("ledger", b"%d" % i, key=b"k%d" % i)
    options = {"group_id": "sync-group", "auto_offset_reset": "earliest", "heartbeat_interval_ms": 50}
    first_listener = CommittingListener()
    first = Consumer(bootstrap_servers=thread_broker.url, enable_auto_commit=False, **options)
    first_listener.consumer = first
    second: Consumer | None = None
    try:
        first.subscribe(["ledger"], listener=first_listener)
        first_listener.wait(lambda: len(first_listener.assigned) == 3)
        records = poll_n(first, 30)
        assert sorted(int(r.value) for r in records) == list(range(30))
        second = Consumer("ledger", bootstrap_servers=thread_broker.url, **options)
        first_listener.wait(lambda: first_listener.revocations == 1 and first_listener.assigned)
        committed = {p: second.committed(TopicPartition("ledger", p)) for p in range(3)}
        assert sum(c or 0 for c in committed.values()) == 30
        assert second.poll(timeout=0.3) == []
    finally:
        first.close()
        if second is not None:
            second.close()
    assert not first._thread._thread.is_alive()


def test_consumer_iteration_commit_async_and_callback_guard(thread_broker: BrokerThread) -> None:
    with Producer(thread_broker.url) as producer:
        for i in range(5):
            producer.send("iterate", b"%d" % i, partition=0)
    outcome: list[object] = []
    done = threading.Event()
    tp = TopicPartition("iterate", 0)
    with Consumer(
        bootstrap_servers=thread_broker.url, group_id="it", auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 5:
                break
        assert values == [b"0", b"1", b"2", b"3", b"4"]
        assert consumer.position(tp) == 5

        def callback(offsets: dict[TopicPartition, OffsetAndMetadata], error: Exception | None) -> None:
            outcome.append((offsets, error))
            try:
                consumer.position(tp)
            except IllegalStateError as err:
                outcome.append(err)
            done.set()

        committed = consumer.commit_async(callback=callback).result(15)
        assert committed == {tp: OffsetAndMetadata(5, "")}
        assert done.wait(15)
        assert outcome[0] == ({tp: OffsetAndMetadata(5, "")}, None)
        assert isinstance(outcome[1], IllegalStateError)
        assert consumer.committed(tp) == 5
        consumer.seek(tp, 2)
        assert [r.offset for r in poll_n(consumer, 3)] == [2, 3, 4]


def test_sync_send_blocks_then_raises_when_the_broker_is_down(thread_broker: BrokerThread) -> None:
    producer = Producer(
        thread_broker.url,
        buffer_memory=4096,
        max_block_ms=200,
        delivery_timeout_ms=1000,
        retry_backoff_ms=20,
        retry_backoff_max_ms=50,
    )
    try:
        producer.send("down", b"first", partition=0).get(timeout=10)
        thread_broker.close()
        futures = []
        with pytest.raises(BufferExhaustedError):
            for _ in range(10_000):
                futures.append(producer.send("down", b"x" * 100, partition=0))
        assert 0 < len(futures) < 10_000
        errors = [f.exception(timeout=15) for f in futures]
        # Records that left the caller but found no buffer room within max_block_ms fail like send would.
        assert all(isinstance(e, DeliveryTimeoutError | BufferExhaustedError) for e in errors)
        assert isinstance(errors[0], DeliveryTimeoutError)
    finally:
        producer.close(timeout=0)
