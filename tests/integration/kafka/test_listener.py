"""The Kafka protocol listener's connection-level behaviour, checked with Kafka's own clients and raw
sockets: ApiVersions (including the v0 fallback), Metadata, protocol mix-ups, oversized frames."""

from __future__ import annotations

import logging
import socket
import ssl
import struct

import aiokafka.admin
import kafka.admin
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka import KafkaAdminClient

from tests.integration.broker import BrokerThread

pytestmark = pytest.mark.integration


def _raw(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def test_confluent_kafka_lists_the_broker_and_its_topics(kafka_broker: BrokerThread) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_broker.kafka_bootstrap})
    admin.create_topics([NewTopic("listed", num_partitions=2)])["listed"].result(timeout=10)
    metadata = admin.list_topics(timeout=10)
    assert [b.id for b in metadata.brokers.values()] == [0]
    (only,) = metadata.brokers.values()
    assert f"{only.host}:{only.port}" == kafka_broker.kafka_bootstrap
    assert sorted(metadata.topics) == ["listed"]
    assert len(metadata.topics["listed"].partitions) == 2
    assert metadata.controller_id == 0


def test_kafka_python_reads_the_cluster(kafka_broker: BrokerThread) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        cluster = admin.describe_cluster()
        assert [b["broker_id"] for b in cluster["brokers"]] == [0]
        admin.create_topics([kafka.admin.NewTopic("listed", 1, 1)])
        assert "listed" in admin.list_topics()
    finally:
        admin.close()


async def test_aiokafka_bootstraps(kafka_broker: BrokerThread) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.kafka_bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_topics([aiokafka.admin.NewTopic("listed", 1, 1)])
        assert "listed" in await admin.list_topics()
    finally:
        await admin.close()


def test_an_api_versions_version_we_do_not_serve_gets_the_v0_answer(kafka_broker: BrokerThread) -> None:
    with _raw(kafka_broker.kafka_bootstrap) as sock:
        # ApiVersions v99, correlation id 7, client id "t"
        body = struct.pack(">hhih", 18, 99, 7, 1) + b"t"
        sock.sendall(struct.pack(">i", len(body)) + body)
        frame = _read_frame(sock)
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation, error) == (7, 35)  # UNSUPPORTED_VERSION
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0] for i in range(count)}
    assert {18, 3} <= keys


def test_an_unknown_api_key_closes_the_connection_and_the_listener_serves_on(
    kafka_broker: BrokerThread,
) -> None:
    with _raw(kafka_broker.kafka_bootstrap) as sock:
        body = struct.pack(">hhih", 9999, 0, 1, -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(1) == b""
    admin = AdminClient({"bootstrap.servers": kafka_broker.kafka_bootstrap})
    assert admin.list_topics(timeout=10).brokers


def test_an_oversized_frame_closes_the_connection(kafka_broker: BrokerThread) -> None:
    with _raw(kafka_broker.kafka_bootstrap) as sock:
        sock.sendall(struct.pack(">i", 200 * 2**20))
        assert sock.recv(1) == b""


def test_an_http_request_to_the_kafka_port_is_told_where_http_is(kafka_broker: BrokerThread) -> None:
    with _raw(kafka_broker.kafka_bootstrap) as sock:
        sock.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"Kafka protocol listener. The HTTP API is at http://127.0.0.1:" in answer


def test_a_tls_client_on_the_plaintext_kafka_port_is_closed_and_named(
    kafka_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        caplog.at_level(logging.WARNING, logger="tierlog"),
        _raw(kafka_broker.kafka_bootstrap) as sock,
        pytest.raises((ssl.SSLError, ConnectionError)),
    ):
        context.wrap_socket(sock).do_handshake()
    assert any("uses SSL but this listener is PLAINTEXT" in r.getMessage() for r in caplog.records)
