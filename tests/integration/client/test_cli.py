"""The client CLI: ``tierlog.client.cli.main.main`` in-process (capsys) and ``python -m tierlog`` as a
subprocess."""

from __future__ import annotations

import base64
import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker import BrokerThread
from tierlog.client.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def run(broker: BrokerThread, *argv: str) -> int:
    return main([*argv, "--bootstrap-server", broker.url])


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_topic_commands(thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run(
            thread_broker, "topics", "create", "orders", "--partitions", "4", "--config", "retention.ms=60000"
        )
        == 0
    )
    assert "created topic orders with 4 partition(s)" in capsys.readouterr().out
    assert run(thread_broker, "topics", "create", "orders") == 1
    assert "(error code 40002)" in capsys.readouterr().err
    assert run(thread_broker, "topics", "list", "--json") == 0
    assert json.loads(capsys.readouterr().out) == ["orders"]
    assert (
        run(
            thread_broker, "topics", "alter", "orders", "--partitions", "6", "--config", "retention.ms=120000"
        )
        == 0
    )
    capsys.readouterr()
    assert run(thread_broker, "topics", "describe", "orders", "--json") == 0
    described = json.loads(capsys.readouterr().out)
    assert described["partition_count"] == 6 and described["configs"]["retention.ms"] == "120000"
    assert run(thread_broker, "topics", "alter", "orders", "--delete-config", "retention.ms") == 0
    assert run(thread_broker, "topics", "describe", "orders") == 0
    text = capsys.readouterr().out
    assert "PartitionCount: 6" in text and "retention.ms" not in text
    assert run(thread_broker, "topics", "delete", "orders") == 0
    assert run(thread_broker, "topics", "describe", "orders") == 1
    err = capsys.readouterr().err
    assert err.startswith("tierlog topics: error:") and "(error code 40401)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["frobnicate"],
        ["topics"],
        ["topics", "create"],
        ["topics", "create", "t", "--config", "no-equals-sign"],
        ["consume", "t", "--offset", "3"],
        ["consume", "t", "--offset", "3", "--partition", "0", "--from-beginning"],
        ["consume", "t", "--format", "key,colour"],
        ["produce", "t", "--compression", "brotli"],
        ["groups", "list", "--bootstrap-server", "ftp://nowhere"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_global_options_go_before_or_after_the_command(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    from tierlog.cli import main as tierlog_main

    broker = thread_broker
    assert run(broker, "topics", "create", "global-opts", "--partitions", "1") == 0
    capsys.readouterr()
    assert tierlog_main(["--bootstrap-server", broker.url, "topics", "list"]) == 0
    before = capsys.readouterr().out
    after = ["topics", "list", "--bootstrap-server", broker.url]
    assert tierlog_main(["--bootstrap-server=http://127.0.0.1:9", *after]) == 0
    assert "global-opts" in before and capsys.readouterr().out == before
    # Given only before the command, it is the one used: an unreachable broker fails the command.
    assert tierlog_main(["--bootstrap-server", "http://127.0.0.1:9", "topics", "list"]) == 1
    assert "(error code 50302)" in capsys.readouterr().err


def test_an_unreachable_broker_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["topics", "list", "--bootstrap-server", "http://127.0.0.1:9"]) == 1
    assert "(error code 50302)" in capsys.readouterr().err
    feed_stdin(monkeypatch, b"one line\n")
    argv = ["produce", "t", "--max-block-ms", "200", "--bootstrap-server", "http://127.0.0.1:9"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "(error code 50403)" in err and "no metadata for topic t" in err


def test_produce_and_consume_round_trip(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(thread_broker, "topics", "create", "lines", "--partitions", "2") == 0
    feed_stdin(monkeypatch, b"alice:1\nbob:2\r\nalice:3\n")
    assert run(thread_broker, "produce", "lines", "--key-separator", ":", "--compression", "zstd") == 0
    assert "produced 3 record(s) to lines" in capsys.readouterr().err
    argv = ["consume", "lines", "--from-beginning", "--max-messages", "3", "--format", "key,value,partition"]
    assert run(thread_broker, *argv) == 0
    rows = json_lines(capsys.readouterr().out)
    assert sorted((r["key"], r["value"]) for r in rows) == [("alice", "1"), ("alice", "3"), ("bob", "2")]
    alice = {r["partition"] for r in rows if r["key"] == "alice"}
    assert len(alice) == 1

    feed_stdin(monkeypatch, b"no separator here\n")
    assert run(thread_broker, "produce", "lines", "--key-separator", ":") == 1
    assert "line 1 has no key separator" in capsys.readouterr().err


def test_each_consume_format_prints_what_the_docs_say(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_stdin(monkeypatch, b"alice:first\nbob:second\n")
    assert run(thread_broker, "produce", "formats", "--key-separator", ":", "--partition", "0") == 0
    capsys.readouterr()

    def consume(fmt: str, *extra: str) -> list[str]:
        argv = ["consume", "formats", "--partition", "0", "--offset", "0", "--max-messages", "2", "--quiet"]
        assert run(thread_broker, *argv, "--format", fmt, *extra) == 0
        return capsys.readouterr().out.splitlines()

    assert consume("value") == ["first", "second"]
    assert consume("key") == ["alice", "bob"]
    assert consume("offset") == ["0", "1"]
    assert consume("partition") == ["0", "0"]
    assert consume("headers") == ["[]", "[]"]
    assert consume("value", "--encoding", "base64") == ["Zmlyc3Q=", "c2Vjb25k"]
    assert [json.loads(line) for line in consume("key,value")] == [
        {"key": "alice", "value": "first"},
        {"key": "bob", "value": "second"},
    ]
    every = [json.loads(line) for line in consume("json")]
    assert [list(row) for row in every] == [
        ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"]
    ] * 2
    assert [(r["topic"], r["offset"], r["key"], r["value"]) for r in every] == [
        ("formats", 0, "alice", "first"),
        ("formats", 1, "bob", "second"),
    ]
    default = [json.loads(line) for line in consume("partition,offset,timestamp,key,value,headers")]
    argv = ["consume", "formats", "--partition", "0", "--offset", "0", "--max-messages", "2", "--quiet"]
    assert run(thread_broker, *argv) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == default


def test_consume_from_an_offset_in_base64(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(b"line %d\n" % i for i in range(10)))
    assert run(thread_broker, "produce", "offsets", "--file", str(source), "--partition", "1", "--quiet") == 0
    argv = [
        "consume",
        "offsets",
        "--partition",
        "1",
        "--offset",
        "7",
        "--max-messages",
        "3",
        "--encoding",
        "base64",
    ]
    assert run(thread_broker, *argv, "--format", "offset,value,headers,timestamp_type") == 0
    rows = json_lines(capsys.readouterr().out)
    assert [r["offset"] for r in rows] == [7, 8, 9]
    assert base64.b64decode(str(rows[0]["value"])) == b"line 7"
    assert rows[0]["headers"] == [] and rows[0]["timestamp_type"] == 0
    assert run(thread_broker, "consume", "offsets", "--partition", "1", "--timeout-ms", "200") == 0
    assert capsys.readouterr().out == ""


def test_progress_bar_and_groups_with_lag(
    thread_broker: BrokerThread, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "big.txt"
    source.write_bytes(b"".join(b"%06d %s\n" % (i, b"x" * 100) for i in range(3000)))
    argv = ["produce", "big", "--file", str(source), "--partition", "0", "--progress", "always"]
    assert run(thread_broker, *argv) == 0
    err = capsys.readouterr().err
    assert "100.0%" in err and "3,000 rec" in err and "rec/s" in err
    argv = ["consume", "big", "--group", "readers", "--from-beginning", "--max-messages", "1000", "--quiet"]
    assert run(thread_broker, *argv) == 0
    assert len(json_lines(capsys.readouterr().out)) == 1000
    assert run(thread_broker, "groups", "list", "--json") == 0
    assert {"group_id": "readers", "state": "Empty"} in json.loads(capsys.readouterr().out)
    assert run(thread_broker, "groups", "describe", "readers", "--json") == 0
    lag = {row["partition"]: row for row in json.loads(capsys.readouterr().out)["lag"]}
    assert (lag[0]["committed_offset"], lag[0]["lag"]) == (1000, 2000)
    assert run(thread_broker, "groups", "describe", "readers") == 0
    assert "COMMITTED-OFFSET" in capsys.readouterr().out
    assert run(thread_broker, "groups", "describe", "nobody") == 1
    assert "(error code 40411)" in capsys.readouterr().err


def test_python_dash_m_client_and_ctrl_c(thread_broker: BrokerThread) -> None:
    url = ["--bootstrap-server", thread_broker.url]
    produced = subprocess.run(
        [sys.executable, "-m", "tierlog", "produce", "piped", "--partition", "0", *url],
        input=b"one\ntwo\n", capture_output=True, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumer = subprocess.Popen(
        [sys.executable, "-m", "tierlog", "consume", "piped", "--from-beginning", "--format", "value", *url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline() == b"one\n"  # one field: its plain text
        assert consumer.stdout.readline() == b"two\n"
        consumer.send_signal(signal.SIGINT)
        assert consumer.wait(30) == 130
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
        for stream in (consumer.stdout, consumer.stderr):
            if stream is not None:
                stream.close()
