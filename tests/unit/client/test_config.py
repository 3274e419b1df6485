"""Producer and consumer options: Kafka's names with underscores, validated at construction."""

from __future__ import annotations

import pytest

from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ConsumerConfig, ProducerConfig, normalise_bootstrap
from tierlog.tiering.codec.compression import Compression
from tierlog.wire.errors import InvalidRequestError


def test_defaults_follow_kafka() -> None:
    producer = ProducerConfig.from_kwargs({})
    assert (producer.acks, producer.linger_ms, producer.batch_size, producer.buffer_memory) == (
        "all",
        0,
        16384,
        1 << 25,
    )
    consumer = ConsumerConfig.from_kwargs({})
    assert (consumer.enable_auto_commit, consumer.auto_offset_reset, consumer.max_poll_records) == (
        True,
        "latest",
        500,
    )


def test_idempotence_is_on_by_default_with_acks_all() -> None:
    config = ProducerConfig.from_kwargs({})
    assert config.enable_idempotence is True
    assert config.acks_param == "all"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"acks": 1},
        {"acks": "0"},
        {"retries": 0},
        {"max_in_flight_requests_per_connection": 6},
    ],
)
def test_idempotence_left_at_default_turns_off_for_conflicting_settings(kwargs: dict[str, object]) -> None:
    config = ProducerConfig.from_kwargs(kwargs)
    assert config.enable_idempotence is False
    with pytest.raises(InvalidRequestError, match="enable_idempotence"):
        ProducerConfig.from_kwargs({**kwargs, "enable_idempotence": True})


@pytest.mark.parametrize(
    "kwargs", [{"acks": "all"}, {"acks": -1}, {"retries": 3}, {"max_in_flight_requests_per_connection": 5}]
)
def test_compatible_explicit_settings_keep_idempotence(kwargs: dict[str, object]) -> None:
    assert ProducerConfig.from_kwargs(kwargs).enable_idempotence is True
    assert ProducerConfig.from_kwargs({**kwargs, "enable_idempotence": True}).enable_idempotence is True


def test_idempotence_off_explicitly_keeps_acks_all_by_default_and_allows_anything() -> None:
    config = ProducerConfig.from_kwargs({"enable_idempotence": False, "acks": 1, "retries": 0})
    assert (config.enable_idempotence, config.acks_param, config.retries) == (False, "1", 0)
    assert ProducerConfig.from_kwargs({"enable_idempotence": False}).acks_param == "all"
    with pytest.raises(InvalidRequestError, match="enable_idempotence"):
        ProducerConfig.from_kwargs({"enable_idempotence": "yes"})


@pytest.mark.parametrize(("acks", "param"), [(0, "0"), (1, "1"), (-1, "all"), ("all", "all"), ("-1", "all")])
def test_acks_become_the_query_value(acks: int | str, param: str) -> None:
    assert ProducerConfig.from_kwargs({"acks": acks}).acks_param == param


@pytest.mark.parametrize(
    ("kwargs", "mentions"),
    [
        ({"lingerms": 5}, "lingerms"),
        ({"acks": 2}, "acks"),
        ({"compression_type": "brotli"}, "brotli"),
        ({"batch_size": 0}, "batch_size"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"linger_ms": True}, "linger_ms"),
        ({"bootstrap_servers": "ftp://host"}, "ftp://host"),
    ],
)
def test_bad_producer_options_name_the_option(kwargs: dict[str, object], mentions: str) -> None:
    with pytest.raises(InvalidRequestError, match=mentions):
        ProducerConfig.from_kwargs(kwargs)


@pytest.mark.parametrize(
    ("kwargs", "mentions"),
    [
        ({"auto_offset_reset": "oldest"}, "auto_offset_reset"),
        ({"partition_assignment_strategy": "random"}, "partition_assignment_strategy"),
        ({"group_id": ""}, "group_id"),
        ({"heartbeat_interval_ms": 50_000}, "heartbeat_interval_ms"),
        ({"max_poll_records": 0}, "max_poll_records"),
    ],
)
def test_bad_consumer_options_name_the_option(kwargs: dict[str, object], mentions: str) -> None:
    with pytest.raises(InvalidRequestError, match=mentions):
        ConsumerConfig.from_kwargs(kwargs)


def test_compression_names() -> None:
    assert ProducerConfig.from_kwargs({"compression_type": "ZSTD"}).compression() is Compression.ZSTD
    assert ProducerConfig.from_kwargs({}).compression() is Compression.NONE


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("localhost:8082", "http://localhost:8082"),
        ("http://h:1/", "http://h:1"),
        (["https://a:1", "http://b:2"], "https://a:1"),
        ("http://a:1,http://b:2", "http://a:1"),
    ],
)
def test_bootstrap_servers_normalise_to_one_base_url(given: str | list[str], url: str) -> None:
    assert normalise_bootstrap(given) == url


def test_partition_fetch_bytes_is_capped_by_fetch_max_bytes() -> None:
    config = ConsumerConfig.from_kwargs({"fetch_max_bytes": 1000, "max_partition_fetch_bytes": 5000})
    assert config.partition_fetch_bytes == 1000


def test_backoff_grows_is_capped_and_jittered() -> None:
    waits = [backoff_seconds(attempt, 100, 1000) for attempt in range(8)]
    assert 0.08 <= waits[0] <= 0.12
    assert 0.16 <= waits[1] <= 0.24
    assert all(0.8 <= w <= 1.2 for w in waits[4:])
