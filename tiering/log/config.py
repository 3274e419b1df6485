"""Per-topic log configuration, named and defaulted as Kafka's topic configs.

A :class:`LogConfig` is the typed, immutable form of a topic's effective configs: the broker builds it once
when a topic is created, opened or altered, and the engine and the produce path read its fields instead of
parsing config strings per request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.wire.errors import InvalidRequestError

__all__ = ["COMPRESSION_TYPES", "LogConfig", "TIMESTAMP_TYPES"]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
# field -> (Kafka config name, accepted values)
_CHOICE_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "message_timestamp_type": ("message.timestamp.type", TIMESTAMP_TYPES),
    "compression_type": ("compression.type", COMPRESSION_TYPES),
}

# field -> (Kafka config name, smallest accepted value, largest accepted value)
_INT_FIELDS: dict[str, tuple[str, int, int]] = {
    "segment_bytes": ("segment.bytes", 14, INT32_MAX),
    "segment_ms": ("segment.ms", 1, INT64_MAX),
    "segment_index_bytes": ("segment.index.bytes", 4, INT32_MAX),
    "index_interval_bytes": ("index.interval.bytes", 0, INT32_MAX),
    "retention_ms": ("retention.ms", -1, INT64_MAX),
    "retention_bytes": ("retention.bytes", -1, INT64_MAX),
    "local_retention_ms": ("local.retention.ms", -2, INT64_MAX),
    "local_retention_bytes": ("local.retention.bytes", -2, INT64_MAX),
    "flush_messages": ("flush.messages", 1, INT64_MAX),
    "flush_ms": ("flush.ms", 0, INT64_MAX),
    "max_message_bytes": ("max.message.bytes", 0, INT32_MAX),
    "file_delete_delay_ms": ("file.delete.delay.ms", 0, INT64_MAX),
}
_BY_NAME = {name: field for field, (name, _, _) in _INT_FIELDS.items()}
_CHOICE_BY_NAME = {name: field for field, (name, _) in _CHOICE_FIELDS.items()}
_REMOTE_STORAGE_ENABLE = "remote.storage.enable"


@dataclass(frozen=True)
class LogConfig:
    """The topic configs a partition log obeys. Immutable; see :meth:`PartitionLog.update_config`.

    Raises:
        InvalidRequestError: on construction, a value outside the range Kafka accepts (naming the config).
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60000
    compression_type: str = "producer"
    remote_storage_enable: bool = False

    def __post_init__(self) -> None:
        for field, (name, low, high) in _INT_FIELDS.items():
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidRequestError(f"invalid value {value!r} for {name}: must be in [{low}, {high}]")
        for field, (name, choices) in _CHOICE_FIELDS.items():
            if getattr(self, field) not in choices:
                raise InvalidRequestError(
                    f"invalid value {getattr(self, field)!r} for {name}: must be one of {', '.join(choices)}"
                )
        if not isinstance(self.remote_storage_enable, bool):
            raise InvalidRequestError(
                f"invalid value {self.remote_storage_enable!r} for {_REMOTE_STORAGE_ENABLE}: expected a bool"
            )

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, with -2 meaning ``retention.ms``."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, with -2 meaning ``retention.bytes``."""
        return self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build a config from Kafka-named string values (``"segment.bytes": "1048576"``) over ``base``.

        Names this class does not own are ignored: validating config names is the broker's business.
        Pure and idempotent.

        Raises:
            InvalidRequestError: a value is not an integer, is out of range, is not one of its choices
                (timestamp and compression types), or is not ``true``/``false``; the message names the config.
        """
        changes: dict[str, object] = {}
        for name, raw in configs.items():
            if name in _CHOICE_BY_NAME:
                changes[_CHOICE_BY_NAME[name]] = str(raw)
                continue
            if name == _REMOTE_STORAGE_ENABLE:
                flag = str(raw).strip().lower()
                if flag not in ("true", "false"):
                    raise InvalidRequestError(f"invalid value {raw!r} for {name}: expected true or false")
                changes["remote_storage_enable"] = flag == "true"
                continue
            field = _BY_NAME.get(name)
            if field is None:
                continue
            try:
                changes[field] = int(str(raw).strip())
            except ValueError:
                raise InvalidRequestError(f"invalid value {raw!r} for {name}: not an integer") from None
        return dataclasses.replace(base if base is not None else cls(), **changes)  # type: ignore[arg-type]

    def to_topic_configs(self) -> dict[str, str]:
        """The Kafka-named string form of every field (inverse of :meth:`from_topic_configs`). Pure."""
        out = {name: str(getattr(self, field)) for field, (name, _, _) in _INT_FIELDS.items()}
        out.update({name: getattr(self, field) for field, (name, _) in _CHOICE_FIELDS.items()})
        out[_REMOTE_STORAGE_ENABLE] = "true" if self.remote_storage_enable else "false"
        return out
