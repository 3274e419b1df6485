"""A cluster of real processes: one etcd and three ``tierlog serve`` brokers on 127.0.0.1 (docs/cluster.md).

Failures are real signals to real processes: SIGKILL of the controller and of a partition's leader, SIGSTOP of
the controller past its lease and SIGCONT after. What the tests check is what docs/design/0008 promises:

* another broker becomes controller with a higher epoch once the dead one's lease expires, and a returning
  (or resumed) old controller never writes again: every partition state in etcd carries a controller epoch
  no higher than the current one, and every state written after the takeover carries the new one;
* before replication, a partition whose leader is gone answers 503 with 50311 (LeaderNotAvailableError,
  retriable) through every other broker, the Python client fails retriably or delivers once the leader is
  back, and every acknowledged record, and nothing else, is read back afterwards.

Every wait polls a condition against a deadline derived from the session timeout; nothing asserts a timing.
The failover times seen are printed (``-s``) for docs/cluster.md.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.e2e.process import DEADLINE_S, BrokerProcess, run_cli, wait_for
from tests.integration.cluster.etcd import EtcdServer
from tierlog.client.errors import DeliveryTimeoutError
from tierlog.client.sync_producer import Producer
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import LeaderNotAvailableError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_MS = 3000
HEARTBEAT_MS = 500
# A bound on every failover wait: the lease TTL, a keep-alive, an election and a reconcile pass, with room
# for a loaded 2-core machine. It is a deadline to give up at, never a timing the test asserts.
FAILOVER_DEADLINE_S = 4 * SESSION_MS / 1000 + 20
BATCHES = "application/vnd.tierlog.batches"
PREFIX = "e2e"
TOPIC = "orders"
PARTITIONS = 6
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: bytes | None = None, content_type: str | None = None) -> Answer:
    """One request; an HTTP error is an Answer too. Raises OSError when the broker cannot be reached."""
    request = urllib.request.Request(url, data=body, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Answer(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.read(), dict(err.headers))


@dataclass
class Cluster:
    """etcd and brokers 1..3 as child processes; ``start(n)`` (re)starts broker n on its own port and data."""

    etcd: EtcdServer
    root: Path
    ports: dict[int, int] = field(default_factory=dict)
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)  # SIGSTOPped: alive, but asking them would hang

    def start(self, broker_id: int) -> BrokerProcess:
        port = self.ports.setdefault(broker_id, free_port())
        workdir = self.root / f"broker-{broker_id}"
        old = self.brokers.get(broker_id)
        if old is not None:
            self.logs.append(old.log())  # the new process overwrites broker.log
        process = BrokerProcess(
            workdir,
            "--port", str(port),
            "--advertised-url", f"http://127.0.0.1:{port}",
            "--data-dir", str(workdir / "data"),
            "--metadata-uri", self.etcd.uri(PREFIX),
            "--broker-id", str(broker_id),
            "--broker-session-timeout-ms", str(SESSION_MS),
            "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
            "--num-partitions", "3",
        )  # fmt: skip
        self.brokers[broker_id] = process
        return process

    def url(self, broker_id: int) -> str:
        return f"http://127.0.0.1:{self.ports[broker_id]}"

    def live(self) -> list[int]:
        return [n for n, p in self.brokers.items() if p.proc.poll() is None and n not in self.paused]

    def metadata(self, via: int | None = None) -> dict[str, Any] | None:
        """``GET /native/v1/metadata`` of broker ``via`` (default: the first live one that answers)."""
        for broker_id in [via] if via is not None else self.live():
            try:
                answer = http("GET", self.url(broker_id) + "/native/v1/metadata")
            except OSError:
                continue
            if answer.status == 200:
                doc: dict[str, Any] = answer.json()
                return doc
        return None

    def etcd_kvs(self, sub: str = "") -> dict[str, tuple[bytes, int]]:
        """Every key under the cluster's prefix + ``sub``, read from etcd: key -> (value, mod_revision)."""
        etcdctl = Path(sys.executable).parent / "etcdctl"
        base = f"/{PREFIX}/"
        done = subprocess.run(
            [
                str(etcdctl),
                f"--endpoints={self.etcd.client_url}",
                "get",
                "--prefix",
                base + sub,
                "-w",
                "json",
            ],
            capture_output=True,
            timeout=DEADLINE_S,
            check=True,
        )
        doc = json.loads(done.stdout)
        return {
            base64.b64decode(kv["key"]).decode().removeprefix(base): (
                base64.b64decode(kv.get("value", "")),
                int(kv["mod_revision"]),
            )
            for kv in doc.get("kvs", [])
        }

    def partition_states(self) -> dict[str, tuple[dict[str, Any], int]]:
        return {k: (json.loads(v), rev) for k, (v, rev) in self.etcd_kvs("partitions/").items()}

    def controller(self) -> tuple[int, int] | None:
        """(controller id, epoch) as etcd holds them, or None while there is no controller."""
        kvs = self.etcd_kvs("controller")
        if "controller" not in kvs:
            return None
        record = json.loads(kvs["controller"][0])
        epoch = int(kvs["controller_epoch"][0])
        assert record["epoch"] == epoch, (record, epoch)
        return int(record["broker_id"]), epoch


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    etcd = EtcdServer(tmp_path / "etcd")
    etcd.start()
    running = Cluster(etcd, tmp_path)
    try:
        for broker_id in (1, 2, 3):
            running.start(broker_id)
        yield running
    finally:
        for process in running.brokers.values():
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)  # a paused broker must be able to die
            process.kill()
        etcd.stop()


def leaders(meta: dict[str, Any], topic: str = TOPIC) -> dict[int, dict[str, Any]]:
    for entry in meta.get("topics", []):
        if entry["topic"] == topic:
            return {int(p["partition"]): p for p in entry["partitions"]}
    return {}


def create_topic(cluster: Cluster, via: int = 1) -> dict[int, dict[str, Any]]:
    """Create TOPIC through broker ``via``'s v3 API; answer its partitions once every broker sees a leader
    for each one."""
    meta = wait_for("metadata from a broker", lambda: cluster.metadata(via))
    body = json.dumps({"topic_name": TOPIC, "partitions_count": PARTITIONS}).encode()
    path = f"/v3/clusters/{meta['cluster_id']}/topics"
    created = http("POST", cluster.url(via) + path, body, "application/json")
    assert created.status == 201, created.body

    def all_led() -> dict[int, dict[str, Any]] | None:
        views = [leaders(cluster.metadata(n) or {}) for n in cluster.live()]
        ok = all(len(v) == PARTITIONS and all(p["leader"] != -1 for p in v.values()) for v in views)
        return views[0] if ok else None

    return wait_for("a leader for every partition on every broker", all_led)


def new_controller(cluster: Cluster, old: tuple[int, int]) -> tuple[int, int]:
    """Poll etcd and the brokers until a controller other than ``old`` holds a higher epoch."""
    old_id, old_epoch = old

    def taken_over() -> tuple[int, int] | None:
        current = cluster.controller()
        if current is None or current[0] == old_id or current[1] <= old_epoch:
            return None
        meta = cluster.metadata()
        seen = meta is not None and (meta["controller_id"], meta["controller_epoch"]) == current
        return current if seen else None

    return wait_for(f"a new controller after broker {old_id}", taken_over, FAILOVER_DEADLINE_S)


def registered(cluster: Cluster, broker_id: int, present: bool) -> bool:
    meta = cluster.metadata()
    return meta is not None and (broker_id in {b["broker_id"] for b in meta["brokers"]}) == present


def assert_fenced(cluster: Cluster, epoch: int, since_revision: int) -> None:
    """No partition state names a controller epoch above ``epoch``, and every state written after
    ``since_revision`` was written by the controller of ``epoch``: an older controller wrote nothing."""
    states = cluster.partition_states()
    assert states, "no partition states in etcd"
    for key, (state, revision) in states.items():
        assert state["controller_epoch"] <= epoch, (key, state)
        if revision > since_revision:
            assert state["controller_epoch"] == epoch, (key, state, revision)


def test_killed_controller_is_replaced_with_a_higher_epoch_and_cannot_write_when_back(
    cluster: Cluster,
) -> None:
    create_topic(cluster)
    first = wait_for("a controller", cluster.controller)
    victim = first[0]
    led_by_victim = {p for p, s in leaders(cluster.metadata() or {}).items() if s["leader"] == victim}
    revision_before = max(rev for _, rev in cluster.partition_states().values())

    killed_at = time.monotonic()
    cluster.brokers[victim].kill()
    second = new_controller(cluster, first)
    print(f"\ncontroller {victim} killed: broker {second[0]} controller at epoch {second[1]} "
          f"after {time.monotonic() - killed_at:.1f} s (session timeout {SESSION_MS} ms)")  # fmt: skip
    assert second[1] > first[1]

    # Before replication the dead controller's partitions have no leader (their ISR keeps it).
    def victims_leaderless() -> bool:
        states = leaders(cluster.metadata(second[0]) or {})
        return all(states[p]["leader"] == -1 for p in led_by_victim) and len(states) == PARTITIONS

    wait_for("the killed broker's partitions leaderless", victims_leaderless, FAILOVER_DEADLINE_S)
    assert_fenced(cluster, second[1], revision_before)

    # The operator's view, through a surviving broker.
    wait_for("the killed broker's registration gone", lambda: registered(cluster, victim, False))
    server = ("--bootstrap-server", f"{cluster.url(victim)},{cluster.url(second[0])}")  # the dead one skipped
    described = run_cli("cluster", "describe", "--output", "json", *server)
    assert described.returncode == 0, described.stderr
    view = json.loads(described.stdout)
    assert (view["controller_id"], view["controller_epoch"]) == second
    assert sorted(b["broker_id"] for b in view["brokers"]) == sorted(set(cluster.brokers) - {victim})
    offline = {(o["topic"], o["partition"]) for o in view["offline_partitions"]}
    assert offline == {(TOPIC, p) for p in led_by_victim}
    topic = run_cli("topics", "describe", TOPIC, "--json", *server)
    assert topic.returncode == 0, topic.stderr
    for p in json.loads(topic.stdout)["partitions"]:
        if p["partition"] in led_by_victim:  # no leader: no offsets, rather than another broker's numbers
            assert p["leader"] == -1 and p["log_end_offset"] is None and p["isr"] == [victim], p
        else:
            assert p["leader"] != victim and p["log_end_offset"] == 0, p

    cluster.start(victim)
    wait_for("the restarted broker registered", lambda: registered(cluster, victim, True))

    def led_again() -> dict[int, dict[str, Any]] | None:
        states = leaders(cluster.metadata(victim) or {})
        ok = len(states) == PARTITIONS and all(states[p]["leader"] == victim for p in led_by_victim)
        return states if ok else None

    states = wait_for("the restarted broker leading its partitions again", led_again, FAILOVER_DEADLINE_S)
    assert all(states[p]["leader_epoch"] >= 2 for p in led_by_victim)  # lost (+1) and regained (+1)
    assert cluster.controller() == second, "the returning broker took the controller back"
    assert_fenced(cluster, second[1], revision_before)


def test_paused_controller_is_fenced_when_it_resumes(cluster: Cluster) -> None:
    create_topic(cluster)
    first = wait_for("a controller", cluster.controller)
    victim = first[0]
    paused = cluster.brokers[victim]

    paused.proc.send_signal(signal.SIGSTOP)
    cluster.paused.add(victim)
    try:
        second = new_controller(cluster, first)
        wait_for("the paused broker's registration gone", lambda: registered(cluster, victim, False))
        revision_at_takeover = max(rev for _, rev in cluster.partition_states().values())
    finally:
        paused.proc.send_signal(signal.SIGCONT)
        cluster.paused.discard(victim)
    print(f"\ncontroller {victim} paused past its lease: broker {second[0]} controller at epoch {second[1]}")

    # It wakes up believing it is controller at first[1]; every write it tries compares a controller key
    # that is gone, so none lands. It registers again (a new lease) and leads its partitions again.
    wait_for(
        "the resumed broker registered again", lambda: registered(cluster, victim, True), FAILOVER_DEADLINE_S
    )

    def settled() -> bool:
        states = leaders(cluster.metadata(victim) or {})
        return len(states) == PARTITIONS and all(s["leader"] != -1 for s in states.values())

    wait_for("every partition led again", settled, FAILOVER_DEADLINE_S)
    assert cluster.controller() == second, "the resumed broker took the controller back"
    assert_fenced(cluster, second[1], revision_at_takeover)
    resigned = f"broker {victim} stops acting as controller (epoch {first[1]})"
    wait_for(f"{resigned!r} in the resumed broker's log", lambda: resigned in paused.log())
    assert paused.proc.poll() is None, paused.log()
    assert "Traceback" not in paused.log(), paused.log()


def produce_native(url: str, partition: int, values: list[bytes]) -> Answer:
    batch = build_batch([Record(key=None, value=v) for v in values])
    path = f"/native/v1/topics/{TOPIC}/partitions/{partition}/batches?acks=1"
    return http("POST", url + path, batch, BATCHES)


def read_back(url: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of ``partition`` from its leader at ``url``: (offset, value) in offset order."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        path = f"/native/v1/topics/{TOPIC}/partitions/{partition}/batches?offset={offset}&max_wait_ms=0"
        answer = http("GET", url + path)
        assert answer.status == 200, (answer.status, answer.body)
        got = [(r.offset, r.value or b"") for _, r in iter_records(answer.body) if r.offset >= offset]
        if not got:
            return records
        records += got
        offset = got[-1][0] + 1


def error_code(answer: Answer) -> int:
    return int(answer.json()["error_code"])


def test_killed_leader_makes_its_partitions_unavailable_retriably_never_wrong(cluster: Cluster) -> None:
    states = create_topic(cluster)
    controller = wait_for("a controller", cluster.controller)[0]
    victim = next(s["leader"] for s in states.values() if s["leader"] != controller)
    victim_partitions = sorted(p for p, s in states.items() if s["leader"] == victim)
    other = next(n for n in cluster.live() if n != victim)

    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def produce(partition: int, values: list[bytes]) -> None:
        answer = produce_native(cluster.url(states[partition]["leader"]), partition, values)
        assert answer.status == 200, (answer.status, answer.body)
        base = int(answer.json()["base_offset"])
        acked[partition] += [(base + i, v) for i, v in enumerate(values)]

    for p in range(PARTITIONS):
        produce(p, [f"p{p}-before-{i}".encode() for i in range(20)])
    # A broker that does not lead a partition says so (50310) and names the leader; it never appends.
    misrouted = produce_native(cluster.url(other), victim_partitions[0], [b"misrouted"])
    assert misrouted.status == 503 and error_code(misrouted) == 50310, misrouted.body
    assert misrouted.json().get("leader_id") == victim

    cluster.brokers[victim].kill()

    def leaderless() -> bool:
        now = leaders(cluster.metadata(other) or {})
        return len(now) == PARTITIONS and all(now[p]["leader"] == -1 for p in victim_partitions)

    wait_for("the killed leader's partitions leaderless", leaderless, FAILOVER_DEADLINE_S)
    for p in victim_partitions:
        for via in cluster.live():
            sent = produce_native(cluster.url(via), p, [b"must not land"])
            assert sent.status == 503 and error_code(sent) == 50311, (via, p, sent.body)
            path = f"/native/v1/topics/{TOPIC}/partitions/{p}/batches?offset=0&max_wait_ms=0"
            fetched = http("GET", cluster.url(via) + path)
            assert fetched.status == 503 and error_code(fetched) == 50311, (via, p, fetched.body)
    # The other partitions go on as before.
    for p in sorted(set(range(PARTITIONS)) - set(victim_partitions)):
        produce(p, [f"p{p}-during-{i}".encode() for i in range(5)])

    live_urls = [cluster.url(n) for n in cluster.live()]
    with Producer(live_urls, delivery_timeout_ms=3000, request_timeout_ms=1000, linger_ms=0) as producer:
        doomed = producer.send(TOPIC, value=b"gives up", partition=victim_partitions[0])
        with pytest.raises(DeliveryTimeoutError) as failed:
            doomed.get(DEADLINE_S)
    # The producer retried within its delivery timeout; what it kept meeting is the retriable 50311.
    cause = failed.value.__cause__
    assert isinstance(cause, LeaderNotAvailableError) and cause.retriable, repr(cause)

    wait_for("the killed broker's registration gone", lambda: registered(cluster, victim, False))
    with Producer(live_urls, delivery_timeout_ms=int(DEADLINE_S * 1000), request_timeout_ms=2000) as producer:
        waiting = producer.send(TOPIC, value=b"delivered after the return", partition=victim_partitions[0])
        cluster.start(victim)
        delivered = waiting.get(DEADLINE_S)
    acked[victim_partitions[0]].append((delivered.offset, b"delivered after the return"))

    def led_again() -> dict[int, dict[str, Any]] | None:
        now = leaders(cluster.metadata(other) or {})
        ok = len(now) == PARTITIONS and all(now[p]["leader"] == victim for p in victim_partitions)
        return now if ok else None

    final = wait_for("the returned broker leading again", led_again, FAILOVER_DEADLINE_S)
    for p in range(PARTITIONS):
        got = read_back(cluster.url(final[p]["leader"]), p)
        assert got == sorted(acked[p]), (p, got, acked[p])
