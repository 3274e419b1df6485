"""``tierlog cluster describe`` and the leadership columns of ``tierlog topics describe`` against a real
embedded broker: a one-broker cluster whose controller it is, leading every partition at epoch 0. The same
commands against three broker processes on etcd are in ``tests/e2e/test_cluster_processes.py``."""

from __future__ import annotations

import json

import pytest

from tests.integration.broker import BrokerThread
from tierlog.client.cli.main import main


def run(broker: BrokerThread, *argv: str) -> int:
    return main([*argv, "--bootstrap-server", broker.url])


def test_cluster_describe_names_the_broker_as_controller(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(thread_broker, "cluster", "describe", "--output", "json") == 0
    described = json.loads(capsys.readouterr().out)
    assert described["controller_id"] == described["brokers"][0]["broker_id"]
    assert described["controller_epoch"] >= 0
    assert len(described["brokers"]) == 1  # its URL is the advertised.url the test broker was given
    assert described["brokers"][0]["is_controller"] is True
    assert described["brokers"][0]["rack"] is None
    assert described["offline_partitions"] == []
    assert described["cluster_id"]

    assert run(thread_broker, "cluster", "describe") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        f"Cluster: {described['cluster_id']}  Controller: {described['controller_id']}"
    )
    assert lines[1].split() == ["BROKER", "URL", "RACK", "LEADER-OF", "CONTROLLER"]
    url = described["brokers"][0]["url"]
    leads = str(described["brokers"][0]["leader_of"])
    assert lines[2].split() == [str(described["controller_id"]), url, "-", leads, "yes"]
    assert lines[0].endswith("OfflinePartitions: 0") and len(lines) == 3
    assert run(thread_broker, "cluster", "describe", "--json") == 0
    assert json.loads(capsys.readouterr().out) == described


def test_topics_describe_shows_leaders_replicas_and_isr(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(thread_broker, "topics", "create", "orders", "--partitions", "3") == 0
    capsys.readouterr()
    assert run(thread_broker, "cluster", "describe", "--json") == 0
    cluster = json.loads(capsys.readouterr().out)
    me = cluster["controller_id"]
    assert cluster["brokers"][0]["leader_of"] >= 3  # orders' three partitions (and any internal ones)

    assert run(thread_broker, "topics", "describe", "orders", "--json") == 0
    described = json.loads(capsys.readouterr().out)
    assert described["replication_factor"] == 1
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for partition in described["partitions"]:
        assert partition["leader"] == me and partition["replicas"] == [me] and partition["isr"] == [me]
        assert partition["leader_epoch"] >= 0 and partition["log_end_offset"] == 0

    assert run(thread_broker, "topics", "describe", "orders") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Topic: orders  PartitionCount: 3  ReplicationFactor: 1"
    assert lines[1].split() == [
        "PARTITION", "LEADER", "LEADER-EPOCH", "REPLICAS", "ISR",
        "LOG-START-OFFSET", "HIGH-WATERMARK", "LOG-END-OFFSET",
    ]  # fmt: skip
    assert [line.split()[:2] for line in lines[2:]] == [["0", str(me)], ["1", str(me)], ["2", str(me)]]


@pytest.mark.parametrize(
    "argv", [["cluster"], ["cluster", "frobnicate"], ["cluster", "describe", "--output", "xml"]]
)
def test_cluster_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "tierlog cluster" in capsys.readouterr().err


def test_a_bootstrap_list_skips_brokers_that_do_not_answer(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = f"http://127.0.0.1:9,{thread_broker.url}"  # nothing listens on port 9
    assert main(["cluster", "describe", "--json", "--bootstrap-server", servers]) == 0
    assert len(json.loads(capsys.readouterr().out)["brokers"]) == 1
    assert main(["topics", "create", "t", "--partitions", "2", "--bootstrap-server", servers]) == 0
    assert main(["topics", "describe", "t", "--json", "--bootstrap-server", servers]) == 0
    assert "created topic t" in capsys.readouterr().out


def test_cluster_describe_without_a_broker_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "describe", "--bootstrap-server", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tierlog cluster: error:") and err.count("\n") == 1


def test_topics_create_takes_a_replication_factor(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(thread_broker, "topics", "create", "one", "--replication-factor", "1") == 0
    capsys.readouterr()
    assert run(thread_broker, "topics", "describe", "one", "--json") == 0
    assert json.loads(capsys.readouterr().out)["replication_factor"] == 1
    assert run(thread_broker, "topics", "create", "three", "--replication-factor", "3") == 1
    err = capsys.readouterr().err
    assert "Replication factor: 3 larger than available brokers: 1." in err and "40002" in err
    assert run(thread_broker, "topics", "describe", "three") == 1  # nothing was created
