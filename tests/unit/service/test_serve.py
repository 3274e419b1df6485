"""The ``tierlog`` command line without a server: dispatch, help, version, one-line usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tierlog
from tierlog.cli import main
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, PartitionLog


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "serve" in err and "topics" in err and "dump-log" in err


def test_unknown_command_is_one_error_line_and_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "tierlog: error: unknown command 'launch'"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"tierlog {tierlog.__version__}\n"
    assert tierlog.__version__ != "0+unknown"  # read from the installed distribution's metadata


def test_python_dash_m_tierlog_is_the_same_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tierlog", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tierlog {tierlog.__version__}\n"


def test_serve_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--data-dir", "--remote-uri", "--s3-endpoint-url", "--log-segment-bytes", "--config"):
        assert flag in out
    assert "TIERLOG_LOG_SEGMENT_BYTES" in out


def test_a_client_option_before_a_broker_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bootstrap-server", "http://127.0.0.1:1", "serve"]) == 2
    assert "--bootstrap-server is a client option" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--nope", "topics", "list"], ["--bootstrap-server"]])
def test_bad_global_options_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("tierlog: error: ")


def test_dump_log_is_dispatched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append(build_batch([Record(b"k", b"v")]))
    log.close()
    assert main(["dump-log", str(tmp_path / "t-0" / "00000000000000000000.log")]) == 0
    assert "baseOffset: 0 lastOffset: 0 count: 1" in capsys.readouterr().out


def test_how_to_reach_names_the_listeners_the_data_dir_and_two_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tierlog.service.serve import how_to_reach
    from tierlog.service.settings.config import build_settings

    settings = build_settings({"data.dir": str(tmp_path / "d")})
    monkeypatch.setenv("PATH", str(tmp_path))  # no tierlog on PATH
    monkeypatch.chdir(tmp_path)
    script = tmp_path / ".venv" / "bin" / "tierlog"
    script.parent.mkdir(parents=True)
    script.touch()
    monkeypatch.setattr(sys, "argv", [str(script), "serve"])
    lines = how_to_reach(settings, "http://127.0.0.1:8082", "127.0.0.1:9092").splitlines()
    assert lines == [
        "how to reach this broker:",
        "  HTTP (REST)   http://127.0.0.1:8082   (health: http://127.0.0.1:8082/ready, metrics: "
        "http://127.0.0.1:8082/metrics)",
        "  Kafka         127.0.0.1:9092   (bootstrap.servers for Kafka's clients)",
        f"  data dir      {(tmp_path / 'd').resolve()}",
        "  try           curl -s http://127.0.0.1:8082/topics",
        "                .venv/bin/tierlog --bootstrap-server http://127.0.0.1:8082 topics list",
    ]
    tls = how_to_reach(settings, "https://b.example:8443", None)
    assert "  Kafka         not started" in tls.splitlines()
    assert "  try           curl -s https://b.example:8443/topics" in tls.splitlines()
    monkeypatch.setattr(sys, "argv", ["/somewhere/__main__.py", "serve"])
    assert tls.splitlines()[-1].endswith("https://b.example:8443 topics list")
    assert " -m tierlog --bootstrap-server" in how_to_reach(settings, "http://h:1", None)
