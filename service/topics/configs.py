"""Kafka's topic config names: their types, defaults, broker synonyms and validation.

A topic stores only its overrides; its effective configs are the broker defaults (``log.*`` settings)
overlaid with those overrides. Validation follows Kafka's ``LogConfig``: types, ranges, and the
cross-checks between ``local.retention.*`` and ``retention.*``. Every error names the config.
:class:`TopicConfig` is a topic's effective configs resolved and parsed once, the snapshot the broker
publishes when a topic is created, opened or altered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tierlog.tiering.log.config import COMPRESSION_TYPES, TIMESTAMP_TYPES, LogConfig
from tierlog.wire.errors import InvalidConfigError

__all__ = [
    "TOPIC_CONFIGS",
    "TopicConfig",
    "TopicConfigSpec",
    "effective_configs",
    "normalize_value",
    "validate_overrides",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
CLEANUP_POLICIES = ("delete", "compact")


@dataclass(frozen=True, slots=True)
class TopicConfigSpec:
    """One topic config: Kafka name, the broker setting that supplies its default, and its parser."""

    name: str
    broker_name: str | None
    default: str
    doc: str
    parse: Callable[[str, str], str]


def _integer(low: int, high: int) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        try:
            value = int(raw.strip())
        except ValueError:
            message = f"Invalid value {raw!r} for configuration {name}: not an integer"
            raise InvalidConfigError(message) from None
        if not low <= value <= high:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: must be between {low} and {high}"
            )
        return str(value)

    return parse


def _boolean(name: str, raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: expected true or false")
    return value


def _choice(choices: tuple[str, ...], *, case_sensitive: bool = False) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip()
        for choice in choices:
            if value == choice or (not case_sensitive and value.lower() == choice.lower()):
                return choice
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: must be one of {', '.join(choices)}"
        )

    return parse


def _cleanup_policy(name: str, raw: str) -> str:
    items = [item.strip().lower() for item in raw.split(",") if item.strip()]
    if not items or any(item not in CLEANUP_POLICIES for item in items):
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: a list of delete and/or compact"
        )
    return ",".join(dict.fromkeys(items))


_SPECS: tuple[TopicConfigSpec, ...] = (
    TopicConfigSpec("cleanup.policy", "log.cleanup.policy", "delete",
                    "delete and/or compact; compaction is accepted but not performed yet",
                    _cleanup_policy),
    TopicConfigSpec("compression.type", "compression.type", "producer",
                    "recorded only: batches are always stored as the producer compressed them",
                    _choice(COMPRESSION_TYPES)),
    TopicConfigSpec("file.delete.delay.ms", "log.segment.delete.delay.ms", "60000",
                    "how long a deleted segment file lingers before removal", _integer(0, INT64_MAX)),
    TopicConfigSpec("flush.messages", "log.flush.interval.messages", str(INT64_MAX),
                    "fsync after this many messages", _integer(1, INT64_MAX)),
    TopicConfigSpec("flush.ms", "log.flush.interval.ms", str(INT64_MAX),
                    "fsync when the oldest unflushed message is this old", _integer(0, INT64_MAX)),
    TopicConfigSpec("index.interval.bytes", "log.index.interval.bytes", "4096",
                    "bytes between offset index entries", _integer(0, INT32_MAX)),
    TopicConfigSpec("local.retention.bytes", "log.local.retention.bytes", "-2",
                    "hot-tier size bound per partition; -2 means retention.bytes", _integer(-2, INT64_MAX)),
    TopicConfigSpec("local.retention.ms", "log.local.retention.ms", "-2",
                    "hot-tier age bound; -2 means retention.ms", _integer(-2, INT64_MAX)),
    TopicConfigSpec("max.message.bytes", "message.max.bytes", "1048588",
                    "largest record batch accepted", _integer(0, INT32_MAX)),
    TopicConfigSpec("message.timestamp.type", "log.message.timestamp.type", "CreateTime",
                    "CreateTime or LogAppendTime", _choice(TIMESTAMP_TYPES)),
    TopicConfigSpec("min.insync.replicas", "min.insync.replicas", "1",
                    "in-sync replicas an acks=all produce needs, else NOT_ENOUGH_REPLICAS",
                    _integer(1, INT32_MAX)),
    TopicConfigSpec("remote.storage.enable", None, "false",
                    "move sealed segments to the remote tier", _boolean),
    TopicConfigSpec("retention.bytes", "log.retention.bytes", "-1",
                    "whole-log size bound per partition; -1 unbounded", _integer(-1, INT64_MAX)),
    TopicConfigSpec("retention.ms", "log.retention.ms", "604800000",
                    "whole-log age bound; -1 unbounded", _integer(-1, INT64_MAX)),
    TopicConfigSpec("segment.bytes", "log.segment.bytes", "1073741824",
                    "roll the active segment at this size", _integer(14, INT32_MAX)),
    TopicConfigSpec("segment.index.bytes", "log.index.size.max.bytes", "10485760",
                    "largest offset index per segment", _integer(4, INT32_MAX)),
    TopicConfigSpec("unclean.leader.election.enable", "unclean.leader.election.enable", "false",
                    "elect a leader from outside the ISR when none is left (may lose acknowledged records)",
                    _boolean),
    TopicConfigSpec("segment.ms", "log.roll.ms", "604800000",
                    "roll the active segment when it is this old", _integer(1, INT64_MAX)),
)  # fmt: skip

TOPIC_CONFIGS: dict[str, TopicConfigSpec] = {spec.name: spec for spec in _SPECS}


def normalize_value(name: str, raw: object) -> str:
    """Parse and normalise one topic config value (``"TRUE"`` -> ``"true"``, ``" 10"`` -> ``"10"``).

    Pure and idempotent. Raises:
        InvalidConfigError (400, 40002): unknown name, or a value of the wrong type or out of range.
    """
    spec = TOPIC_CONFIGS.get(name)
    if spec is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if isinstance(raw, bool):
        raw = "true" if raw else "false"
    if not isinstance(raw, str | int):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: expected a string")
    return spec.parse(name, str(raw))


def effective_configs(defaults: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """Every topic config's effective value: ``overrides`` over ``defaults`` over Kafka's defaults. Pure."""
    return {
        name: overrides.get(name, defaults.get(name, spec.default)) for name, spec in TOPIC_CONFIGS.items()
    }


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective configs, resolved and parsed once: ``values`` by Kafka name (for describing the
    topic) and ``log``, the typed form the engine and the produce path read. Immutable: a config change
    builds a new one and publishes it by swapping one reference, so readers need no lock."""

    values: Mapping[str, str]
    log: LogConfig

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas``: the ISR size below which ``acks=all`` produce is refused."""
        return int(self.values["min.insync.replicas"])

    @property
    def unclean_leader_election_enable(self) -> bool:
        """``unclean.leader.election.enable``: may the controller elect a leader from outside the ISR."""
        return self.values["unclean.leader.election.enable"] == "true"

    @classmethod
    def resolve(cls, defaults: Mapping[str, str], overrides: Mapping[str, str]) -> TopicConfig:
        """``overrides`` (already validated) over ``defaults`` over Kafka's defaults. Pure.

        Raises:
            InvalidRequestError: a value the log engine refuses (only for overrides that were not validated).
        """
        values = effective_configs(defaults, overrides)
        return cls(MappingProxyType(values), LogConfig.from_topic_configs(values))


def validate_overrides(defaults: Mapping[str, str], overrides: Mapping[str, object]) -> dict[str, str]:
    """Normalise ``overrides`` and check the combination with ``defaults`` as Kafka's ``LogConfig`` does.

    Returns the normalised overrides. Pure and idempotent. Raises:
        InvalidConfigError (400, 40002): naming the first bad config.
    """
    normalized = {name: normalize_value(name, raw) for name, raw in overrides.items()}
    check_combination(effective_configs(defaults, normalized))
    return normalized


def check_combination(configs: Mapping[str, str]) -> None:
    """Cross-field rules on a full set of effective configs.

    Raises:
        InvalidConfigError: ``local.retention.*`` exceeds or contradicts ``retention.*``, or remote
            storage is enabled on a compacted topic.
    """
    for local_name, total_name in (("local.retention.ms", "retention.ms"),
                                   ("local.retention.bytes", "retention.bytes")):  # fmt: skip
        local, total = int(configs[local_name]), int(configs[total_name])
        if total == -1 or local == -2:
            continue
        if local == -1:
            raise InvalidConfigError(
                f"Invalid value -1 for configuration {local_name}: must not be -1 as {total_name} is {total}"
            )
        if local > total:
            raise InvalidConfigError(
                f"Invalid value {local} for configuration {local_name}: "
                f"must not be more than {total_name} ({total})"
            )
    if configs["remote.storage.enable"] == "true" and "compact" in configs["cleanup.policy"].split(","):
        raise InvalidConfigError(
            "Invalid value true for configuration remote.storage.enable: "
            "remote storage is not supported for compacted topics"
        )
