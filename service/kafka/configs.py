"""Configs as Kafka's admin APIs describe and change them, sans I/O: the entries of DescribeConfigs and
CreateTopics (v5+) for a topic or this broker, and IncrementalAlterConfigs' operations turned into the
set-or-reset updates :meth:`Broker.alter_topic_configs` takes.

A topic's configs are tierlog's topic configs (:data:`~tierlog.service.topics.configs.TOPIC_CONFIGS`,
Kafka's names): a value comes from the topic's override (``TOPIC_CONFIG``), else the broker setting that
supplies its default when that setting was given (``STATIC_BROKER_CONFIG``), else Kafka's default
(``DEFAULT_CONFIG``), the same synonyms the v3 admin API lists. A broker's configs are its settings that
Kafka's tools know, all read-only: tierlog has no dynamic broker configs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from tierlog.service.settings.config import Settings
from tierlog.service.topics.configs import TOPIC_CONFIGS
from tierlog.wire.errors import InvalidConfigError, InvalidRequestError

__all__ = [
    "TOPIC_CONFIG_TYPES",
    "ConfigSource",
    "ConfigType",
    "IncrementalOp",
    "ResourceType",
    "broker_config_entries",
    "incremental_updates",
    "topic_config_entries",
]


class ResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` codes."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` codes (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class IncrementalOp(IntEnum):
    """IncrementalAlterConfigs' ``config_operation`` codes."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


#: Each topic config's type as Kafka's ``LogConfig`` declares it.
TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {
    "cleanup.policy": ConfigType.LIST,
    "compression.type": ConfigType.STRING,
    "file.delete.delay.ms": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "local.retention.bytes": ConfigType.LONG,
    "local.retention.ms": ConfigType.LONG,
    "max.message.bytes": ConfigType.INT,
    "message.timestamp.type": ConfigType.STRING,
    "min.insync.replicas": ConfigType.INT,
    "remote.storage.enable": ConfigType.BOOLEAN,
    "retention.bytes": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "segment.bytes": ConfigType.INT,
    "segment.index.bytes": ConfigType.INT,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
    "segment.ms": ConfigType.LONG,
}


def topic_config_entries(
    settings: Settings,
    overrides: Mapping[str, str],
    values: Mapping[str, str],
    keys: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The DescribeConfigs entries of a topic with ``overrides`` and effective ``values``, by name; only
    ``keys`` when given (unknown names are left out, as Kafka does). Synonyms in Kafka's order: the
    override, the broker setting, the default. Pure."""
    names = sorted(TOPIC_CONFIGS) if keys is None else [k for k in dict.fromkeys(keys) if k in TOPIC_CONFIGS]
    out = []
    for name in names:
        spec = TOPIC_CONFIGS[name]
        synonyms: list[dict[str, Any]] = []
        if name in overrides:
            synonyms.append({"name": name, "value": overrides[name], "source": ConfigSource.TOPIC_CONFIG})
        if spec.broker_name is not None and spec.broker_name in settings.sources:
            value = settings.topic_defaults[name]
            synonyms.append(
                {"name": spec.broker_name, "value": value, "source": ConfigSource.STATIC_BROKER_CONFIG}
            )
        synonyms.append(
            {"name": spec.broker_name or name, "value": spec.default, "source": ConfigSource.DEFAULT_CONFIG}
        )
        out.append(
            _entry(name, values[name], synonyms[0]["source"], TOPIC_CONFIG_TYPES[name], spec.doc, synonyms)
        )
    return out


def broker_config_entries(
    settings: Settings,
    broker_id: int,
    keys: Sequence[str] | None = None,
    *,
    listener: str | None = None,
) -> list[dict[str, Any]]:
    """The DescribeConfigs entries of this broker: ``broker.id``, ``log.dirs``, the topic-creation settings,
    every setting that supplies a topic config's default and, given ``listener`` (the Kafka listener as
    ``PROTOCOL://host:port``, as clients are told to reach it), ``listeners`` and ``advertised.listeners``;
    all read-only, none sensitive. Pure."""
    known: dict[str, tuple[str, ConfigType, str]] = {
        "broker.id": (str(broker_id), ConfigType.INT, "this broker's id"),
        "log.dirs": (str(settings.data_dir), ConfigType.STRING, "the data directory (tierlog's data.dir)"),
        "num.partitions": (str(settings.num_partitions), ConfigType.INT, "partitions of a new topic"),
        "default.replication.factor": (
            str(settings.default_replication_factor),
            ConfigType.INT,
            "replicas of a new topic's partitions",
        ),
        "auto.create.topics.enable": (
            str(settings.auto_create_topics_enable).lower(),
            ConfigType.BOOLEAN,
            "create a topic a client names that does not exist",
        ),
    }
    for name, spec in TOPIC_CONFIGS.items():
        if spec.broker_name is not None:
            known[spec.broker_name] = (settings.topic_defaults[name], TOPIC_CONFIG_TYPES[name], spec.doc)
    static = set(settings.sources)
    if listener is not None:
        known["listeners"] = (listener, ConfigType.LIST, "the Kafka listener (tierlog's kafka.listener)")
        known["advertised.listeners"] = (
            listener,
            ConfigType.LIST,
            "the Kafka listener clients are told (tierlog's kafka.advertised.listener)",
        )
        if {"kafka.listener", "kafka.advertised.listener"} & static:
            static |= {"listeners", "advertised.listeners"}
    wanted = sorted(known) if keys is None else [k for k in dict.fromkeys(keys) if k in known]
    out = []
    for name in wanted:
        value, config_type, doc = known[name]
        source = ConfigSource.STATIC_BROKER_CONFIG if name in static else ConfigSource.DEFAULT_CONFIG
        synonyms = [{"name": name, "value": value, "source": source}]
        out.append(_entry(name, value, source, config_type, doc, synonyms, read_only=True))
    return out


def _entry(
    name: str,
    value: str,
    source: ConfigSource,
    config_type: ConfigType,
    doc: str,
    synonyms: list[dict[str, Any]],
    *,
    read_only: bool = False,
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": int(source),
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": [{**s, "source": int(s["source"])} for s in synonyms],
        "config_type": int(config_type),
        "documentation": doc,
    }


@dataclass(frozen=True, slots=True)
class ConfigOp:
    """One entry of an IncrementalAlterConfigs resource."""

    name: str
    op: int
    value: str | None


def incremental_updates(values: Mapping[str, str], ops: Sequence[ConfigOp]) -> dict[str, str | None]:
    """The set (value) or reset (None) updates that apply ``ops`` to a topic whose effective configs are
    ``values``: SET and DELETE as they are; APPEND and SUBTRACT on a list config (``cleanup.policy``) add
    the items not yet in its effective value or remove the given ones. Pure. Raises:
        InvalidRequestError (INVALID_REQUEST): a name given twice, an unknown operation.
        InvalidConfigError (INVALID_CONFIG): an unknown name, SET/APPEND/SUBTRACT without a value, APPEND
            or SUBTRACT on a config that is not a list.
    """
    names = [o.name for o in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicates)}")
    updates: dict[str, str | None] = {}
    for o in ops:
        if o.op not in set(IncrementalOp):
            raise InvalidRequestError(f"Unknown config operation {o.op} for config {o.name}")
        if o.name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {o.name}")
        op = IncrementalOp(o.op)
        if op == IncrementalOp.DELETE:
            updates[o.name] = None
            continue
        if o.value is None:
            raise InvalidConfigError(f"Config {o.name}: operation {op.name} needs a value")
        if op == IncrementalOp.SET:
            updates[o.name] = o.value
            continue
        if TOPIC_CONFIG_TYPES[o.name] != ConfigType.LIST:
            raise InvalidConfigError(
                f"Config value {op.name.lower()} is not allowed for config key: {o.name}"
            )
        current = [item for item in values[o.name].split(",") if item]
        given = list(dict.fromkeys(item.strip() for item in o.value.split(",") if item.strip()))
        if op == IncrementalOp.APPEND:
            merged = current + [item for item in given if item not in current]
        else:
            merged = [item for item in current if item not in given]
        updates[o.name] = ",".join(merged)
    return updates
