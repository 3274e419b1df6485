"""Security on the Kafka listener, checked with Kafka's own clients: TLS with the broker's ``ssl.*``
certificate (confluent-kafka with the test CA), and SASL PLAIN / SCRAM against users of the security store
(confluent-kafka, kafka-python), with ACLs deciding what an authenticated user may do."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from kafka import KafkaProducer
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.integration.broker import BrokerThread, StartThread
from tests.integration.kafka.sasl_support import connect, request, sasl
from tierlog.service.security.scram import make_credential
from tierlog.service.security.security_store import SecurityStore

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 10


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("kafka-pki")
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(root / "ca.pem"))
    leaf = authority.issue_cert("127.0.0.1", "localhost")
    leaf.cert_chain_pems[0].write_to_path(str(root / "server.pem"))
    leaf.private_key_pem.write_to_path(str(root / "server-key.pem"))
    for user in ("alice", "bob"):
        client = authority.issue_cert(
            f"{user}.clients.example",
            common_name=user,
            organization_unit_name="eng",
            organization_name="acme",
        )
        client.cert_chain_pems[0].write_to_path(str(root / f"{user}.pem"))
        client.private_key_pem.write_to_path(str(root / f"{user}-key.pem"))
    return Pki(root / "ca.pem", root / "server.pem", root / "server-key.pem")


def _http(
    method: str, url: str, body: Mapping[str, Any] | None = None, auth: tuple[str, str] | None = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
            raw = response.read()
            return int(response.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def create_topic(broker: BrokerThread, name: str, auth: tuple[str, str] | None = None) -> None:
    status, clusters = _http("GET", f"{broker.url}/v3/clusters", auth=auth)
    assert status == 200, clusters
    cluster_id = clusters["data"][0]["cluster_id"]
    doc = {"topic_name": name, "partitions_count": 1}
    status, raw = _http("POST", f"{broker.url}/v3/clusters/{cluster_id}/topics", doc, auth)
    assert status == 201, raw


def produce_one(config: Mapping[str, Any], topic: str, value: bytes) -> KafkaError | None:
    """Produce one record with confluent-kafka; the delivery error, or None when delivered."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 8000, "retries": 0})
    producer.produce(topic, value, callback=lambda err, _msg: outcome.append(err))
    remaining = producer.flush(CALL_TIMEOUT_S)
    assert remaining == 0 and outcome, "the delivery report did not come"
    return outcome[0]


def consume_one(config: Mapping[str, Any], topic: str) -> bytes:
    consumer = Consumer({**config, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(CALL_TIMEOUT_S):
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                return bytes(value)
        raise AssertionError("no record consumed")
    finally:
        consumer.close()


# ---- TLS --------------------------------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_over_ssl(
    broker_threads: StartThread, pki: Pki, topic_name: str
) -> None:
    broker = broker_threads(
        {"ssl.certfile": str(pki.cert), "ssl.keyfile": str(pki.key), "ssl.cafile": str(pki.ca)}
    )
    create_topic(broker, topic_name)
    ssl = {
        "bootstrap.servers": broker.kafka_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    assert produce_one(ssl, topic_name, b"over tls") is None
    assert consume_one(ssl, topic_name) == b"over tls"


def test_a_plaintext_client_is_not_served_by_the_ssl_listener(
    broker_threads: StartThread, pki: Pki, topic_name: str
) -> None:
    broker = broker_threads({"ssl.certfile": str(pki.cert), "ssl.keyfile": str(pki.key)})
    create_topic(broker, topic_name)
    admin_config = {"bootstrap.servers": broker.kafka_bootstrap, "socket.timeout.ms": 3000}
    producer = Producer(admin_config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=3)


def test_a_client_certificate_names_the_principal(
    broker_threads: StartThread, pki: Pki, topic_name: str
) -> None:
    broker = broker_threads(
        {
            "ssl.certfile": str(pki.cert),
            "ssl.keyfile": str(pki.key),
            "ssl.cafile": str(pki.ca),
            "ssl.client.auth": "required",
            "authentication.methods": "mtls",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,O=acme$/$1/L,DEFAULT",
            "super.users": "User:alice",
            "auto.create.topics.enable": "true",
        }
    )

    def as_user(user: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": broker.kafka_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.ca.parent / f"{user}.pem"),
            "ssl.key.location": str(pki.ca.parent / f"{user}-key.pem"),
        }

    assert produce_one(as_user("alice"), topic_name, b"from alice") is None  # a super user; auto-created
    error = produce_one(as_user("bob"), topic_name, b"from bob")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


# ---- SASL and ACLs ----------------------------------------------------------------------------------

ADMIN = ("admin", "admin-pw")
ALICE = ("alice", "alice-pw")
SASL_SETTINGS = {
    "authentication.methods": "basic",
    "super.users": "User:admin",
    "auto.create.topics.enable": "false",
    "authentication.failure.limit": "2",
}


def _bootstrap_users(data_dir: Path, mechanism: str = "SCRAM-SHA-256") -> None:
    async def put() -> None:
        store = SecurityStore.offline(data_dir)
        await store.start()
        try:
            await store.put_user(ADMIN[0], make_credential(ADMIN[1]))
            await store.put_user(ALICE[0], make_credential(ALICE[1], mechanism))
        finally:
            await store.close()

    asyncio.run(put())


def allow(
    broker: BrokerThread, principal: str, operation: str, topic: str, resource_type: str = "TOPIC"
) -> None:
    status, clusters = _http("GET", f"{broker.url}/v3/clusters", auth=ADMIN)
    assert status == 200, clusters
    acl = {
        "resource_type": resource_type,
        "resource_name": topic,
        "pattern_type": "LITERAL",
        "principal": principal,
        "host": "*",
        "operation": operation,
        "permission": "ALLOW",
    }
    url = f"{broker.url}/v3/clusters/{clusters['data'][0]['cluster_id']}/acls"
    status, raw = _http("POST", url, acl, ADMIN)
    assert status == 201, raw


def authentication_error(config: Mapping[str, Any]) -> str:
    """The error confluent-kafka reports when the broker refuses ``config``'s credentials."""
    errors: list[KafkaError] = []
    seen = threading.Event()

    def on_error(err: KafkaError) -> None:
        errors.append(err)
        if err.code() == KafkaError._AUTHENTICATION:
            seen.set()

    producer = Producer({**config, "error_cb": on_error})
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while not seen.is_set() and time.monotonic() < deadline:
        producer.poll(0.2)
    assert seen.is_set(), errors
    return str(next(e for e in errors if e.code() == KafkaError._AUTHENTICATION).str())


@pytest.fixture
def sasl_broker(broker_threads: StartThread, data_dir: Path) -> BrokerThread:
    _bootstrap_users(data_dir)
    return broker_threads(SASL_SETTINGS)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_an_authenticated_user_is_refused_without_an_acl_and_served_with_one(
    sasl_broker: BrokerThread, topic_name: str, mechanism: str
) -> None:
    create_topic(sasl_broker, topic_name, ADMIN)
    alice = sasl(sasl_broker, mechanism, ALICE)
    error = produce_one(alice, topic_name, b"refused")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allow(sasl_broker, "User:alice", "WRITE", topic_name)
    allow(sasl_broker, "User:alice", "READ", topic_name)
    allow(sasl_broker, "User:alice", "READ", "unused", resource_type="GROUP")  # the consumer's group.id
    assert produce_one(alice, topic_name, b"allowed") is None
    assert consume_one(alice, topic_name) == b"allowed"


def test_scram_sha_512_and_a_super_user(broker_threads: StartThread, data_dir: Path, topic_name: str) -> None:
    _bootstrap_users(data_dir, "SCRAM-SHA-512")
    broker = broker_threads(SASL_SETTINGS)
    create_topic(broker, topic_name, ADMIN)
    allow(broker, "User:alice", "WRITE", topic_name)
    assert produce_one(sasl(broker, "SCRAM-SHA-512", ALICE), topic_name, b"512") is None
    assert consume_one(sasl(broker, "SCRAM-SHA-256", ADMIN), topic_name) == b"512"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_wrong_password_is_refused_then_throttled(sasl_broker: BrokerThread, mechanism: str) -> None:
    wrong = sasl(sasl_broker, mechanism, (ALICE[0], "wrong"))
    assert "Authentication failed" in authentication_error(wrong)
    authentication_error(wrong)
    # the limit is 2 failures of alice from this host: from then on even her password is refused unread
    refused = authentication_error(sasl(sasl_broker, mechanism, ALICE))
    assert "too many failed authentication attempts" in refused


def test_a_request_before_authentication_closes_the_connection(sasl_broker: BrokerThread) -> None:
    plaintext = Producer({"bootstrap.servers": sasl_broker.kafka_bootstrap})
    with pytest.raises(KafkaException):
        plaintext.list_topics(timeout=3)


def test_kafka_python_sasl_plain(sasl_broker: BrokerThread, topic_name: str) -> None:
    create_topic(sasl_broker, topic_name, ADMIN)
    allow(sasl_broker, "User:alice", "WRITE", topic_name)
    producer = KafkaProducer(
        bootstrap_servers=sasl_broker.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=ALICE[0],
        sasl_plain_password=ALICE[1],
        request_timeout_ms=CALL_TIMEOUT_S * 1000,
    )
    try:
        metadata = producer.send(topic_name, b"kafka-python").get(timeout=CALL_TIMEOUT_S)
        assert metadata.offset == 0
    finally:
        producer.close(timeout=CALL_TIMEOUT_S)


def test_metadata_lists_only_the_topics_a_user_may_describe(
    sasl_broker: BrokerThread, topic_name: str
) -> None:
    hidden, shown = f"{topic_name}-hidden", f"{topic_name}-shown"
    create_topic(sasl_broker, hidden, ADMIN)
    create_topic(sasl_broker, shown, ADMIN)
    allow(sasl_broker, "User:alice", "DESCRIBE", shown)
    alice = Producer(sasl(sasl_broker, "SCRAM-SHA-256", ALICE))
    listed = alice.list_topics(timeout=CALL_TIMEOUT_S).topics
    assert shown in listed and hidden not in listed
    named = alice.list_topics(hidden, timeout=CALL_TIMEOUT_S).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_oauthbearer_with_a_jwt(
    broker_threads: StartThread, data_dir: Path, tmp_path: Path, topic_name: str
) -> None:
    _bootstrap_users(data_dir)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "k"}]}))
    broker = broker_threads(
        {
            **SASL_SETTINGS,
            "authentication.methods": "basic,bearer",
            "authentication.bearer.jwks": str(jwks),
            "authentication.bearer.audience": "tierlog",
        }
    )
    create_topic(broker, topic_name, ADMIN)
    allow(broker, "User:alice", "WRITE", topic_name)

    def bearer(subject: str, audience: str) -> dict[str, Any]:
        claims = {"sub": subject, "aud": audience, "exp": int(time.time()) + 600}
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k"})
        return {
            "bootstrap.servers": broker.kafka_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, time.time() + 600),
        }

    assert produce_one(bearer("alice", "tierlog"), topic_name, b"with a token") is None
    # KIP-368: the session lasts until the token expires (connections.max.reauth.ms is unset)
    token = jwt.encode(
        {"sub": "alice", "aud": "tierlog", "exp": int(time.time()) + 60}, key, "RS256", {"kid": "k"}
    )
    with connect(broker) as sock:
        assert request(sock, 17, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER")).error_code.value == 0
        message = b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"
        answer = request(sock, 36, 2, SaslAuthenticateRequest(auth_bytes=message), flexible=True)
    assert answer.error_code.value == 0
    assert timedelta(seconds=30) < answer.session_lifetime <= timedelta(seconds=60)
    # (last: librdkafka retries a refused token, past authentication.failure.limit)
    assert "Authentication failed" in authentication_error(bearer("alice", "another-audience"))


def test_consumer_groups_need_the_groups_acls(sasl_broker: BrokerThread, topic_name: str) -> None:
    """Joining and committing need Read on the group (and Read on the topic to commit), as in Kafka."""
    create_topic(sasl_broker, topic_name, ADMIN)
    allow(sasl_broker, "User:alice", "READ", topic_name)
    alice = sasl(sasl_broker, "PLAIN", ALICE)
    group = f"{topic_name}-group"
    consumer = Consumer({**alice, "group.id": group, "enable.auto.commit": False})
    try:
        refused = None
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while refused is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                refused = message.error()
        assert refused is not None and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, refused
    finally:
        consumer.close()
    allow(sasl_broker, "User:alice", "READ", group, resource_type="GROUP")
    consumer = Consumer({**alice, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic_name])
        assigned = threading.Event()
        consumer.subscribe([topic_name], on_assign=lambda _c, partitions: assigned.set())
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not assigned.is_set() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert assigned.is_set(), "the group never assigned a partition"
        committed = consumer.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
        assert committed is not None and committed[0].error is None
    finally:
        consumer.close()


def test_a_frame_over_512_kib_before_authentication_closes_the_connection(sasl_broker: BrokerThread) -> None:
    """Strangers get Kafka's pre-authentication bound (sasl.server.max.receive.size), not 100 MiB."""
    host, port = sasl_broker.kafka_bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", 600 * 1024))
        assert sock.recv(1) == b""


def test_clients_cannot_produce_to_internal_topics(sasl_broker: BrokerThread) -> None:
    admin = sasl(sasl_broker, "PLAIN", ADMIN)  # a super user: only the rule, not the ACLs, refuses
    consumer = Consumer({**admin, "group.id": "makes-the-offsets-topic"})
    try:  # a group lookup creates the offsets topic
        consumer.list_topics(timeout=CALL_TIMEOUT_S)
        consumer.committed([TopicPartition("absent", 0)], timeout=CALL_TIMEOUT_S)
    except KafkaException:
        pass
    finally:
        consumer.close()
    error = produce_one(admin, "__consumer_offsets", b"forged commit")
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error
