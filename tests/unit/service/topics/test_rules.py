"""What a topic change must satisfy before anything is written."""

from __future__ import annotations

import pytest

from tierlog.service.topics.configs import TOPIC_CONFIGS
from tierlog.service.topics.rules import (
    MAX_PARTITIONS,
    check_known_config,
    check_new_topic,
    check_partition_count,
)
from tierlog.wire.errors import InvalidConfigError


def new(
    name: str, partitions: int | None = None, *, existing: tuple[str, ...] = (), internal: bool = False
) -> tuple[int, dict[str, str]]:
    return check_new_topic(
        name, partitions, {}, existing=existing, num_partitions=3, topic_defaults={}, internal=internal
    )


def test_a_new_topic_gets_the_default_count_or_its_own() -> None:
    assert new("orders") == (3, {})
    assert new("orders", 7) == (7, {})


@pytest.mark.parametrize(
    ("name", "existing", "message"),
    [
        ("orders", ("orders",), "Topic 'orders' already exists."),
        ("a.b", ("a_b",), "Topic 'a.b' collides with existing topic: a_b"),
        ("__mine", (), "reserved"),
        ("bad/name", (), "is illegal"),
    ],
)
def test_a_new_topic_is_refused(name: str, existing: tuple[str, ...], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        new(name, existing=existing)


def test_an_internal_name_is_allowed_when_asked_for() -> None:
    assert new("__mine", 1, internal=True) == (1, {})


@pytest.mark.parametrize("count", [0, -1, MAX_PARTITIONS + 1, True, 2.0])
def test_a_partition_count_out_of_range_is_refused(count: object) -> None:
    with pytest.raises(InvalidConfigError, match="Number of partitions"):
        check_partition_count(count)


def test_only_known_config_names_may_be_reset() -> None:
    check_known_config(next(iter(TOPIC_CONFIGS)))
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: nope"):
        check_known_config("nope")
