"""SASL on the Kafka listener beyond the first authentication: SaslHandshake v0's bare tokens (clients
before Kafka 1.0) and KIP-368's session lifetime, re-authentication on the same connection and the close
of a connection whose session expired, with raw frames and with confluent-kafka (which re-authenticates
by itself)."""

from __future__ import annotations

import base64
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.integration.broker import BrokerThread
from tests.integration.kafka.sasl_support import connect, frame, request, sasl, start_with_users

pytestmark = pytest.mark.integration

WAIT_S = 15
LIFETIME_MS = 1500
ADMIN = ("admin", "admin-secret")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    """A SASL broker whose sessions last LIFETIME_MS."""
    settings = {
        "authentication.methods": "basic",
        "super.users": "User:admin",
        "connections.max.reauth.ms": str(LIFETIME_MS),
    }
    data_dir = tmp_path_factory.mktemp("sasl-sessions") / "data"
    running = start_with_users(data_dir, {ADMIN[0]: (ADMIN[1], "SCRAM-SHA-256")}, settings)
    yield running
    running.close()


def _plain(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def _authenticate(sock: socket.socket, password: str = ADMIN[1]) -> Any:
    """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN; the SaslAuthenticate answer."""
    assert request(sock, 17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code.value == 0
    return request(sock, 36, 1, SaslAuthenticateRequest(auth_bytes=_plain(ADMIN[0], password)))


def _metadata(sock: socket.socket) -> Any:
    return request(sock, 3, 1, MetadataRequest(topics=None))


# ---- SaslHandshake v0 -------------------------------------------------------------------------------------


def test_a_v0_handshake_is_followed_by_bare_tokens(broker: BrokerThread) -> None:
    with connect(broker) as sock:
        answer = request(sock, 17, 0, HandshakeV0(mechanism="PLAIN"))
        assert answer.error_code.value == 0 and "PLAIN" in answer.mechanisms
        assert frame(sock, _plain(*ADMIN)) == b""  # PLAIN's server token: empty, size-prefixed
        assert _metadata(sock).brokers  # authenticated: Kafka's framing from here on


def test_a_failed_v0_exchange_closes_the_connection_without_an_answer(broker: BrokerThread) -> None:
    with connect(broker) as sock:
        assert request(sock, 17, 0, HandshakeV0(mechanism="PLAIN")).error_code.value == 0
        with pytest.raises(ConnectionError):
            frame(sock, _plain(ADMIN[0], "wrong"))


# ---- KIP-368 ----------------------------------------------------------------------------------------------


def test_a_session_is_re_authenticated_on_its_connection_then_closed_once_expired(
    broker: BrokerThread,
) -> None:
    with connect(broker) as sock:
        answer = _authenticate(sock)
        assert answer.error_code.value == 0
        assert answer.session_lifetime == timedelta(milliseconds=LIFETIME_MS)
        again = _authenticate(sock)  # re-authentication, same connection, same principal
        assert (again.error_code.value, again.session_lifetime) == (0, timedelta(milliseconds=LIFETIME_MS))
        # a second re-authentication within a second is refused, as Kafka refuses it
        assert request(sock, 17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code.value == 34
        assert _metadata(sock).brokers
        deadline = time.monotonic() + WAIT_S
        with pytest.raises(ConnectionError):  # served until the session ends, then closed
            while time.monotonic() < deadline:
                _metadata(sock)
                time.sleep(0.1)
        assert time.monotonic() < deadline


def test_re_authenticating_with_another_mechanism_fails(broker: BrokerThread) -> None:
    with connect(broker) as sock:
        assert _authenticate(sock).error_code.value == 0
        assert request(sock, 17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code.value == 0
        answer = request(sock, 36, 1, SaslAuthenticateRequest(auth_bytes=b"n,,n=admin,r=abc"))
        assert answer.error_code.value == 58 and "re-authentication" in answer.error_message
        with pytest.raises(ConnectionError):
            _metadata(sock)


def _handshakes(broker: BrokerThread) -> float:
    metrics = urllib.request.Request(f"{broker.url}/metrics")
    metrics.add_header("Authorization", "Basic " + base64.b64encode(":".join(ADMIN).encode()).decode())
    with urllib.request.urlopen(metrics, timeout=WAIT_S) as answer:
        text = answer.read().decode()
    found = re.search(r'tierlog_kafka_requests_total\{api="SaslHandshake"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_confluent_kafka_re_authenticates_before_its_session_ends(
    broker: BrokerThread, topic_name: str
) -> None:
    producer = Producer(sasl(broker, "PLAIN", ADMIN, **{"message.timeout.ms": 10_000}))
    errors: list[Any] = []

    def produce(value: bytes) -> None:
        producer.produce(topic_name, value, callback=lambda err, _msg: errors.append(err))
        assert producer.flush(WAIT_S) == 0

    produce(b"first")
    connected = _handshakes(broker)
    deadline = time.monotonic() + WAIT_S
    while _handshakes(broker) <= connected:  # librdkafka re-authenticates before the lifetime ends
        assert time.monotonic() < deadline, "no re-authentication"
        producer.poll(0.1)
    produce(b"after re-authentication")
    assert errors == [None, None]
