"""Fetch, ListOffsets and OffsetForLeaderEpoch on the Kafka listener: records produced over the HTTP API
(the native path) read back by confluent-kafka, kafka-python and aiokafka consumers with manual
assignment, and raw requests (built with kio) where exact limits and the long poll are checked."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import pytest
import requests
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from tests.integration.broker import START_MS, Brokers, BrokerThread
from tests.integration.tiering.helpers import produce as produce_tiered
from tests.integration.tiering.helpers import wait_uploaded
from tierlog.service.kafka.messages import shape
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import ManualClock

pytestmark = pytest.mark.integration

BATCHES = "application/vnd.tierlog.batches"
PRODUCE_KEY = 0
TIMEOUT_S = 10  # every client call is bounded by this; a deadline, never a timing assertion


# ---- helpers ------------------------------------------------------------------------------------------


def create_topic(broker: BrokerThread, name: str, partitions: int = 2, **configs: str) -> None:
    cluster = requests.get(f"{broker.url}/v3/clusters", timeout=TIMEOUT_S).json()["data"][0]["cluster_id"]
    body: dict[str, Any] = {"topic_name": name, "partitions_count": partitions}
    if configs:
        body["configs"] = [{"name": k, "value": v} for k, v in configs.items()]
    response = requests.post(f"{broker.url}/v3/clusters/{cluster}/topics", json=body, timeout=TIMEOUT_S)
    assert response.status_code == 201, response.text


def produce(broker: BrokerThread, topic: str, partition: int, records: list[Record]) -> int:
    """Append ``records`` as one batch over the native HTTP path; returns its base offset."""
    response = requests.post(
        f"{broker.url}/native/v1/topics/{topic}/partitions/{partition}/batches",
        data=build_batch(records),
        headers={"Content-Type": BATCHES},
        timeout=TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    return int(response.json()["base_offset"])


def records_for(partition: int, count: int, first: int = 0) -> list[Record]:
    return [
        Record(
            f"k{partition}-{n}".encode(),
            f"v{partition}-{n}".encode() * 3,
            headers=(("h", f"{n}".encode()),),
            timestamp=START_MS + n,
        )
        for n in range(first, first + count)
    ]


class Raw:
    """A raw Kafka connection speaking kio's message entities (one request at a time)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def call(self, key: int, version: int, **fields: Any) -> Any:
        """Send the request of ``key`` at ``version`` built from ``fields`` (plain mappings, shaped as
        the listener shapes its answers); return the response entity."""
        request_class = load_request_schema(key, version)
        flexible = bool(request_class.__flexible__)
        self.correlation += 1
        header = struct.pack(">hhih", key, version, self.correlation, 4) + b"test"
        if flexible:
            header += b"\x00"
        body = io.BytesIO()
        entity_writer(request_class)(body, shape(request_class, fields))
        payload = header + body.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = self._read(struct.unpack(">i", self._read(4))[0])
        assert struct.unpack_from(">i", frame)[0] == self.correlation
        start = 5 if flexible else 4
        entity, _end = entity_reader(load_response_schema(key, version))(frame, start)
        return entity

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(kafka_broker: BrokerThread) -> Iterator[Raw]:
    connection = Raw(kafka_broker.kafka_bootstrap)
    try:
        yield connection
    finally:
        connection.close()


def fetch(
    raw: Raw,
    topic: str,
    partitions: dict[int, int],
    *,
    partition_max_bytes: int = 1 << 20,
    version: int = 11,
    **fields: Any,
) -> Any:
    """Fetch of ``{partition: offset}`` (v11 unless told; no wait by default); ``fields`` override the
    request's."""
    wanted = {
        "topic": topic,
        "partitions": [
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
            for p, offset in partitions.items()
        ],
    }
    request: dict[str, Any] = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 24}
    request.update(fields, topics=[wanted])
    return raw.call(1, version, **request)


def by_partition(answer: Any) -> dict[int, Any]:
    (topic,) = answer.responses
    return {p.partition_index: p for p in topic.partitions}


def batch_sizes(data: bytes) -> list[int]:
    return [header.size for _pos, header in iter_batches(data)]


def decoded(message: Any) -> tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]], int]:
    """A confluent-kafka message as (partition, offset, key, value, headers, timestamp)."""
    assert message.error() is None, message.error()
    return (
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        list(message.headers() or []),
        message.timestamp()[1],
    )


def expected(partition: int, records: list[Record], first_offset: int = 0) -> list[tuple[Any, ...]]:
    return [
        (partition, first_offset + i, r.key, r.value, list(r.headers), r.timestamp)
        for i, r in enumerate(records)
    ]


def confluent_consumer(broker: BrokerThread, **config: Any) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.kafka_bootstrap,
            "group.id": "unused",  # required by the client; manual assignment uses no group
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            **config,
        }
    )


def poll_n(consumer: confluent_kafka.Consumer, n: int) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(out) < n and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            out.append(message)
    assert len(out) == n, f"{len(out)} of {n} records within {TIMEOUT_S} s"
    return out


# ---- Fetch with Kafka's clients -----------------------------------------------------------------------


def test_confluent_kafka_reads_what_http_produced(kafka_broker: BrokerThread, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    sent = {p: records_for(p, 7) for p in (0, 1)}
    for p, records in sent.items():
        produce(kafka_broker, topic_name, p, records[:3])
        produce(kafka_broker, topic_name, p, records[3:])
    consumer = confluent_consumer(kafka_broker)
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic_name, p, confluent_kafka.OFFSET_BEGINNING) for p in sent]
        )
        got = sorted(decoded(m) for m in poll_n(consumer, 14))
    finally:
        consumer.close()
    assert got == expected(0, sent[0]) + expected(1, sent[1])


def test_kafka_python_reads_what_http_produced(kafka_broker: BrokerThread, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    sent = records_for(0, 5)
    produce(kafka_broker, topic_name, 0, sent)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_S * 1000,
    )
    try:
        tp = kafka.TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
        assert consumer.end_offsets([tp]) == {tp: 5}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
    finally:
        consumer.close()
    assert [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in got] == [
        (i, r.key, r.value, list(r.headers), r.timestamp) for i, r in enumerate(sent)
    ]


async def test_aiokafka_reads_what_http_produced(kafka_broker: BrokerThread, topic_name: str) -> None:
    await asyncio.to_thread(create_topic, kafka_broker, topic_name)
    sent = records_for(1, 6)
    await asyncio.to_thread(produce, kafka_broker, topic_name, 1, sent)
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_S * 1000,
    )
    await consumer.start()
    try:
        tp = aiokafka.TopicPartition(topic_name, 1)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[Any] = []
        async with asyncio.timeout(TIMEOUT_S):
            while len(got) < len(sent):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(batch)
        assert await consumer.end_offsets([tp]) == {tp: 6}
    finally:
        await consumer.stop()
    assert [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in got] == [
        (i, r.key, r.value, list(r.headers), r.timestamp) for i, r in enumerate(sent)
    ]


def test_an_out_of_range_offset_resets_by_auto_offset_reset(
    kafka_broker: BrokerThread, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    sent = records_for(0, 3)
    produce(kafka_broker, topic_name, 0, sent)
    consumer = confluent_consumer(kafka_broker, **{"auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic_name, 0, 1000)])
        got = [decoded(m) for m in poll_n(consumer, 3)]
    finally:
        consumer.close()
    assert got == expected(0, sent)


# ---- Fetch, raw: limits, long poll, errors --------------------------------------------------------------


def test_a_fetch_answers_offsets_and_out_of_range(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    produce(kafka_broker, topic_name, 0, records_for(0, 4))
    answer = by_partition(fetch(raw, topic_name, {0: 0, 1: 0, 7: 0}))
    assert (answer[0].error_code, answer[0].high_watermark, answer[0].last_stable_offset) == (0, 4, 4)
    assert answer[0].log_start_offset == 0 and answer[0].preferred_read_replica == -1
    assert len(batch_sizes(answer[0].records)) == 1
    assert (answer[1].error_code, answer[1].high_watermark, answer[1].records) == (0, 0, b"")
    assert answer[7].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    out = by_partition(fetch(raw, topic_name, {0: 5}))
    assert out[0].error_code == 1  # OFFSET_OUT_OF_RANGE
    unknown = fetch(raw, "no-such-topic", {0: 0})
    assert unknown.responses[0].partitions[0].error_code == 3


def test_partition_max_bytes_and_max_bytes_limit_the_answer(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    for p in (0, 1):
        for n in range(3):
            produce(kafka_broker, topic_name, p, records_for(p, 2, first=2 * n))
    whole = by_partition(fetch(raw, topic_name, {0: 0}))[0].records
    sizes = batch_sizes(whole)
    assert len(sizes) == 3
    # per partition: one batch fits in partition_max_bytes, and a too small limit still gets the first whole
    one = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, partition_max_bytes=sizes[0] + 1))
    assert [batch_sizes(one[p].records) for p in (0, 1)] == [sizes[:1], sizes[:1]]
    tiny = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, partition_max_bytes=10))
    assert [len(batch_sizes(tiny[p].records)) for p in (0, 1)] == [1, 1]
    # the whole answer: the first partition's first batch whole, nothing of the next that does not fit
    small = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, max_bytes=10))
    assert (len(batch_sizes(small[0].records)), small[1].records, small[1].error_code) == (1, b"", 0)
    two = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, max_bytes=sum(sizes) + sizes[0]))
    assert [len(batch_sizes(two[p].records)) for p in (0, 1)] == [3, 1]


def test_a_long_poll_returns_when_any_partition_gets_data(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name, partitions=3)
    answers: list[Any] = []
    started = time.monotonic()
    waiting = threading.Thread(
        target=lambda: answers.append(fetch(raw, topic_name, {0: 0, 1: 0, 2: 0}, max_wait=20_000))
    )
    waiting.start()
    try:
        wait_for_a_fetch(kafka_broker)  # the fetch is parked on the broker before the produce
        produce(kafka_broker, topic_name, 2, records_for(2, 1))
    finally:
        waiting.join(TIMEOUT_S + 5)
    assert answers, "the long poll did not answer after the produce"
    assert time.monotonic() - started < 15  # well before max_wait (20 s)
    got = by_partition(answers[0])
    assert len(batch_sizes(got[2].records)) == 1 and got[0].records == b""


async def test_an_aiokafka_consumer_waiting_gets_a_record_before_max_wait(
    kafka_broker: BrokerThread, topic_name: str
) -> None:
    await asyncio.to_thread(create_topic, kafka_broker, topic_name)
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=20_000,
        request_timeout_ms=40_000,
    )
    await consumer.start()
    try:
        consumer.assign([aiokafka.TopicPartition(topic_name, 0)])
        waiting = asyncio.ensure_future(consumer.getone())
        await asyncio.to_thread(wait_for_a_fetch, kafka_broker)  # the consumer's fetch is parked
        started = time.monotonic()
        await asyncio.to_thread(produce, kafka_broker, topic_name, 0, records_for(0, 1))
        async with asyncio.timeout(15):
            message = await waiting
        assert time.monotonic() - started < 10  # max_wait is 20 s
    finally:
        waiting.cancel()
        await consumer.stop()
    assert (message.offset, message.key) == (0, b"k0-0")


def wait_for_a_fetch(broker: BrokerThread) -> None:
    """Return once the broker has counted a Fetch request (bounded by TIMEOUT_S)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        text = requests.get(f"{broker.url}/metrics", timeout=TIMEOUT_S).text
        if any(line.startswith('tierlog_kafka_requests_total{api="Fetch"}') for line in text.splitlines()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no Fetch request within {TIMEOUT_S} s")


def test_a_long_poll_with_no_data_waits_max_wait(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    started = time.monotonic()
    answer = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, max_wait=300))
    assert time.monotonic() - started >= 0.3
    assert answer[0].records == b"" and answer[0].error_code == 0


def test_fetch_sessions_are_answered_sessionless(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    assert fetch(raw, topic_name, {0: 0}, session_epoch=0).session_id == 0
    refused = fetch(raw, topic_name, {0: 0}, session_id=12, session_epoch=1)
    assert refused.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND


@pytest.mark.parametrize("version", range(4, 13))
def test_every_served_fetch_version_reads(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str, version: int
) -> None:
    create_topic(kafka_broker, topic_name)
    produce(kafka_broker, topic_name, 0, records_for(0, 2))
    answer = by_partition(fetch(raw, topic_name, {0: 0, 1: 0}, version=version))
    assert (answer[0].error_code, answer[0].high_watermark, len(batch_sizes(answer[0].records))) == (0, 2, 1)
    assert answer[1].records == b""


@pytest.mark.parametrize("version", range(1, 11))
def test_every_served_list_offsets_version_answers(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str, version: int
) -> None:
    create_topic(kafka_broker, topic_name)
    produce(kafka_broker, topic_name, 0, records_for(0, 2))
    topic = {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1}]}
    (partition,) = raw.call(2, version, replica_id=-1, topics=[topic]).topics[0].partitions
    assert (partition.error_code, partition.offset) == (0, 2)


@pytest.mark.parametrize("version", range(2, 5))
def test_every_served_offset_for_leader_epoch_version_answers(
    kafka_broker: BrokerThread, raw: Raw, topic_name: str, version: int
) -> None:
    create_topic(kafka_broker, topic_name)
    produce(kafka_broker, topic_name, 0, records_for(0, 2))
    wanted = {"topic": topic_name, "partitions": [{"partition": 0, "leader_epoch": 0}]}
    (answer,) = raw.call(23, version, replica_id=-1, topics=[wanted]).topics[0].partitions
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, 0, 2)


# ---- ListOffsets and OffsetForLeaderEpoch -----------------------------------------------------------------


def test_confluent_kafka_watermarks_and_offsets_for_times(
    kafka_broker: BrokerThread, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    for n in range(4):
        produce(kafka_broker, topic_name, 0, records_for(0, 1, first=n * 10))
    consumer = confluent_consumer(kafka_broker)
    try:
        assert consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic_name, 0), timeout=TIMEOUT_S
        ) == (
            0,
            4,
        )
        asked = [
            confluent_kafka.TopicPartition(topic_name, 0, START_MS + 15),
            confluent_kafka.TopicPartition(topic_name, 1, START_MS),
        ]
        found = consumer.offsets_for_times(asked, timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in found] == [(0, 2), (1, -1)]


def test_list_offsets_special_timestamps(kafka_broker: BrokerThread, raw: Raw, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    for n in (5, 30, 10):
        produce(kafka_broker, topic_name, 0, records_for(0, 1, first=n))
    asked = {-2: 0, -1: 0, -3: 0, -4: 0, -5: 0, START_MS + 11: 0, START_MS + 99: 0}
    answers = []
    for timestamp in asked:
        topic = {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
        answer = raw.call(2, 9, replica_id=-1, topics=[topic])
        (partition,) = answer.topics[0].partitions
        answers.append((partition.error_code, partition.offset, partition.timestamp, partition.leader_epoch))
    assert answers == [  # every offset found was written in the broker's first leader epoch, 0
        (0, 0, -1, 0),
        (0, 3, -1, 0),
        (0, 1, START_MS + 30, 0),
        (0, 0, -1, 0),
        (0, -1, -1, -1),
        (0, 1, START_MS + 30, 0),
        (0, -1, -1, -1),
    ]


def test_offset_for_leader_epoch(kafka_broker: BrokerThread, raw: Raw, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    produce(kafka_broker, topic_name, 0, records_for(0, 3))

    def ask(topic: str, current: int, epoch: int) -> tuple[int, int, int]:
        wanted = {
            "topic": topic,
            "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}],
        }
        (answer,) = raw.call(23, 4, replica_id=-1, topics=[wanted]).topics[0].partitions
        return int(answer.error_code), answer.leader_epoch, answer.end_offset

    assert ask(topic_name, 0, 0) == (0, 0, 3)
    assert ask(topic_name, -1, 3) == (0, -1, -1)
    assert ask(topic_name, 4, 0)[0] == 75  # UNKNOWN_LEADER_EPOCH: the client's epoch is newer
    assert ask("no-such-topic", -1, 0)[0] == 3


# ---- the remote tier through Fetch --------------------------------------------------------------------


async def test_a_tiered_topic_reads_through_fetch(brokers: Brokers, clock: ManualClock) -> None:
    running = await brokers.start({"num.partitions": "1"}, clock=clock)
    broker = running.broker
    await broker.create_topic(
        "tiered",
        1,
        {"segment.bytes": "2048", "local.retention.bytes": "2048", "remote.storage.enable": "true"},
    )
    sent = await produce_tiered(running.client, "tiered", 0, 100)
    partition = broker.topic("tiered").partition(0)
    await wait_uploaded(running.client, "tiered", partition.log.sealed_segments()[-1].next_offset)
    await running.app[MAINTENANCE].retention_pass()
    assert partition.local_log_start_offset > 0  # the first records are in the remote tier only
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=running.kafka_bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=TIMEOUT_S * 1000,
    )
    await consumer.start()
    try:
        tp = aiokafka.TopicPartition("tiered", 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[Any] = []
        async with asyncio.timeout(TIMEOUT_S * 3):
            while len(got) < len(sent):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(batch)
    finally:
        await consumer.stop()
    assert [(m.offset, m.key, m.value) for m in got] == [(i, k, v) for i, (k, v) in enumerate(sent)]
    remote = broker.remote.remote_of("tiered", 0)
    assert remote is not None and remote.remote_log.remote_next_offset is not None
    offsets = await asyncio.to_thread(_list_offsets, running.kafka_bootstrap, "tiered", [-2, -4, -5])
    assert offsets == [0, partition.local_log_start_offset, remote.remote_log.remote_next_offset - 1]


def _list_offsets(bootstrap: str, topic: str, timestamps: list[int]) -> list[int]:
    """ListOffsets v9 of partition 0 for each of ``timestamps``, over a raw connection."""
    raw = Raw(bootstrap)
    try:
        out = []
        for timestamp in timestamps:
            wanted = {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
            (answer,) = raw.call(2, 9, replica_id=-1, topics=[wanted]).topics[0].partitions
            assert answer.error_code == 0
            out.append(answer.offset)
        return out
    finally:
        raw.close()
