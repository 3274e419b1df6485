"""The admin APIs' pure parts: which Kafka error a create or a partition growth gets, IncrementalAlterConfigs'
operations as set-or-reset updates, and the DescribeConfigs entries of a topic and of the broker."""

from __future__ import annotations

import pytest

from tierlog.service.kafka.configs import (
    TOPIC_CONFIG_TYPES,
    ConfigOp,
    ConfigSource,
    IncrementalOp,
    broker_config_entries,
    incremental_updates,
    topic_config_entries,
)
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.kafka.topic_checks import Refusal, Wanted, check_create, check_partition_growth
from tierlog.service.settings.config import build_settings
from tierlog.service.topics.configs import TOPIC_CONFIGS, effective_configs
from tierlog.wire.errors import InvalidConfigError, InvalidRequestError


def _create(
    name: str = "t",
    partitions: int = -1,
    replication: int = -1,
    assignments: list[tuple[int, list[int]]] | None = None,
    *,
    existing: tuple[str, ...] = ("a.b",),
    single_broker: bool = True,
) -> Wanted | Refusal:
    return check_create(
        name,
        partitions,
        replication,
        assignments or [],
        existing=existing,
        live_brokers=[0],
        single_broker=single_broker,
    )


def _code(result: Wanted | Refusal) -> ErrorCode:
    assert isinstance(result, Refusal), result
    return result.code


def test_a_create_with_defaults_asks_for_them() -> None:
    assert _create() == Wanted(None, None)
    assert _create(partitions=4, replication=1) == Wanted(4, 1)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"name": "a.b"}, ErrorCode.topic_already_exists),
        ({"name": "a_b"}, ErrorCode.invalid_topic_exception),
        ({"name": "bad/name"}, ErrorCode.invalid_topic_exception),
        ({"name": ""}, ErrorCode.invalid_topic_exception),
        ({"name": "__mine"}, ErrorCode.policy_violation),
        ({"partitions": 0}, ErrorCode.invalid_partitions),
        ({"partitions": -2}, ErrorCode.invalid_partitions),
        ({"partitions": 10_001}, ErrorCode.invalid_partitions),
        ({"replication": 0}, ErrorCode.invalid_replication_factor),
        ({"replication": 2}, ErrorCode.invalid_replication_factor),
        ({"partitions": 1, "assignments": [(0, [0])]}, ErrorCode.invalid_request),
        ({"assignments": [(1, [0])]}, ErrorCode.invalid_replica_assignment),
        ({"assignments": [(0, [0, 0])]}, ErrorCode.invalid_replica_assignment),
        ({"assignments": [(0, [5])]}, ErrorCode.invalid_replica_assignment),
        ({"assignments": [(0, [])]}, ErrorCode.invalid_replica_assignment),
        ({"assignments": [(0, [0])], "single_broker": False}, ErrorCode.invalid_replica_assignment),
    ],
)
def test_each_refusal_has_kafkas_code(kwargs: dict[str, object], code: ErrorCode) -> None:
    assert _code(_create(**kwargs)) == code  # type: ignore[arg-type]


def test_a_single_brokers_own_assignment_is_a_partition_count() -> None:
    assert _create(assignments=[(0, [0]), (1, [0])]) == Wanted(2, 1)


def test_partition_growth() -> None:
    def grow(count: int, assignments: list[list[int]] | None = None) -> Refusal | None:
        return check_partition_growth("t", 2, count, assignments, live_brokers=[0], single_broker=True)

    assert grow(3) is None
    assert grow(4, [[0], [0]]) is None
    for refused in (grow(1), grow(2), grow(10_001)):
        assert refused is not None and refused.code == ErrorCode.invalid_partitions
    wrong = grow(4, [[0]])
    assert wrong is not None and wrong.code == ErrorCode.invalid_replica_assignment


VALUES = effective_configs({}, {})


def test_incremental_operations_become_updates() -> None:
    ops = [
        ConfigOp("retention.ms", IncrementalOp.SET, "1000"),
        ConfigOp("segment.ms", IncrementalOp.DELETE, None),
        ConfigOp("cleanup.policy", IncrementalOp.APPEND, "compact,delete,compact"),
    ]
    assert incremental_updates(VALUES, ops) == {
        "retention.ms": "1000",
        "segment.ms": None,
        "cleanup.policy": "delete,compact",
    }
    values = {**VALUES, "cleanup.policy": "delete,compact"}
    subtract = [ConfigOp("cleanup.policy", IncrementalOp.SUBTRACT, "delete")]
    assert incremental_updates(values, subtract) == {"cleanup.policy": "compact"}


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([ConfigOp("retention.ms", 0, "1"), ConfigOp("retention.ms", 1, None)], InvalidRequestError),
        ([ConfigOp("retention.ms", 9, "1")], InvalidRequestError),
        ([ConfigOp("no.such", 0, "1")], InvalidConfigError),
        ([ConfigOp("retention.ms", IncrementalOp.APPEND, "1")], InvalidConfigError),
        ([ConfigOp("retention.ms", IncrementalOp.SET, None)], InvalidConfigError),
    ],
)
def test_incremental_refusals(ops: list[ConfigOp], error: type[Exception]) -> None:
    with pytest.raises(error):
        incremental_updates(VALUES, ops)


def test_every_topic_config_has_a_type() -> None:
    assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_CONFIGS)


def test_topic_entries_name_the_source_and_synonyms_in_kafkas_order() -> None:
    settings = build_settings({"log.retention.ms": "5000"}, {"log.retention.ms": "--log.retention.ms"})
    overrides = {"retention.ms": "1000"}
    values = effective_configs(settings.topic_defaults, overrides)
    entries = {e["name"]: e for e in topic_config_entries(settings, overrides, values)}
    retention = entries["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("1000", ConfigSource.TOPIC_CONFIG)
    assert [(s["name"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", ConfigSource.TOPIC_CONFIG),
        ("log.retention.ms", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entries["segment.ms"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    only = topic_config_entries(settings, overrides, values, ["segment.ms", "no.such"])
    assert [e["name"] for e in only] == ["segment.ms"]


def test_broker_entries_are_read_only_settings() -> None:
    settings = build_settings({"num.partitions": "4"}, {"num.partitions": "--num.partitions"})
    entries = {e["name"]: e for e in broker_config_entries(settings, 0)}
    assert entries["num.partitions"]["value"] == "4"
    assert entries["num.partitions"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["log.retention.ms"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    assert all(e["read_only"] and not e["is_sensitive"] for e in entries.values())


def test_broker_entries_name_the_listener_clients_are_told() -> None:
    flagged = build_settings({"kafka.listener": "127.0.0.1:9093"}, {"kafka.listener": "--kafka-listener"})
    entries = {e["name"]: e for e in broker_config_entries(flagged, 0, listener="PLAINTEXT://127.0.0.1:9093")}
    advertised = entries["advertised.listeners"]
    assert (advertised["value"], advertised["read_only"]) == ("PLAINTEXT://127.0.0.1:9093", True)
    assert advertised["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["listeners"]["value"] == "PLAINTEXT://127.0.0.1:9093"
    defaults = broker_config_entries(build_settings({}), 0, ["advertised.listeners"], listener="SSL://h:1")
    assert [(e["value"], e["config_source"]) for e in defaults] == [
        ("SSL://h:1", ConfigSource.DEFAULT_CONFIG)
    ]
    assert "listeners" not in {e["name"] for e in broker_config_entries(build_settings({}), 0)}
