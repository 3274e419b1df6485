"""LogConfig from Kafka topic configs, segment file naming, and the checkpoint file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.tiering.log import LogConfig, ManualClock, SystemClock
from tierlog.tiering.log.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tierlog.tiering.log.naming import filename_prefix, log_path, parse_segment_file
from tierlog.wire.errors import InvalidRequestError


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_index_bytes == 10 << 20
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.max_message_bytes == 1048588
    assert config.effective_local_retention_ms == config.retention_ms
    assert not config.log_append_time


def test_from_topic_configs_parses_known_names_and_ignores_others() -> None:
    config = LogConfig.from_topic_configs(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "local.retention.bytes": "2048",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "delete",
            "flush.messages": "1",
        }
    )
    assert (config.segment_bytes, config.retention_ms, config.flush_messages) == (1048576, -1, 1)
    assert config.effective_local_retention_bytes == 2048
    assert config.log_append_time
    assert LogConfig.from_topic_configs(config.to_topic_configs()) == config


@pytest.mark.parametrize(
    "name, value",
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "13"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("local.retention.ms", "-3"),
        ("flush.messages", "0"),
        ("index.interval.bytes", "-1"),
        ("message.timestamp.type", "WallClock"),
        ("max.message.bytes", "99999999999"),
    ],
)
def test_bad_values_name_the_config(name: str, value: str) -> None:
    with pytest.raises(InvalidRequestError) as err:
        LogConfig.from_topic_configs({name: value})
    assert name in err.value.message


def test_segment_file_names() -> None:
    assert filename_prefix(42) == "00000000000000000042"
    assert log_path(Path("/d"), 2**63 - 1).name == "09223372036854775807.log"
    assert parse_segment_file("00000000000000000042.index.deleted") == (42, ".index", ".deleted")
    assert parse_segment_file("00000000000000000042.timeindex") == (42, ".timeindex", "")
    assert parse_segment_file("42.log") is None
    assert parse_segment_file("00000000000000000042.snapshot") is None
    with pytest.raises(ValueError):
        filename_prefix(-1)


def test_checkpoint_format_round_trip_and_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    assert read_offset_checkpoint(path) is None
    write_offset_checkpoint(path, "orders", 3, 12345)
    assert path.read_text() == "0\n1\norders 3 12345\n"
    assert read_offset_checkpoint(path) == 12345
    assert not list(tmp_path.glob("*.tmp"))
    for junk in ("", "1\n1\nt 0 5\n", "0\n1\nt 0 x\n", "0\n2\nt 0 5\n", "\xff"):
        path.write_text(junk, encoding="latin-1")
        assert read_offset_checkpoint(path) is None


def test_clocks() -> None:
    clock = ManualClock(100)
    assert clock.advance(50) == 150
    clock.set(10)
    assert clock.now_ms() == 10
    with pytest.raises(ValueError):
        clock.advance(-1)
    assert SystemClock().now_ms() > 1_600_000_000_000
