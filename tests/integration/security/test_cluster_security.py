"""A secured cluster of real processes: one etcd and three ``tierlog serve`` brokers on 127.0.0.1 with an
HTTPS listener only (one ``trustme`` certificate for 127.0.0.1, shared), ``authentication.methods=basic``, and
the brokers authenticating to each other as ``User:broker`` (``inter.broker.username``), a super user.

The first users (the brokers' and the administrator's) are created offline in etcd with ``tierlog users add``
before any broker starts; the others and their ACLs through the v3 API of one broker, as the administrator.
What the tests check is that every broker-to-broker path works over TLS as the broker and authorizes the
client's user where it should:

* replication: a topic of replication factor 3 takes ``acks=all`` produces from the Python client (TLS and
  Basic), which needs every follower's replica fetch to succeed, and its ISR stays full;
* the REST v2 proxy: a produce (and a read) sent to a broker that does not lead the partition is done on the
  leader, for an allowed user; a user without Write is refused by the receiving broker and nothing is
  appended;
* the group forwarder: a commit sent to a broker that does not coordinate the group is forwarded (and a
  listing of groups gathered from every broker), and the coordinator authorizes the original user: a user
  with Read on the group but not on the topic is refused there (the broker itself, a super user, would be
  allowed), as is a user without Read on the group and one that claims to be the administrator in
  ``Tierlog-Forwarded-Principal``.

Every wait polls a condition against a deadline; nothing asserts a timing.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trustme

from tests.e2e.process import DEADLINE_S, BrokerProcess, clean_env, run_cli, wait_for
from tests.integration.cluster.etcd import EtcdServer
from tierlog.client.sync_producer import Producer
from tierlog.service.groups.hashing import coordinator_partition

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROKERS = (1, 2, 3)
PREFIX = "secure"
TOPIC = "orders"
PARTITIONS = 3
GROUP = "audit"
OFFSETS_TOPIC = "__consumer_offsets"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
# Passwords of this test's throwaway users; the brokers read theirs from their TOML file.
PASSWORDS = {
    "broker": "broker-secret-1",
    "admin": "admin-secret-1",
    "alice": "alice-secret-1",
    "bob": "bob-secret-1",
    "carol": "carol-secret-1",
}
LISTENING = re.compile(r"listening on (https://127\.0\.0\.1:\d+)")
READY = re.compile(r"ready: cluster")
T = TypeVar("T")


@dataclass
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class SecureBroker(BrokerProcess):
    """``tierlog serve`` with an HTTPS listener: started by :meth:`spawn`, then :meth:`wait_ready` (so several
    start together). Its URL is the ``listening on https://...`` line's."""

    def __init__(self, workdir: Path, *args: str) -> None:  # not BrokerProcess's: it waits for http://
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tierlog", "serve", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                cwd=workdir,
            )
        self.url = ""

    def wait_ready(self) -> None:
        self.url = self.wait_for_line(LISTENING).group(1)
        self.wait_for_line(READY)


@dataclass
class SecureCluster:
    etcd: EtcdServer
    ca: Path
    brokers: dict[int, SecureBroker]
    ports: dict[int, int]
    context: ssl.SSLContext
    cluster_id: str = ""

    def url(self, broker_id: int) -> str:
        return f"https://127.0.0.1:{self.ports[broker_id]}"

    def call(
        self,
        broker_id: int,
        method: str,
        path: str,
        *,
        user: str | None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One HTTPS request to broker ``broker_id`` as ``user`` (None: no credentials); an HTTP error is an
        Answer too."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url(broker_id) + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if accept is not None:
            request.add_header("Accept", accept)
        if user is not None:
            pair = f"{user}:{PASSWORDS[user]}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(pair).decode())
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.context)
        )
        try:
            with opener.open(request, timeout=30) as response:
                return Answer(response.status, response.read())
        except urllib.error.HTTPError as err:
            return Answer(err.code, err.read())

    def metadata(self, broker_id: int) -> dict[str, Any]:
        answer = self.call(broker_id, "GET", "/native/v1/metadata", user="admin")
        assert answer.status == 200, answer.body
        doc: dict[str, Any] = answer.json()
        return doc

    def partitions(self, broker_id: int, topic: str) -> dict[int, dict[str, Any]]:
        for entry in self.metadata(broker_id)["topics"]:
            if entry["topic"] == topic and "partitions" in entry:
                return {int(p["partition"]): p for p in entry["partitions"]}
        return {}


def _write_pki(directory: Path) -> tuple[Path, Path, Path]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    paths = directory / "ca.pem", directory / "broker.pem", directory / "broker-key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths[1]))
    server.private_key_pem.write_to_path(str(paths[2]))
    return paths


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _add_user_offline(uri: str, name: str) -> None:
    done = run_cli(
        "users", "add", name, "--password-stdin", "--metadata-uri", uri, stdin=PASSWORDS[name].encode()
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    root = tmp_path_factory.mktemp("secure-cluster")
    ca, cert, key = _write_pki(root)
    etcd = EtcdServer(root / "etcd")
    etcd.start()
    brokers: dict[int, SecureBroker] = {}
    try:
        uri = etcd.uri(PREFIX)
        for name in ("broker", "admin"):
            _add_user_offline(uri, name)
        config = root / "security.toml"
        config.write_text(
            "\n".join(
                [
                    f'"ssl.certfile" = "{cert}"',
                    f'"ssl.keyfile" = "{key}"',
                    f'"ssl.cafile" = "{ca}"',
                    '"authentication.methods" = "basic"',
                    '"super.users" = "User:broker;User:admin"',
                    '"inter.broker.username" = "broker"',
                    f'"inter.broker.password" = "{PASSWORDS["broker"]}"',
                    "",
                ]
            )
        )
        ports = {n: _free_port() for n in BROKERS}
        for n in BROKERS:
            workdir = root / f"broker-{n}"
            brokers[n] = SecureBroker(
                workdir,
                "--config", str(config),
                "--port", str(ports[n]),
                "--advertised-url", f"https://127.0.0.1:{ports[n]}",
                "--data-dir", str(workdir / "data"),
                "--metadata-uri", uri,
                "--broker-id", str(n),
            )  # fmt: skip
        for process in brokers.values():
            process.wait_ready()
        context = ssl.create_default_context(cafile=str(ca))
        yield SecureCluster(etcd, ca, brokers, ports, context)
    finally:
        for process in brokers.values():
            process.kill()
        etcd.stop()


@pytest.fixture(scope="module")
def secured(cluster: SecureCluster) -> SecureCluster:
    """The cluster with TOPIC (replication factor 3), users alice, bob and carol, and their ACLs; every
    broker sees the users and a leader and a full ISR for every partition."""
    clusters = cluster.call(1, "GET", "/v3/clusters", user="admin")
    assert clusters.status == 200, clusters.body
    cluster.cluster_id = clusters.json()["data"][0]["cluster_id"]
    v3 = f"/v3/clusters/{cluster.cluster_id}"
    for name in ("alice", "bob", "carol"):
        put = cluster.call(1, "PUT", f"{v3}/users/{name}", user="admin", body={"password": PASSWORDS[name]})
        assert put.status == 201, put.body

    def acl(principal: str, kind: str, name: str, operation: str) -> dict[str, str]:
        return {
            "resource_type": kind,
            "resource_name": name,
            "pattern_type": "LITERAL",
            "principal": f"User:{principal}",
            "host": "*",
            "operation": operation,
            "permission": "ALLOW",
        }

    acls = [
        acl("alice", "TOPIC", TOPIC, "WRITE"),
        acl("alice", "TOPIC", TOPIC, "READ"),
        acl("alice", "GROUP", GROUP, "READ"),
        acl("bob", "GROUP", GROUP, "READ"),  # but no Read on the topic
        acl("carol", "TOPIC", TOPIC, "READ"),  # but nothing on the group, and no Write
    ]
    created = cluster.call(1, "POST", f"{v3}/acls:batch", user="admin", body={"data": acls})
    assert created.status == 201, created.body
    topic = {"topic_name": TOPIC, "partitions_count": PARTITIONS, "replication_factor": 3}
    made = cluster.call(1, "POST", f"{v3}/topics", user="admin", body=topic)
    assert made.status == 201, made.body

    def settled() -> bool:
        for n in BROKERS:
            for user in ("alice", "bob", "carol"):  # the user and the ACLs reached that broker
                if cluster.call(n, "GET", "/topics", user=user).status != 200:
                    return False
            parts = cluster.partitions(n, TOPIC)
            if len(parts) != PARTITIONS or any(p["leader"] < 0 or len(p["isr"]) != 3 for p in parts.values()):
                return False
        return cluster.call(1, "GET", f"/topics/{TOPIC}", user="alice").status == 200

    wait_for("users, ACLs and a full ISR on every broker", settled)
    return cluster


def _not_leading(cluster: SecureCluster, partition: int) -> tuple[int, int]:
    """(leader, another broker) of TOPIC's ``partition``."""
    leader = int(cluster.partitions(1, TOPIC)[partition]["leader"])
    return leader, next(n for n in BROKERS if n != leader)


def test_acks_all_produce_over_tls_is_replicated_to_a_full_isr(secured: SecureCluster) -> None:
    bootstrap = ",".join(secured.url(n) for n in BROKERS)
    with Producer(
        bootstrap,
        security_protocol="SASL_SSL",
        ssl_cafile=str(secured.ca),
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        acks="all",
        linger_ms=0,
        request_timeout_ms=10_000,
        delivery_timeout_ms=20_000,  # a follower that cannot fetch fails the test in 20 s, not 2 minutes
    ) as producer:
        futures = [producer.send(TOPIC, value=f"r{i}".encode(), partition=i % PARTITIONS) for i in range(30)]
        sent = [f.get(DEADLINE_S) for f in futures]
    per_partition = {p: sorted(m.offset for m in sent if m.partition == p) for p in range(PARTITIONS)}
    assert per_partition == {p: list(range(10)) for p in range(PARTITIONS)}

    # acks=all answered only once every ISR member had the records: the followers fetched over TLS as the
    # broker. The ISR is still everyone, on every broker's view.
    for n in BROKERS:
        parts = secured.partitions(n, TOPIC)
        assert all(sorted(p["isr"]) == list(BROKERS) for p in parts.values()), parts


def test_rest_produce_and_read_through_a_broker_that_does_not_lead_are_proxied(
    secured: SecureCluster,
) -> None:
    partition = 1
    leader, other = _not_leading(secured, partition)
    path = f"/topics/{TOPIC}/partitions/{partition}"
    record = {"records": [{"value": base64.b64encode(b"via the proxy").decode()}]}

    before = secured.call(leader, "GET", f"{path}/offsets", user="alice", accept=V2)
    assert before.status == 200, before.body
    end = int(before.json()["end_offset"])

    produced = secured.call(other, "POST", path, user="alice", body=record, content_type=BINARY_V2, accept=V2)
    assert produced.status == 200, produced.body
    assert produced.json()["offsets"][0]["offset"] == end

    read = secured.call(other, "GET", f"{path}/records?offset={end}", user="alice", accept=BINARY_V2)
    assert read.status == 200, read.body
    assert [base64.b64decode(r["value"]) for r in read.json()] == [b"via the proxy"]

    # Refused on the receiving broker, as the user: nothing reaches the leader's log.
    refused = secured.call(other, "POST", path, user="carol", body=record, content_type=BINARY_V2, accept=V2)
    assert refused.status == 403, refused.body
    assert refused.json()["error_code"] == 40301
    anonymous = secured.call(other, "POST", path, user=None, body=record, content_type=BINARY_V2, accept=V2)
    assert anonymous.status == 401, anonymous.body
    after = secured.call(leader, "GET", f"{path}/offsets", user="alice", accept=V2)
    assert int(after.json()["end_offset"]) == end + 1


def _coordinator_and_other(cluster: SecureCluster) -> tuple[int, int]:
    """(coordinator of GROUP, another broker), once ``__consumer_offsets`` exists and has a leader."""

    def located() -> tuple[int, int] | None:
        # the first group request of the cluster creates the offsets topic (503 until it is led)
        cluster.call(1, "GET", f"/native/v1/groups/{GROUP}", user="admin")
        parts = cluster.partitions(1, OFFSETS_TOPIC)
        if not parts or any(p["leader"] < 0 for p in parts.values()):
            return None
        leader = int(parts[coordinator_partition(GROUP, len(parts))]["leader"])
        return leader, next(n for n in BROKERS if n != leader)

    return wait_for(f"a coordinator for group {GROUP}", located)


def test_a_forwarded_group_commit_is_authorized_as_the_client_on_the_coordinator(
    secured: SecureCluster,
) -> None:
    coordinator, other = _coordinator_and_other(secured)
    commit = f"/native/v1/groups/{GROUP}/offsets/commit"
    fetch = f"/native/v1/groups/{GROUP}/offsets/fetch"

    def offsets(offset: int) -> dict[str, Any]:
        return {"offsets": [{"topic": TOPIC, "partition": 0, "offset": offset}]}

    def ready() -> Answer | None:  # the coordinator may still be loading its new offsets partition (503)
        answer = secured.call(other, "POST", commit, user="alice", body=offsets(7))
        return None if answer.status == 503 else answer

    committed = wait_for("a forwarded commit answered", ready)
    assert committed.status == 204, committed.body
    seen = secured.call(
        other, "POST", fetch, user="alice", body={"partitions": [{"topic": TOPIC, "partition": 0}]}
    )
    assert seen.status == 200, seen.body
    assert [o["offset"] for o in seen.json()["offsets"]] == [7]

    # The cluster-wide listing asks every other broker as this one, each filtering for the client.
    listed = secured.call(other, "GET", "/native/v1/groups", user="alice")
    assert listed.status == 200, listed.body
    assert GROUP in [g["group_id"] for g in listed.json()["groups"]]
    hidden = secured.call(other, "GET", "/native/v1/groups", user="carol")
    assert hidden.status == 200, hidden.body
    assert GROUP not in [g["group_id"] for g in hidden.json()["groups"]]

    # bob may Read the group but not the topic: only the coordinator's handler sees the committed topics,
    # so this refusal shows it authorized bob (the forwarding broker, a super user, would pass).
    bob = secured.call(other, "POST", commit, user="bob", body=offsets(99))
    assert bob.status == 403, bob.body
    assert bob.json()["error_code"] == 40301 and TOPIC in bob.json()["message"], bob.body
    # carol has no Read on the group, however she claims to be someone else
    for headers in ({}, {"Tierlog-Forwarded-Principal": "User:admin", "Tierlog-Forwarded-Host": "127.0.0.1"}):
        carol = secured.call(other, "POST", commit, user="carol", body=offsets(99), headers=headers)
        assert carol.status == 403, (headers, carol.body)
    # the same claim sent to the coordinator directly is ignored (carol may not ClusterAction)
    direct = secured.call(
        coordinator,
        "POST",
        commit,
        user="carol",
        body=offsets(99),
        headers={"Tierlog-Forwarded-Principal": "User:admin"},
    )
    assert direct.status == 403, direct.body

    after = secured.call(
        coordinator, "POST", fetch, user="admin", body={"partitions": [{"topic": TOPIC, "partition": 0}]}
    )
    assert [o["offset"] for o in after.json()["offsets"]] == [7]
