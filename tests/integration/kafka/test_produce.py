"""Produce and InitProducerId on the Kafka listener, checked with Kafka's own producers (confluent-kafka,
kafka-python, aiokafka) and raw requests built from kio's schemas, and read back through the HTTP API
(the native batches route), so a record produced on one door is compared on the other."""

from __future__ import annotations

import datetime
import io
import json
import socket
import struct
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
from kio.schema.init_producer_id.v1.response import InitProducerIdResponse
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitProducerIdRequestV4
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse as InitProducerIdResponseV4
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v8.response import ProduceResponse
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta

from tests.integration.broker import BrokerThread
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import BatchHeader
from tierlog.tiering.codec.records import Record

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 10
BATCHES_TYPE = "application/vnd.tierlog.batches"
RECORDS_PER_PARTITION = 20
NOW_MS = 1_700_000_000_000


# ---- HTTP side ------------------------------------------------------------------------------------------


def _http(method: str, url: str, body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def create_topic(broker: BrokerThread, name: str, configs: Mapping[str, str] | None = None) -> None:
    status, raw = _http("GET", f"{broker.url}/v3/clusters")
    assert status == 200, raw
    cluster_id = json.loads(raw)["data"][0]["cluster_id"]
    doc = {
        "topic_name": name,
        "partitions_count": 3,
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }
    status, raw = _http(
        "POST",
        f"{broker.url}/v3/clusters/{cluster_id}/topics",
        json.dumps(doc).encode(),
        **{"Content-Type": "application/json"},
    )
    assert status == 201, raw


def read_back(broker: BrokerThread, topic: str, partition: int, *, at_least: int = 0) -> list[Record]:
    """Every record of the partition through the native HTTP route, long-polling (bounded) until there
    are ``at_least``."""
    return [record for _, record in read_batches(broker, topic, partition, at_least=at_least)]


def read_batches(
    broker: BrokerThread, topic: str, partition: int, *, at_least: int = 0
) -> list[tuple[BatchHeader, Record]]:
    """Every record of the partition with its stored batch's header (as :func:`read_back`)."""
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while True:
        url = (
            f"{broker.url}/native/v1/topics/{topic}/partitions/{partition}/batches"
            f"?offset=0&max_wait_ms={500 if at_least else 0}&max_bytes=16777216"
        )
        status, raw = _http("GET", url, Accept=BATCHES_TYPE)
        assert status == 200, raw
        records = list(iter_records(raw))
        if len(records) >= at_least or time.monotonic() > deadline:
            return records


def log_end_offset(broker: BrokerThread, topic: str, partition: int) -> int:
    status, raw = _http("GET", f"{broker.url}/native/v1/topics/{topic}", Accept="application/json")
    assert status == 200, raw
    (found,) = [p for p in json.loads(raw)["partitions"] if p["partition"] == partition]
    return int(found["log_end_offset"])


def expected_records(partition: int) -> list[Record]:
    return [
        Record(
            key=f"key-{partition}-{i}".encode(),
            value=None if i == 3 else f"value-{partition}-{i}".encode() * (i + 1),
            headers=((f"h{i}", f"v{i}".encode()), ("empty", None)) if i % 2 else (),
            timestamp=NOW_MS + partition * 1000 + i,
        )
        for i in range(RECORDS_PER_PARTITION)
    ]


def null_headers_as_empty(records: list[Record]) -> list[Record]:
    """``records`` as kafka-python and aiokafka send them: a header value is bytes, never null."""
    return [Record(r.key, r.value, tuple((k, v or b"") for k, v in r.headers), r.timestamp) for r in records]


def same(stored: list[Record], wanted: list[Record]) -> None:
    got = [(r.key, r.value, tuple((k, v) for k, v in r.headers), r.timestamp) for r in stored]
    want = [(r.key, r.value, tuple((k, v) for k, v in r.headers), r.timestamp) for r in wanted]
    assert got == want
    assert [r.offset for r in stored] == list(range(len(wanted)))


# ---- raw Kafka requests ---------------------------------------------------------------------------------


class RawClient:
    """Kafka requests on one socket: request header v1 (v2 for flexible versions), answers decoded after
    response header v0 (v1, with its empty tagged fields, for flexible versions)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, entity: Any, response_class: type[Any]) -> Any:
        self.send(entity)
        frame = self._exactly(struct.unpack(">i", self._exactly(4))[0])
        (correlation,) = struct.unpack_from(">i", frame)
        assert correlation == self.correlation
        body_at = 5 if entity.__flexible__ else 4  # flexible: an empty tagged-fields section
        answer, _ = entity_reader(response_class)(frame, body_at)
        return answer

    def send(self, entity: Any) -> None:
        self.correlation += 1
        buffer = io.BytesIO()
        entity_writer(type(entity))(buffer, entity)
        header = struct.pack(">hhih", entity.__api_key__, entity.__version__, self.correlation, 4) + b"test"
        if entity.__flexible__:
            header += b"\x00"  # no tagged fields
        body = header + buffer.getvalue()
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data


def produce_request(
    topic: str, partitions: dict[int, bytes], *, acks: int = -1, transactional_id: str | None = None
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=tuple(
                    PartitionProduceData(index=i32(index), records=Records(data))
                    for index, data in partitions.items()
                ),
            ),
        ),
    )


def init_producer_id(client: RawClient, transactional_id: str | None = None) -> InitProducerIdResponse:
    request = InitProducerIdRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
    )
    answer: InitProducerIdResponse = client.call(request, InitProducerIdResponse)
    return answer


@pytest.fixture
def raw(kafka_broker: BrokerThread) -> Any:
    client = RawClient(kafka_broker.kafka_bootstrap)
    yield client
    client.close()


# ---- Kafka's producers ----------------------------------------------------------------------------------


CODECS = {c.name.lower(): c for c in Compression}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_confluent_idempotent_producer_stores_every_record_as_sent(
    kafka_broker: BrokerThread, topic_name: str, codec: str
) -> None:
    create_topic(kafka_broker, topic_name)
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.kafka_bootstrap,
            "enable.idempotence": True,
            "compression.codec": codec,
            "linger.ms": 5,
            "message.timeout.ms": CALL_TIMEOUT_S * 1000,
        }
    )
    reports: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            reports.append((msg.partition(), msg.offset()))

    for partition in range(3):
        for record in expected_records(partition):
            producer.produce(
                topic_name,
                key=record.key,
                value=record.value,
                headers=list(record.headers) or None,
                partition=partition,
                timestamp=record.timestamp,
                on_delivery=delivered,
            )
    assert producer.flush(CALL_TIMEOUT_S) == 0
    assert errors == []
    assert sorted(reports) == [(p, o) for p in range(3) for o in range(RECORDS_PER_PARTITION)]
    for partition in range(3):
        stored = read_batches(kafka_broker, topic_name, partition)
        same([record for _, record in stored], expected_records(partition))
        # stored as sent: the producer's batches, compressed with its codec, with its producer id
        assert {h.compression for h, _ in stored} == {CODECS[codec]}
        assert len({h.producer_id for h, _ in stored}) == 1 and stored[0][0].producer_id >= 0


def test_kafka_python_producer(kafka_broker: BrokerThread, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        acks="all",
        compression_type="gzip",
        request_timeout_ms=CALL_TIMEOUT_S * 1000,
    )
    try:
        wanted = expected_records(1)
        for record in wanted:
            producer.send(
                topic_name,
                key=record.key,
                value=record.value,
                headers=[(k, v or b"") for k, v in record.headers],
                partition=1,
                timestamp_ms=record.timestamp,
            )
        metadata = producer.send(topic_name, value=b"last", partition=1).get(timeout=CALL_TIMEOUT_S)
        assert (metadata.partition, metadata.offset) == (1, RECORDS_PER_PARTITION)
    finally:
        producer.close(timeout=CALL_TIMEOUT_S)
    stored = read_back(kafka_broker, topic_name, 1)
    same(stored[:-1], null_headers_as_empty(wanted))
    assert stored[-1].value == b"last"


async def test_aiokafka_idempotent_producer(kafka_broker: BrokerThread, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.kafka_bootstrap,
        enable_idempotence=True,
        compression_type="lz4",
        request_timeout_ms=CALL_TIMEOUT_S * 1000,
    )
    await producer.start()
    try:
        wanted = expected_records(2)
        for record in wanted:
            meta = await producer.send_and_wait(
                topic_name,
                key=record.key,
                value=record.value,
                headers=[(k, v or b"") for k, v in record.headers],
                partition=2,
                timestamp_ms=record.timestamp,
            )
        assert (meta.partition, meta.offset) == (2, RECORDS_PER_PARTITION - 1)
    finally:
        await producer.stop()
    stored = read_back(kafka_broker, topic_name, 2)
    same(stored, null_headers_as_empty(wanted))


def test_acks_0_is_stored_without_an_answer(kafka_broker: BrokerThread, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    producer = Producer({"bootstrap.servers": kafka_broker.kafka_bootstrap, "acks": 0, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic_name, value=f"v{i}".encode(), partition=0)
    assert producer.flush(CALL_TIMEOUT_S) == 0
    stored = read_back(kafka_broker, topic_name, 0, at_least=10)
    assert [r.value for r in stored] == [f"v{i}".encode() for i in range(10)]


def test_a_record_over_max_message_bytes_is_refused_and_nothing_stored(
    kafka_broker: BrokerThread, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name, {"max.message.bytes": "2048"})
    producer = Producer({"bootstrap.servers": kafka_broker.kafka_bootstrap, "retries": 0, "linger.ms": 0})
    errors: list[KafkaError | None] = []
    producer.produce(
        topic_name, value=b"x" * 10_000, partition=0, on_delivery=lambda err, msg: errors.append(err)
    )
    assert producer.flush(CALL_TIMEOUT_S) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert log_end_offset(kafka_broker, topic_name, 0) == 0


# ---- raw requests ---------------------------------------------------------------------------------------


def test_an_unknown_topic_is_answered_unknown_topic_or_partition(raw: RawClient, topic_name: str) -> None:
    batch = build_batch([Record(b"k", b"v")])
    answer = raw.call(produce_request(topic_name, {0: batch}), ProduceResponse)
    (topic,) = answer.responses
    (partition,) = topic.partition_responses
    assert (topic.name, partition.index, int(partition.error_code)) == (topic_name, 0, 3)
    assert partition.base_offset == -1


def test_a_retried_idempotent_batch_is_stored_once(
    kafka_broker: BrokerThread, raw: RawClient, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    ids = init_producer_id(raw)
    assert int(ids.error_code) == 0 and ids.producer_id >= 0 and ids.producer_epoch == 0
    first = build_batch(
        [Record(b"k", b"one"), Record(b"k", b"two")],
        compression=Compression.ZSTD,
        producer_id=ids.producer_id,
        producer_epoch=ids.producer_epoch,
        base_sequence=0,
    )
    answers = [raw.call(produce_request(topic_name, {1: first}), ProduceResponse) for _ in range(2)]
    for answer in answers:
        (partition,) = answer.responses[0].partition_responses
        assert (int(partition.error_code), partition.base_offset, partition.log_start_offset) == (0, 0, 0)
    assert log_end_offset(kafka_broker, topic_name, 1) == 2

    gap = build_batch(
        [Record(b"k", b"late")],
        producer_id=ids.producer_id,
        producer_epoch=ids.producer_epoch,
        base_sequence=5,
    )
    answer = raw.call(produce_request(topic_name, {1: gap}), ProduceResponse)
    (partition,) = answer.responses[0].partition_responses
    assert int(partition.error_code) == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.error_message
    assert log_end_offset(kafka_broker, topic_name, 1) == 2


def test_partitions_of_one_request_answer_their_own_errors(
    kafka_broker: BrokerThread, raw: RawClient, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    good = build_batch([Record(None, b"fine")])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    answer = raw.call(produce_request(topic_name, {0: good, 1: bytes(corrupt), 7: good}), ProduceResponse)
    codes = {p.index: int(p.error_code) for p in answer.responses[0].partition_responses}
    assert codes == {0: 0, 1: 2, 7: 3}  # CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION
    assert [log_end_offset(kafka_broker, topic_name, p) for p in range(2)] == [1, 0]


def test_transactions_are_refused(kafka_broker: BrokerThread, raw: RawClient, topic_name: str) -> None:
    create_topic(kafka_broker, topic_name)
    ids = init_producer_id(raw, "txn-1")
    assert int(ids.error_code) == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    batch = build_batch([Record(None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0)
    answer = raw.call(produce_request(topic_name, {0: batch}, transactional_id="txn-1"), ProduceResponse)
    (partition,) = answer.responses[0].partition_responses
    assert int(partition.error_code) == 53
    assert log_end_offset(kafka_broker, topic_name, 0) == 0


def test_every_init_producer_id_hands_out_a_new_id(raw: RawClient) -> None:
    first = init_producer_id(raw)
    second = init_producer_id(raw)
    assert int(first.error_code) == int(second.error_code) == 0
    assert 0 <= first.producer_id < second.producer_id


def test_an_old_message_set_is_answered_invalid_record(
    kafka_broker: BrokerThread, raw: RawClient, topic_name: str
) -> None:
    create_topic(kafka_broker, topic_name)
    # a magic 0 message set of one record, value b"x" (what a client sends a broker it thinks is old)
    fields = ("0000000000000000", "0000000f", "35b492f2", "00", "00", "ffffffff", "00000001")
    message_set = bytes.fromhex("".join(fields)) + b"x"
    answer = raw.call(produce_request(topic_name, {0: message_set}), ProduceResponse)
    (partition,) = answer.responses[0].partition_responses
    assert int(partition.error_code) == 87  # INVALID_RECORD
    assert "magic 0" in partition.error_message
    assert log_end_offset(kafka_broker, topic_name, 0) == 0


def test_a_failed_acks_0_produce_closes_the_connection(raw: RawClient, topic_name: str) -> None:
    raw.send(produce_request(topic_name, {0: build_batch([Record(None, b"v")])}, acks=0))
    assert raw.sock.recv(1) == b""


def test_init_producer_id_bumps_the_epoch_of_a_known_producer(raw: RawClient) -> None:
    first = init_producer_id(raw)
    bump = InitProducerIdRequestV4(
        transactional_id=None,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=ProducerId(first.producer_id),
        producer_epoch=i16(first.producer_epoch),
    )
    bumped = raw.call(bump, InitProducerIdResponseV4)
    assert (int(bumped.error_code), bumped.producer_id, bumped.producer_epoch) == (0, first.producer_id, 1)
    never = InitProducerIdRequestV4(
        transactional_id=None,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=ProducerId(10**12),
        producer_epoch=i16(0),
    )
    assert int(raw.call(never, InitProducerIdResponseV4).error_code) == 59  # UNKNOWN_PRODUCER_ID
