"""What a topic change must satisfy before anything is written, as Kafka checks it: a new topic's name,
partition count and config overrides against the topics that exist, a partition count, a config name
to reset. Pure functions; every refusal is an
:class:`InvalidConfigError` (400, 40002) whose message is Kafka's where Kafka has one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.configs import TOPIC_CONFIGS, validate_overrides
from tierlog.wire.errors import InvalidConfigError

__all__ = [
    "NOT_INTERNAL_TOPIC_PATTERN",
    "MAX_PARTITIONS",
    "check_known_config",
    "check_new_topic",
    "check_partition_count",
]

MAX_PARTITIONS = 10_000


#: Kafka's topic name rule without the names starting with ``__`` (internal: the broker's own topics), as a
#: regular expression for the OpenAPI document: what a client may create, produce to, delete or grow.
NOT_INTERNAL_TOPIC_PATTERN = "^(?!__)" + meta.TOPIC_NAME_PATTERN.removeprefix("^")


def check_new_topic(
    name: str,
    partitions: int | None,
    configs: Mapping[str, str],
    *,
    existing: Collection[str],
    num_partitions: int,
    topic_defaults: Mapping[str, str],
    internal: bool,
) -> tuple[int, dict[str, str]]:
    """The partition count (``num_partitions`` when ``partitions`` is None) and validated overrides a new
    topic ``name`` gets, next to the ``existing`` topic names. A name starting with ``__`` only when
    ``internal``; no name equal to an existing one, or equal once ``.`` and ``_`` are folded together."""
    meta.validate_topic_name(name)
    if name.startswith("__") and not internal:
        raise InvalidConfigError(f"Topic name {name!r} is reserved: names starting with '__' are internal")
    if name in existing:
        raise InvalidConfigError(f"Topic '{name}' already exists.")
    folded = name.replace(".", "_")
    for other in existing:
        if other.replace(".", "_") == folded:
            raise InvalidConfigError(f"Topic '{name}' collides with existing topic: {other}")
    count = num_partitions if partitions is None else partitions
    check_partition_count(count)
    return count, validate_overrides(topic_defaults, configs)


def check_partition_count(count: object) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidConfigError(f"Number of partitions must be an integer between 1 and {MAX_PARTITIONS}.")


def check_known_config(name: str) -> None:
    if name not in TOPIC_CONFIGS:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
