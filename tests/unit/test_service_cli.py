"""The ``tierlog`` command line without a server: dispatch, help, one-line usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import main
from tiering.codec.batch import build_batch
from tiering.codec.records import Record
from tiering.log import LogConfig, PartitionLog


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["launch"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "invalid choice: 'launch'" in err


def test_serve_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--data-dir", "--remote-uri", "--s3-endpoint-url", "--log-segment-bytes", "--config"):
        assert flag in out
    assert "TIERLOG_LOG_SEGMENT_BYTES" in out


def test_dump_log_is_dispatched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    log.append(build_batch([Record(b"k", b"v")]))
    log.close()
    assert main(["dump-log", str(tmp_path / "t-0" / "00000000000000000000.log")]) == 0
    assert "baseOffset: 0 lastOffset: 0 count: 1" in capsys.readouterr().out
