"""Topic config names, normalisation and Kafka's validation rules; topic name rules."""

from __future__ import annotations

import pytest

from tierlog.service.topics.configs import (
    TOPIC_CONFIGS,
    TopicConfig,
    effective_configs,
    normalize_value,
    validate_overrides,
)
from tierlog.service.topics.data_dir import validate_topic_name
from tierlog.tiering.log import LogConfig
from tierlog.wire.errors import InvalidConfigError, InvalidRequestError, http_status


def test_defaults_match_the_log_engine() -> None:
    configs = effective_configs({}, {})
    assert LogConfig.from_topic_configs(configs) == LogConfig()
    assert set(LogConfig().to_topic_configs()) <= set(TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("segment.bytes", " 1024", "1024"),
        ("remote.storage.enable", "TRUE", "true"),
        ("cleanup.policy", "compact, delete,compact", "compact,delete"),
        ("message.timestamp.type", "logappendtime", "LogAppendTime"),
        ("compression.type", "ZSTD", "zstd"),
        ("retention.ms", "-1", "-1"),
    ],
)
def test_normalize(name: str, raw: str, expected: str) -> None:
    assert normalize_value(name, raw) == expected


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"segment.bytes": "13"}, "segment.bytes"),
        ({"segment.bytes": "lots"}, "segment.bytes"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"flush.messages": "0"}, "flush.messages"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"max.compaction.lag.ms": "2"}, "max.compaction.lag.ms"),
        ({"retention.ms": "1000", "local.retention.ms": "2000"}, "local.retention.ms"),
        ({"retention.ms": "1000", "local.retention.ms": "-1"}, "local.retention.ms"),
        ({"retention.bytes": "10", "local.retention.bytes": "11"}, "local.retention.bytes"),
        ({"remote.storage.enable": "true", "cleanup.policy": "compact"}, "remote.storage.enable"),
    ],
)
def test_invalid_overrides_name_the_config(overrides: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        validate_overrides({}, overrides)
    assert named in info.value.message
    assert info.value.code == 40002 and http_status(info.value.code) == 400


def test_local_retention_bounded_by_broker_default() -> None:
    assert validate_overrides({"retention.ms": "5000"}, {"local.retention.ms": "5000"}) == {
        "local.retention.ms": "5000"
    }
    with pytest.raises(InvalidConfigError, match=r"local\.retention\.ms"):
        validate_overrides({"retention.ms": "5000"}, {"local.retention.ms": "5001"})
    assert validate_overrides({}, {"retention.ms": "-1", "local.retention.ms": "-1"})


def test_a_topic_config_is_resolved_and_typed_once() -> None:
    defaults = {"max.message.bytes": "2048", "compression.type": "lz4"}
    overrides = {
        "compression.type": "zstd",
        "remote.storage.enable": "true",
        "message.timestamp.type": "LogAppendTime",
    }
    config = TopicConfig.resolve(defaults, overrides)
    log = config.log
    assert (log.max_message_bytes, log.compression_type, log.remote_storage_enable) == (2048, "zstd", True)
    assert log.log_append_time
    assert config.values == effective_configs(defaults, overrides)
    assert LogConfig.from_topic_configs(log.to_topic_configs()) == log
    with pytest.raises(TypeError):
        config.values["retention.ms"] = "1"  # type: ignore[index]


@pytest.mark.parametrize(("name", "raw"), [("compression.type", "brotli"), ("remote.storage.enable", "yes")])
def test_the_typed_log_config_refuses_what_topic_configs_refuse(name: str, raw: str) -> None:
    with pytest.raises(InvalidConfigError):
        normalize_value(name, raw)
    with pytest.raises(InvalidRequestError, match=name.replace(".", r"\.")):
        LogConfig.from_topic_configs({name: raw})


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "../etc", "x" * 250, "t\x00", "tópico", "a b", "evil\n", "\nevil"]
)
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidConfigError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * 249, "...", "__internal"])
def test_legal_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name
