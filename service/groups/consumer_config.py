"""Configuration of REST consumer instances and the request-body helpers of the consumer APIs.

Pure functions and values: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.service.web.media import EmbeddedFormat
from tierlog.wire.errors import InvalidConsumerConfigError

__all__ = ["MAX_REQUEST_TIMEOUT_MS", "ConsumerSettings", "parse_partitions"]

TopicPartition = tuple[str, int]

#: The longest wait of a records read (the ``timeout`` query parameter's maximum too).
MAX_REQUEST_TIMEOUT_MS = 300_000
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_RESET_ALIASES = {"smallest": "earliest", "largest": "latest"}  # the v1 API's (Kafka 0.8) names


@dataclass(frozen=True)
class ConsumerSettings:
    """The consumer configs a REST client may set when creating an instance."""

    format: EmbeddedFormat = EmbeddedFormat.BINARY
    auto_offset_reset: str = "latest"
    auto_commit_enable: bool = True
    fetch_min_bytes: int = 1
    request_timeout_ms: int = 1_000

    @classmethod
    def from_request(cls, body: Mapping[str, Any]) -> ConsumerSettings:
        """Parse the create-instance body (Confluent's names and string-or-native values).

        A field sent as ``null`` means its default, as absent does (Confluent's Java client sends every
        field). ``auto.offset.reset`` also takes the v1 API's ``smallest`` and ``largest``.

        Raises:
            InvalidConsumerConfigError: (42204) an unknown format or an invalid value.
        """
        bad = InvalidConsumerConfigError

        def text(name: str, default: str) -> str:
            value = body.get(name)
            return default if value is None else str(value).lower()

        raw_format = text("format", "binary")
        if raw_format not in ("binary", "json"):
            raise bad(f"unsupported consumer format {raw_format!r}: tierlog serves binary and json")
        reset = text("auto.offset.reset", "latest")
        reset = _RESET_ALIASES.get(reset, reset)
        if reset not in ("earliest", "latest", "none"):
            raise bad(f"auto.offset.reset must be earliest, latest or none, not {reset!r}")
        commit = text("auto.commit.enable", "true")
        if commit not in ("true", "false"):
            raise bad(f"auto.commit.enable must be true or false, not {commit!r}")

        def number(name: str, default: int, low: int, high: int) -> int:
            value = body.get(name)
            if value is None:
                return default
            if isinstance(value, bool) or not (
                isinstance(value, int) or (isinstance(value, str) and _INTEGER_TEXT.fullmatch(value))
            ):
                raise bad(f"{name} must be an integer, not {value!r}")
            parsed = int(value)
            if not low <= parsed <= high:
                raise bad(f"{name} must be from {low} to {high}")
            return parsed

        return cls(
            format=EmbeddedFormat(raw_format),
            auto_offset_reset=reset,
            auto_commit_enable=commit == "true",
            fetch_min_bytes=max(1, number("fetch.min.bytes", 1, -1, 2**31 - 1)),
            request_timeout_ms=number("consumer.request.timeout.ms", 1_000, 0, MAX_REQUEST_TIMEOUT_MS),
        )


def parse_partitions(body: Mapping[str, Any], key: str = "partitions") -> list[TopicPartition]:
    """``[{"topic": ..., "partition": ...}, ...]`` under ``key`` as a list of pairs.

    Raises:
        InvalidConsumerConfigError: (42204) a missing list or malformed entries.
    """
    entries = body.get(key)
    if not isinstance(entries, list):
        raise InvalidConsumerConfigError(f"expected a list under {key!r}")
    result = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise InvalidConsumerConfigError(f"malformed partition entry {entry!r}")
        partition = entry.get("partition")
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise InvalidConsumerConfigError(f"malformed partition entry {entry!r}")
        result.append((entry["topic"], partition))
    return result
