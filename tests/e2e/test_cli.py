"""End to end: the ``tierlog`` console script against a ``tierlog serve`` process, as an operator uses them
(each command a process of its own; records are lines on stdin and JSON lines on stdout)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import tierlog
from tests.e2e.conftest import StartBroker
from tests.e2e.process import run_cli

pytestmark = pytest.mark.integration

LINES = 120
USERS = 7


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_create_produce_and_consume_with_the_cli(start_broker: StartBroker, tmp_path: Path) -> None:
    broker = start_broker("--data-dir", str(tmp_path / "data"))
    server = ("--bootstrap-server", broker.url)

    version = run_cli("--version")
    assert version.returncode == 0 and tierlog.__version__ in version.stdout + version.stderr

    created = run_cli(
        "topics", "create", "events", "--partitions", "3", "--config", "retention.ms=-1", *server
    )
    assert created.returncode == 0, created.stderr
    described = run_cli(*server, "topics", "describe", "events", "--json")  # global option first
    assert described.returncode == 0, described.stderr
    assert len(json.loads(described.stdout)["partitions"]) == 3

    sent = [(f"user-{n % USERS}", f"event {n}") for n in range(LINES)]
    stdin = "".join(f"{key}:{value}\n" for key, value in sent).encode()
    produced = run_cli(
        "produce", "events", "--key-separator", ":", "--compression", "gzip", *server, stdin=stdin
    )
    assert produced.returncode == 0, produced.stderr
    assert f"produced {LINES} record(s) to events" in produced.stderr

    fields = "partition,offset,key,value"
    argv = ("consume", "events", "--from-beginning", "--group", "audit", "--format", fields, *server)
    consumed = run_cli(*argv, "--max-messages", str(LINES))
    assert consumed.returncode == 0, consumed.stderr
    rows = json_lines(consumed.stdout)
    assert sorted((r["key"], r["value"]) for r in rows) == sorted(sent)
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_partition[row["partition"]].append(row)
    for partition_rows in by_partition.values():  # each partition from offset 0, in order, no gaps
        assert sorted(r["offset"] for r in partition_rows) == list(range(len(partition_rows)))
    for key in {k for k, _ in sent}:  # one partition per key, and the key's records in send order
        mine = sorted((r for r in rows if r["key"] == key), key=lambda r: (r["partition"], r["offset"]))
        assert len({r["partition"] for r in mine}) == 1
        assert [r["value"] for r in mine] == [v for k, v in sent if k == key]

    again = run_cli(*argv, "--timeout-ms", "300")  # the group committed what it printed
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert broker.stop() == 0, broker.log()
