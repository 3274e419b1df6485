"""The Kafka protocol listener under a fuzzer: Hypothesis sends batches of frames on raw sockets (garbage,
valid headers with garbage bodies, truncated frames, zero and oversized size prefixes, and valid requests
of every served API key and version built from kio's schemas), many frames in one write. Every frame is
answered in order with its correlation id and a body that decodes as its version's response, or the
connection is closed; the listener serves on (a fresh confluent-kafka client reads the metadata), leaks no
connection (its open-connection gauge returns to zero) and logs nothing at ERROR. Also the connection
limits: max.connections, connections.max.idle.ms, request.read.timeout.ms, and a client that never reads.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.serial import entity_reader

from tests.integration.broker import BrokerThread, StartThread
from tests.unit.service.kafka.test_fuzz_frames import SERVED, request_bytes, served_requests
from tierlog.service.kafka.messages import is_flexible

pytestmark = pytest.mark.integration

BOUND_S = 10  # every socket call and every wait: a deadline, never a timing assertion
_SIZE = struct.Struct(">i")
_PRODUCE_KEY = 0
_API_VERSIONS_KEY = 18


@dataclass(frozen=True)
class Frame:
    """Bytes sent and what they are: ``correlation`` when the header parses; ``answered`` when they are a
    valid request Kafka answers (only those; a valid ``acks=0`` produce is not answered)."""

    data: bytes
    correlation: int | None = None
    key_version: tuple[int, int] | None = None
    answered: bool = False


def header(key: int, version: int, correlation: int, client_id: str | None) -> bytes:
    raw = None if client_id is None else client_id.encode()
    fixed = struct.pack(">hhi", key, version, correlation)
    fixed += struct.pack(">h", -1) if raw is None else struct.pack(">h", len(raw)) + raw
    return fixed + (b"\x00" if is_flexible(key, version) else b"")


def framed(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


correlations = st.integers(-(2**31), 2**31 - 1)
client_ids = st.none() | st.text(max_size=8)


@st.composite
def valid_frames(draw: st.DrawFn) -> Frame:
    key, version, entity = draw(served_requests())
    correlation = draw(correlations)
    payload = header(key, version, correlation, draw(client_ids)) + request_bytes(key, version, entity)
    answered = not (key == _PRODUCE_KEY and getattr(entity, "acks", 1) == 0)
    return Frame(framed(payload), correlation, (key, version), answered)


@st.composite
def garbage_bodies(draw: st.DrawFn) -> Frame:
    key, version = draw(st.sampled_from(SERVED))
    correlation = draw(correlations)
    payload = header(key, version, correlation, draw(client_ids)) + draw(st.binary(max_size=64))
    return Frame(framed(payload), correlation)


@st.composite
def any_headers(draw: st.DrawFn) -> Frame:
    key = draw(st.integers(-(2**15), 2**15 - 1) | st.sampled_from([k for k, _ in SERVED]))
    version = draw(st.integers(-(2**15), 2**15 - 1) | st.integers(0, 20))
    correlation = draw(correlations)
    fixed = struct.pack(">hhi", key, version, correlation) + draw(st.binary(max_size=32))
    return Frame(framed(fixed), correlation)


@st.composite
def flipped_frames(draw: st.DrawFn) -> Frame:
    """A valid request with one byte after its API key, version and correlation id flipped."""
    frame = draw(valid_frames())
    data = bytearray(frame.data)
    at = draw(st.integers(12, len(data) - 1))
    data[at] ^= draw(st.integers(1, 255))
    return Frame(bytes(data), frame.correlation)


@st.composite
def desynchronising_frames(draw: st.DrawFn) -> Frame:
    """Bytes whose size prefix is not their size: a valid request cut short, a size prefix that lies (zero,
    negative, past socket.request.max.bytes, any), raw garbage. What the listener reads after them is
    not frames the fuzzer can predict, so a batch ends with at most one."""
    frame = draw(valid_frames())
    kind = draw(st.sampled_from(["truncate", "size", "raw"]))
    data = bytearray(frame.data)
    if kind == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "size":
        size = draw(st.sampled_from([0, 1, 7, -1, -(2**31), 2**31 - 1]) | st.integers(0, len(data)))
        data[:4] = _SIZE.pack(size)
    else:
        data = bytearray(draw(st.binary(min_size=1, max_size=64)))
    return Frame(bytes(data))


in_sync_frames = st.one_of(valid_frames(), garbage_bodies(), any_headers(), flipped_frames())
batches = st.tuples(
    st.lists(in_sync_frames, min_size=1, max_size=6, unique_by=lambda f: f.correlation),
    st.none() | desynchronising_frames(),
)


@dataclass(frozen=True)
class Answer:
    correlation: int
    body: bytes


def exchange(bootstrap: str, batch: list[Frame]) -> list[Answer]:
    """Send ``batch`` in one write, half-close, and read answers until the listener closes."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=BOUND_S) as sock:
        try:
            sock.sendall(b"".join(f.data for f in batch))
            sock.shutdown(socket.SHUT_WR)
        except ConnectionError:
            pass  # closed while we wrote: what was answered is still readable, or nothing was
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    answers = []
    while data:
        assert len(data) >= 8, f"a partial answer frame: {data!r}"
        (size,) = _SIZE.unpack_from(data)
        assert 4 <= size <= len(data) - 4, f"answer frame of {size} bytes, {len(data) - 4} received"
        (correlation,) = _SIZE.unpack_from(data, 4)
        answers.append(Answer(correlation, data[8 : 4 + size]))
        data = data[4 + size :]
    return answers


def check_answers(batch: list[Frame], answers: list[Answer], *, more: bool = False) -> None:
    """Answers come in order, each with the correlation id of its frame (correlation ids are unique in a
    batch); each valid request is answered, with a body its version's response schema reads to the end,
    unless a frame before it that is not one went unanswered (the listener may have closed the
    connection there). ``more``: bytes followed ``batch``, so answers may follow too."""
    at = 0
    maybe_closed = False
    for frame in batch:
        answer = answers[at] if at < len(answers) else None
        if answer is not None and answer.correlation == frame.correlation:
            if frame.key_version is not None:
                check_body(*frame.key_version, answer.body)
            at += 1
        elif frame.answered and not maybe_closed:
            raise AssertionError(f"valid request {frame.key_version} with {frame.correlation} unanswered")
        elif frame.key_version is None:
            maybe_closed = True
    assert more or at == len(answers), f"answers no frame asked for: {answers[at:]}"


def check_body(key: int, version: int, body: bytes) -> None:
    flexible_header = is_flexible(key, version) and key != _API_VERSIONS_KEY
    if flexible_header:
        assert body[:1] == b"\x00", "tagged fields in a response header"
        body = body[1:]
    _entity, end = entity_reader(load_response_schema(key, version))(body, 0)
    assert end == len(body), f"{len(body) - end} bytes after the response of {key} v{version}"


# ---- the listener's health after each batch --------------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND_S} s: {what}"
        time.sleep(0.02)


def open_connections(broker: BrokerThread) -> float:
    with urllib.request.urlopen(f"{broker.url}/metrics", timeout=BOUND_S) as response:
        text: str = response.read().decode()
    for line in text.splitlines():
        if line.startswith("tierlog_kafka_connections_open "):
            return float(line.split()[1])
    raise AssertionError("no tierlog_kafka_connections_open gauge")


def assert_serving(broker: BrokerThread) -> None:
    """A fresh client reads the metadata, and once it is gone no Kafka connection is left open."""
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap})
    assert admin.list_topics(timeout=BOUND_S).brokers
    del admin  # librdkafka closes its connections when the client is destroyed
    wait_until(lambda: open_connections(broker) == 0, "every Kafka connection closed")


@pytest.fixture
def broker_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The Kafka listener's log records; none may be at ERROR (a crash on our side, not the client's)."""
    with caplog.at_level(logging.WARNING, logger="tierlog.kafka"):
        yield caplog
    errors = [r for r in caplog.records if r.name.startswith("tierlog.kafka") and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


FUZZ = settings(
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def test_every_frame_is_answered_in_order_or_closes_the_connection(
    kafka_broker: BrokerThread, broker_log: pytest.LogCaptureFixture
) -> None:
    @FUZZ
    @given(batch=batches)
    def run(batch: tuple[list[Frame], Frame | None]) -> None:
        in_sync, last = batch
        answers = exchange(kafka_broker.kafka_bootstrap, in_sync if last is None else [*in_sync, last])
        check_answers(in_sync, answers, more=last is not None)

    run()
    assert_serving(kafka_broker)


def test_valid_requests_of_every_served_version_are_all_answered(
    kafka_broker: BrokerThread, broker_log: pytest.LogCaptureFixture
) -> None:
    @FUZZ
    # correlation ids unique in a batch, as check_answers needs (an unanswered acks=0 produce would
    # otherwise take the answer of a later request with its id)
    @given(batch=st.lists(valid_frames(), min_size=1, max_size=8, unique_by=lambda f: f.correlation))
    def run(batch: list[Frame]) -> None:
        answers = exchange(kafka_broker.kafka_bootstrap, batch)
        check_answers(batch, answers)
        assert len(answers) == sum(f.answered for f in batch)

    run()
    assert_serving(kafka_broker)


# ---- connection limits -----------------------------------------------------------------------------------

API_VERSIONS_V0 = framed(header(_API_VERSIONS_KEY, 0, 1, "limits"))


def connect(broker: BrokerThread) -> socket.socket:
    host, port = broker.kafka_bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=BOUND_S)


def assert_closed(sock: socket.socket) -> None:
    """The listener closed ``sock`` without answering: EOF, or a reset for the request it did not read."""
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(1) == b""


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + _SIZE.unpack_from(data)[0]:
        chunk = sock.recv(65536)
        assert chunk, "closed before the answer"
        data += chunk
    return data


@pytest.fixture
def limited_broker(broker_threads: StartThread) -> BrokerThread:
    """A broker with two connections at most, idle and read timeouts of 300 ms, no auto-creation."""
    return broker_threads(
        {
            "auto.create.topics.enable": "false",
            "max.connections": "2",
            "connections.max.idle.ms": "300",
            "request.read.timeout.ms": "300",
        }
    )


def test_max_connections_refuses_the_one_past_the_limit(limited_broker: BrokerThread) -> None:
    with connect(limited_broker) as first, connect(limited_broker) as second:
        for sock in (first, second):
            sock.sendall(API_VERSIONS_V0)
            assert read_answer(sock)
        with connect(limited_broker) as third:
            third.sendall(API_VERSIONS_V0)
            assert_closed(third)
    wait_until(lambda: open_connections(limited_broker) == 0, "every Kafka connection closed")


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(limited_broker: BrokerThread) -> None:
    with connect(limited_broker) as sock:
        sock.sendall(API_VERSIONS_V0)
        assert read_answer(sock)
        assert sock.recv(1) == b""  # the listener closes it; the socket's timeout bounds the wait


@pytest.mark.parametrize("sent", [2, 9], ids=["half-a-size", "half-a-frame"])
def test_half_a_frame_is_closed_after_request_read_timeout_ms(
    limited_broker: BrokerThread, caplog: pytest.LogCaptureFixture, sent: int
) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.kafka"), connect(limited_broker) as sock:
        sock.sendall(API_VERSIONS_V0[:sent])
        assert sock.recv(1) == b""
    assert any("request.read.timeout.ms" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_client_that_never_reads_answers_is_closed(
    limited_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    # Metadata v1 naming 2,000 topics of 100 characters: each answer (every name, unknown) is ~200 kB, so a
    # few fill the socket buffers while the client reads nothing
    names = [f"{n:0100d}".encode() for n in range(2000)]
    topics = struct.pack(">i", len(names)) + b"".join(struct.pack(">h", len(n)) + n for n in names)
    metadata = framed(header(3, 1, 2, "never-reads") + topics)
    with caplog.at_level(logging.WARNING, logger="tierlog.kafka"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(BOUND_S)
        with sock:
            host, port = limited_broker.kafka_bootstrap.rsplit(":", 1)
            sock.connect((host, int(port)))
            with contextlib.suppress(ConnectionError):  # the listener gave up on us while we wrote
                for _ in range(100):
                    sock.sendall(metadata)
            wait_until(
                lambda: any("read no answer" in r.getMessage() for r in caplog.records),
                "the listener closed the connection",
            )
    wait_until(lambda: open_connections(limited_broker) == 0, "every Kafka connection closed")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_answers_to_pipelined_requests_in_one_segment_come_in_order(kafka_broker: BrokerThread) -> None:
    batch = [
        Frame(framed(header(_API_VERSIONS_KEY, 3, n, "pipe") + b"\x01\x01\x00"), n, (18, 3), True)
        for n in range(50)
    ]
    answers = exchange(kafka_broker.kafka_bootstrap, batch)
    assert [a.correlation for a in answers] == list(range(50))
    check_answers(batch, answers)


def test_a_zero_size_frame_closes_the_connection(kafka_broker: BrokerThread) -> None:
    with connect(kafka_broker) as sock:
        sock.sendall(_SIZE.pack(0) + API_VERSIONS_V0)
        assert_closed(sock)
