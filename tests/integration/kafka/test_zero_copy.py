"""Zero-copy Fetch on a plaintext listener: partitions whose regions are large enough are sent with
``sendfile`` between the encoded headers, the rest copied, and a client reads exactly the bytes the
native HTTP fetch serves for the same offsets, in every served Fetch version (flexible or not), with
several topics and partitions mixed in one answer."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
import requests

from tests.integration.broker import START_MS, BrokerThread, broker_settings
from tests.integration.kafka.test_fetch import TIMEOUT_S, Raw, create_topic, produce
from tierlog.service.kafka.handlers.fetching.fetch import ZERO_COPY_FROM
from tierlog.tiering.codec.records import Record

pytestmark = pytest.mark.integration

BATCHES = "application/vnd.tierlog.batches"
LARGE = 3 * ZERO_COPY_FROM // 2  # bytes of values in a large partition's batch: sent with sendfile


def large_records(partition: int, count: int = 6) -> list[Record]:
    size = LARGE // count
    return [
        Record(f"k{n}".encode(), bytes([partition + n]) * size, timestamp=START_MS + n) for n in range(count)
    ]


def small_records(partition: int) -> list[Record]:
    return [Record(b"k", f"small {partition}".encode(), timestamp=START_MS)]


def native_bytes(broker: BrokerThread, topic: str, partition: int, max_bytes: int = 1 << 20) -> bytes:
    """The stored batches the native HTTP fetch serves from offset 0: the reference bytes."""
    response = requests.get(
        f"{broker.url}/native/v1/topics/{topic}/partitions/{partition}/batches",
        params={"offset": 0, "max_bytes": max_bytes},
        headers={"Accept": BATCHES},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    return response.content


def zero_copied(broker: BrokerThread) -> float:
    """``tierlog_kafka_zero_copy_bytes_total`` of ``broker`` now."""
    text = requests.get(f"{broker.url}/metrics", timeout=TIMEOUT_S).text
    lines = [line for line in text.splitlines() if line.startswith("tierlog_kafka_zero_copy_bytes_total")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, list[str]]]:
    """A broker shared by this module's tests, with two topics of three partitions: partitions 0 and 2
    hold a large batch, 1 a small one, in each."""
    data_dir = tmp_path_factory.mktemp("zero-copy") / "data"
    broker = BrokerThread(broker_settings(data_dir, {"auto.create.topics.enable": "false"}))
    try:
        topics = ["zero-copy-a", "zero-copy-b"]
        for topic in topics:
            create_topic(broker, topic, 3)
            for partition in (0, 2):
                produce(broker, topic, partition, large_records(partition))
            produce(broker, topic, 1, small_records(1))
        yield broker, topics
    finally:
        broker.close()


@pytest.fixture
def raw(loaded: tuple[BrokerThread, list[str]]) -> Iterator[Raw]:
    connection = Raw(loaded[0].kafka_bootstrap)
    try:
        yield connection
    finally:
        connection.close()


def fetch_all(raw: Raw, topics: list[str], version: int, partition_max_bytes: int = 1 << 20) -> Any:
    wanted = [
        {
            "topic": topic,
            "partitions": [
                {"partition": p, "fetch_offset": 0, "partition_max_bytes": partition_max_bytes}
                for p in (2, 1, 0)  # not in index order: the answer keeps the request's order
            ],
        }
        for topic in topics
    ]
    request = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 24, "topics": wanted}
    return raw.call(1, version, **request)


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_large_regions_arrive_as_the_stored_bytes(
    loaded: tuple[BrokerThread, list[str]], raw: Raw, version: int
) -> None:
    broker, topics = loaded
    before = zero_copied(broker)
    answer = fetch_all(raw, topics, version)
    assert [t.topic for t in answer.responses] == topics
    for topic, response in zip(topics, answer.responses, strict=True):
        assert [p.partition_index for p in response.partitions] == [2, 1, 0]
        for p in response.partitions:
            assert p.error_code == 0
            assert p.high_watermark == (1 if p.partition_index == 1 else 6)
            assert p.records == native_bytes(broker, topic, p.partition_index)
        sizes = {p.partition_index: len(p.records) for p in response.partitions}
        assert sizes[0] >= ZERO_COPY_FROM and sizes[2] >= ZERO_COPY_FROM and sizes[1] < ZERO_COPY_FROM
    large = sum(len(p.records) for t in answer.responses for p in t.partitions if p.partition_index != 1)
    assert zero_copied(broker) - before == large  # the large regions went by sendfile, the small one not


def test_a_partition_limit_ends_on_a_batch_boundary(loaded: tuple[BrokerThread, list[str]], raw: Raw) -> None:
    """Several large batches, a partition limit between two of them: whole batches up to the limit."""
    broker, _topics = loaded
    topic = "zero-copy-limit"
    create_topic(broker, topic, 1)
    for _ in range(4):
        produce(broker, topic, 0, large_records(0))
    whole = native_bytes(broker, topic, 0, max_bytes=8 << 20)
    limit = len(whole) * 5 // 8  # past two batches, short of the third
    answer = fetch_all(raw, [topic], 12, partition_max_bytes=limit).responses[0].partitions
    (partition,) = [p for p in answer if p.partition_index == 0]
    assert partition.records == native_bytes(broker, topic, 0, max_bytes=limit)
    assert len(whole) // 4 * 2 == len(partition.records)


def test_confluent_kafka_consumes_large_batches(loaded: tuple[BrokerThread, list[str]]) -> None:
    broker, topics = loaded
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.kafka_bootstrap, "group.id": "zero-copy", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topics[0], p, 0) for p in range(3)])
        got: list[Any] = []
        while len(got) < 13:
            messages = consumer.consume(13 - len(got), timeout=TIMEOUT_S)
            assert messages, f"only {len(got)} records within {TIMEOUT_S} s"
            got.extend(messages)
    finally:
        consumer.close()
    assert all(m.error() is None for m in got)
    values = {(m.partition(), m.offset()): m.value() for m in got}
    expected = {(p, n): r.value for p in (0, 2) for n, r in enumerate(large_records(p))}
    expected[1, 0] = small_records(1)[0].value
    assert values == expected


def test_clients_leaving_mid_answer_leak_no_descriptor(loaded: tuple[BrokerThread, list[str]]) -> None:
    """Clients that ask for large regions and close without reading: every region's descriptor is
    closed once their connections end (the broker runs in this process, so its descriptors are ours)."""
    broker, topics = loaded
    warm_up = Raw(broker.kafka_bootstrap)  # a whole answer first: the logs open what they open lazily
    try:
        fetch_all(warm_up, topics, 4)
    finally:
        warm_up.close()
    settle_connections(broker)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(10):
        connection = Raw(broker.kafka_bootstrap)
        request = fetch_request(topics, correlation=1)
        connection.sock.sendall(request)
        connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()  # a reset: the broker's sendfile or write fails midway
    settle_connections(broker)
    assert len(os.listdir("/proc/self/fd")) <= before


def settle_connections(broker: BrokerThread) -> None:
    """Wait (up to TIMEOUT_S) until the broker's Kafka listener serves no connection."""
    deadline = time.monotonic() + TIMEOUT_S
    while open_connections(broker) > 0:
        assert time.monotonic() < deadline, "connections still open"
        time.sleep(0.05)  # polling a condition with a deadline


def open_connections(broker: BrokerThread) -> float:
    text = requests.get(f"{broker.url}/metrics", timeout=TIMEOUT_S).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tierlog_kafka_connections_open")
    )


def fetch_request(topics: list[str], *, correlation: int) -> bytes:
    """A Fetch v4 frame for every partition of ``topics`` from offset 0, 1 MiB each."""
    body = struct.pack(">iiiibi", -1, 0, 1, 1 << 24, 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 3)
        body += b"".join(struct.pack(">iqi", p, 0, 1 << 20) for p in range(3))
    head = struct.pack(">hhih", 1, 4, correlation, -1)
    return struct.pack(">i", len(head) + len(body)) + head + body
