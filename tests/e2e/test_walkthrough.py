"""A newcomer's first hour, as the docs tell it: README -> user guide -> client -> tiering -> Spark ->
cluster -> security, each step run as written (the broker a ``tierlog serve`` process in a fresh directory,
the CLI as commands, HTTP as curl sends it) and checked against the output the docs show.

One broker serves every step up to security (module scope, in order), then the security step stops it,
adds a user offline and starts it again on the same data directory with authentication on, as
docs/security.md does. Spark is the test session's SparkSession. The cluster step is the cluster of one
every broker is (docs/cluster.md); clusters of several brokers on etcd are in
tests/e2e/test_cluster_processes.py.
Where a doc shows output, the assertion quotes it; a doc that drifts from the code fails here.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.process import BrokerProcess, run_cli, wait_for

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs"
README = DOCS.parent / "README.md"


@dataclass
class Walk:
    """The walk's broker (``tierlog serve`` in ``workdir``, its data in ``./data`` as ``make run``'s)."""

    workdir: Path
    broker: BrokerProcess
    cluster_id: str = ""

    @property
    def server(self) -> tuple[str, str]:
        return ("--bootstrap-server", self.broker.url)

    def http(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", **headers: str
    ) -> tuple[int, Any]:
        """A request as the docs' curl lines send it; (status, decoded JSON or text)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.broker.url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        for name, value in headers.items():
            request.add_header(name.replace("_", "-"), value)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    workdir = tmp_path_factory.mktemp("first-hour")
    # spark.md's by-hand steps start the broker with an idle roll of one second
    broker = BrokerProcess(workdir, "--remote-max-upload-interval-ms", "1000")
    walked = Walk(workdir, broker)
    yield walked
    walked.broker.kill()


def doc(name: str) -> str:
    """The doc's text with every run of whitespace as one space (so a quote may span lines there)."""
    path = README if name == "README.md" else DOCS / name
    return flat(path.read_text(encoding="utf-8"))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_1_readme_the_broker_says_how_to_reach_it_and_the_quickstart_curls_work(walk: Walk) -> None:
    readme = doc("README.md")
    assert "**The `tierlog` command lives in the venv**" in readme
    log = walk.broker.log()
    assert "INFO tierlog: how to reach this broker:" in log  # as the README shows it
    assert re.search(
        rf"HTTP \(REST\)\s+{re.escape(walk.broker.url)}\s+\(health: {re.escape(walk.broker.url)}/ready", log
    )
    assert re.search(r"Kafka\s+127\.0\.0\.1:\d+\s+\(bootstrap\.servers for Kafka's clients\)", log)
    version = run_cli("--version")
    assert version.returncode == 0 and re.search(r"\d+\.\d+", version.stdout + version.stderr)

    # README's two curls: produce a JSON record to `events` (auto-created), read it back
    status, produced = walk.http(
        "POST", "/topics/events", {"records": [{"key": "k1", "value": {"hello": "world"}}]},
        content_type="application/vnd.kafka.json.v2+json",
    )  # fmt: skip
    assert status == 200 and produced["offsets"][0]["offset"] == 0
    status, records = walk.http(
        "GET", "/topics/events/partitions/0/records?offset=0", Accept="application/vnd.kafka.json.v2+json"
    )
    assert status == 200 and [(r["key"], r["value"]) for r in records] == [("k1", {"hello": "world"})]


def test_2_user_guide_topics_records_errors_and_the_cli(walk: Walk) -> None:
    guide = doc("user-guide.md")
    status, clusters = walk.http("GET", "/v3/clusters")
    walk.cluster_id = clusters["data"][0]["cluster_id"]
    topics = f"/v3/clusters/{walk.cluster_id}/topics"
    configs = [{"name": "retention.ms", "value": "86400000"}]
    status, _ = walk.http("POST", topics, {"topic_name": "orders", "partitions_count": 3, "configs": configs})
    assert status == 201

    body = {
        "records": [
            {"key": "alice", "value": {"item": "book", "qty": 1}},
            {"value": {"item": "pen", "qty": 3}, "partition": 0},
        ]
    }
    status, produced = walk.http(
        "POST", "/topics/orders", body, content_type="application/vnd.kafka.json.v2+json"
    )
    assert '# {"offsets":[{"partition":0,"offset":0,...},{"partition":0,"offset":1,...}],...}' in guide
    assert status == 200 and [(o["partition"], o["offset"]) for o in produced["offsets"]] == [(0, 0), (0, 1)]

    status, records = walk.http(
        "GET", "/topics/orders/partitions/0/records?offset=0", Accept="application/vnd.kafka.json.v2+json"
    )
    shown = [
        {"topic": "orders", "key": "alice", "value": {"item": "book", "qty": 1}, "partition": 0, "offset": 0},
        {"topic": "orders", "key": None, "value": {"item": "pen", "qty": 3}, "partition": 0, "offset": 1},
    ]
    assert status == 200 and records == shown
    assert (
        flat('#  {"topic":"orders","key":null,"value":{"item":"pen","qty":3},"partition":0,"offset":1}]')
        in guide
    )

    # the two documented errors, word for word
    status, error = walk.http("PUT", f"{topics}/orders/configs/segment.bytes", {"value": "10"})
    assert status == 400 and f"# {json.dumps(error)}" in guide
    status, error = walk.http("GET", f"{topics}/nope")
    assert status == 404 and f"# {json.dumps(error)}" in guide

    # the same from the command line
    described = run_cli("topics", "describe", "orders", *walk.server)
    assert described.returncode == 0, described.stderr
    assert "Topic: orders  PartitionCount: 3  ReplicationFactor: 1" in described.stdout
    produced_cli = run_cli("produce", "orders", "--key-separator", ":", *walk.server, stdin=b"alice:book\n")
    assert produced_cli.returncode == 0 and "produced 1 record(s) to orders" in produced_cli.stderr
    consumed = run_cli("consume", "orders", "--from-beginning", "--max-messages", "1", *walk.server)
    assert consumed.returncode == 0 and len(consumed.stdout.splitlines()) == 1


def test_3_client_the_producer_example_prints_what_the_doc_says(
    walk: Walk, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = (DOCS / "client.md").read_text("utf-8")
    section = section[section.index("## A producer") :]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert snippet is not None
    monkeypatch.setenv("TIERLOG_BOOTSTRAP_SERVER", walk.broker.url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet.group(1), "client.md", "exec"), {"__name__": "client_md"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "stored at page-views-0@1"  # the topic is auto-created with one partition
    assert "acknowledged 2" in lines


def test_4_tiering_a_typo_is_named_and_the_topic_goes_to_the_archive(walk: Walk) -> None:
    client_md = doc("client.md")
    typo = run_cli("produce", "evnets", *walk.server, stdin=b"x\n")
    line = "topic evnets did not exist: created it with the broker's default partition count"
    assert typo.returncode == 0 and line in typo.stderr and line in client_md
    refused = run_cli("produce", "evnets2", "--no-create-topic", *walk.server, stdin=b"x\n")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "tierlog produce: error: topic evnets2 does not exist (error code 40401)"
    assert flat(refused.stderr).replace("evnets2", "evnets") in client_md

    # spark.md's by-hand steps; README's quickstart made `events` already (untiered): turn tiering on
    spark_md = doc("spark.md")
    alter = "tierlog topics alter events --config remote.storage.enable=true --config segment.bytes=16384"
    assert alter in spark_md
    altered = run_cli(*alter.split()[1:], *walk.server)
    assert altered.returncode == 0, altered.stderr
    lines = "".join(f"user-{n}:event {n}\n" for n in range(1, 2001)).encode()  # seq 1 2000 | sed ...
    produced = run_cli("produce", "events", "--key-separator", ":", *walk.server, stdin=lines)
    assert produced.returncode == 0, produced.stderr

    def archived() -> dict[str, Any] | None:
        described = run_cli("topics", "describe", "events", "--json", *walk.server)
        state = json.loads(described.stdout)["partitions"][0]
        tiering = state["tiered_storage"]
        return state if tiering and tiering["remote_next_offset"] == state["log_end_offset"] == 2001 else None

    wait_for("events archived up to its log end", archived)
    table = run_cli("topics", "describe", "events", *walk.server).stdout
    header, row = table.splitlines()[-2:]
    columns = dict(zip(header.split(), row.split(), strict=True))
    assert (
        columns["REMOTE-END-OFFSET"] == columns["LOG-END-OFFSET"] == "2001"
    )  # what spark.md says to wait for
    assert columns["REMOTE-LOG-START"] == "0" and int(columns["REMOTE-SEGMENTS"]) >= 2


def test_5_spark_reads_the_archive_and_names_what_is_not_there(walk: Walk, spark: Any) -> None:
    archive = walk.workdir / "data" / "remote"  # TIERLOG_ARCHIVE=./data/remote
    df = spark.read.format("tierlog").option("uri", str(archive)).option("topic", "events").load()
    rows = df.selectExpr("offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value").collect()
    got = sorted((r["offset"], r["key"], r["value"]) for r in rows)
    assert got[0] == (0, '"k1"', '{"hello":"world"}') and len(got) == 2001  # REST's JSON format: JSON bytes
    assert got[1:] == [(n, f"user-{n}", f"event {n}") for n in range(1, 2001)]

    spark_md = doc("spark.md")
    assert "UnknownTopicError: topic 'events' is not in the archive at ./data/remote" in spark_md
    with pytest.raises(Exception, match=r"topic 'orders' is not in the archive at .*: topics found: events"):
        spark.read.format("tierlog").option("uri", str(archive)).option("topic", "orders").load().collect()


def test_6_cluster_a_broker_alone_is_a_cluster_of_one(walk: Walk) -> None:
    described = run_cli("cluster", "describe", *walk.server)
    assert described.returncode == 0, described.stderr
    first, header, broker = described.stdout.splitlines()[:3]
    assert (
        first
        == f"Cluster: {walk.cluster_id}  Controller: 0  ControllerEpoch: 1  Brokers: 1  OfflinePartitions: 0"
    )
    assert header.split() == ["BROKER", "URL", "RACK", "LEADER-OF", "CONTROLLER"]  # as cluster.md shows
    assert broker.split()[:3] == ["0", walk.broker.url, "-"] and broker.split()[-1] == "yes"


def test_7_security_users_offline_then_basic_authentication(walk: Walk) -> None:
    data_dir = str(walk.workdir / "data")
    running = run_cli("users", "list", "--data-dir", data_dir)
    assert running.returncode == 1 and "is running: use --bootstrap-server" in running.stderr
    assert walk.broker.stop() == 0
    for user in ("admin", "alice"):
        added = run_cli(
            "users", "add", user, "--password-stdin", "--data-dir", data_dir, stdin=f"{user}-secret".encode()
        )
        assert added.returncode == 0, added.stderr
    listed = run_cli("users", "list", "--data-dir", data_dir)
    assert "admin" in listed.stdout and "alice" in listed.stdout

    security_md = doc("security.md")
    assert "tierlog serve ... --authentication-methods basic --super-users 'User:admin'" in security_md
    walk.broker = BrokerProcess(
        walk.workdir, "--authentication-methods", "basic", "--super-users", "User:admin",
        "--remote-max-upload-interval-ms", "1000",
    )  # fmt: skip
    status, error = walk.http("GET", "/topics")
    assert status == 401 and error["error_code"] == 40101
    token = base64.b64encode(b"admin:admin-secret").decode()
    status, topics = walk.http("GET", "/topics", Authorization=f"Basic {token}")
    assert status == 200 and {"events", "orders", "page-views"} <= set(topics)
