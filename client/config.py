"""Producer and consumer settings: Kafka's config names with dots as underscores, validated once.

``ProducerConfig.from_kwargs(linger_ms=5, compression_type="zstd")`` accepts exactly the names listed on the
dataclasses (``acks`` takes 0, 1, -1 or ``"all"``); an unknown name or a bad value raises
:class:`~tierlog.wire.errors.InvalidRequestError` naming it, so a typo fails at construction, not silently.
The security options (``security_protocol``, ``ssl_cafile`` ... ``sasl_oauth_token``) are aiokafka's, checked
by :class:`~tierlog.client.security.ClientSecurity`; under SSL a bare ``host:port`` bootstrap server is
``https://``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tierlog.client.security import ClientSecurity
from tierlog.tiering.codec.compression import Compression
from tierlog.wire.errors import InvalidRequestError

__all__ = ["CommonConfig", "ProducerConfig", "ConsumerConfig", "bootstrap_urls", "normalise_bootstrap"]

DEFAULT_BOOTSTRAP = "http://127.0.0.1:8082"
_OFFSET_RESETS = ("earliest", "latest", "none")
_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
Serializer = Callable[[Any], bytes | None]
Deserializer = Callable[[bytes | None], Any]
C = TypeVar("C", bound="CommonConfig")


def bootstrap_urls(servers: str | Sequence[str], *, scheme: str = "http") -> tuple[str, ...]:
    """Every bootstrap server as a base URL (``http://host:port``, no trailing slash), in order, once each.

    ``servers`` is one URL, a comma-separated string of them or a list (whose items may be comma-separated
    too). A bare ``host:port`` gets ``scheme://`` (``http`` unless given). Pure.

    Raises:
        InvalidRequestError: no server, or one that is not an http(s) URL with a host.
    """
    items = [servers] if isinstance(servers, str) else list(servers) if isinstance(servers, Sequence) else []
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidRequestError(f"bootstrap server {item!r} is not an http(s)://host:port URL")
        for part in item.split(","):
            if part.strip():
                url = _base_url(part.strip(), scheme)
                if url not in urls:
                    urls.append(url)
    if not urls:
        raise InvalidRequestError("bootstrap_servers must name at least one http://host:port")
    return tuple(urls)


def _base_url(text: str, scheme: str) -> str:
    url = text if "://" in text else f"{scheme}://{text}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequestError(f"bootstrap server {text!r} is not an http(s)://host:port URL")
    return url.rstrip("/")


def normalise_bootstrap(servers: str | Sequence[str]) -> str:
    """The base URL of the first bootstrap server (see :func:`bootstrap_urls`). Pure.

    Raises:
        InvalidRequestError: no server, or the first is not an http(s) URL with a host.
    """
    return bootstrap_urls(servers)[0]


@dataclass(frozen=True)
class CommonConfig:
    """Settings shared by producers and consumers.

    ``bootstrap_servers`` holds the bootstrap URLs comma-separated (see :attr:`bootstrap_list`): any of them
    answers the cluster's metadata, from which the client learns every broker and each partition's leader.
    ``metadata_max_age_ms`` bounds how old that metadata may grow before it is refreshed unasked.
    """

    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    client_id: str = "tierlog-python"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    metadata_max_age_ms: int = 300_000
    connections_max: int = 100
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    sasl_oauth_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_kwargs(cls: type[C], kwargs: Mapping[str, Any]) -> C:
        """Build and validate a config. Raises InvalidRequestError for an unknown name or a bad value."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise InvalidRequestError(f"unknown {cls.__name__} option(s): {', '.join(unknown)}")
        values = cls.resolve(dict(kwargs))
        tls = values.get("security_protocol") in ("SSL", "SASL_SSL")
        if "bootstrap_servers" in values:
            urls = bootstrap_urls(values["bootstrap_servers"], scheme="https" if tls else "http")
            values["bootstrap_servers"] = ",".join(urls)
        elif tls:
            values["bootstrap_servers"] = DEFAULT_BOOTSTRAP.replace("http://", "https://", 1)
        config = cls(**values)
        config.validate()
        return config

    @classmethod
    def resolve(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Settings that depend on which others were given explicitly (none here). Pure."""
        return values

    @property
    def bootstrap_list(self) -> tuple[str, ...]:
        """The bootstrap base URLs, in the order given."""
        return bootstrap_urls(self.bootstrap_servers)

    @cached_property
    def security(self) -> ClientSecurity:
        """The TLS settings and credentials, as the bootstrap URLs' scheme makes them
        (:meth:`ClientSecurity.for_urls`). Raises InvalidRequestError naming a bad option."""
        return ClientSecurity(
            security_protocol=self.security_protocol,
            ssl_cafile=self.ssl_cafile,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
            ssl_check_hostname=self.ssl_check_hostname,
            sasl_mechanism=self.sasl_mechanism,
            sasl_plain_username=self.sasl_plain_username,
            sasl_plain_password=self.sasl_plain_password,
            sasl_oauth_token=self.sasl_oauth_token,
        ).for_urls(self.bootstrap_list)

    def validate(self) -> None:
        """Check ranges and the security options. Raises InvalidRequestError naming the first bad option."""
        self.security  # noqa: B018 (validates and caches)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            numeric = f.name.endswith(("_ms", "_bytes", "_size", "_memory", "_records", "_max"))
            numeric = numeric or f.name in ("retries", "max_in_flight_requests_per_connection")
            if numeric and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise InvalidRequestError(f"{f.name} must be a non-negative integer, got {value!r}")


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise InvalidRequestError(f"{name} must be positive, got {value}")


@dataclass(frozen=True)
class ProducerConfig(CommonConfig):
    """``acks``, ``linger_ms``, ``batch_size``, ``compression_type``, ``buffer_memory``: Kafka's names.

    ``enable_idempotence`` (default True) couples with other settings as in Kafka 3.2+: ``acks`` defaults to
    ``"all"``; idempotence enabled explicitly with ``acks`` other than all, ``retries=0`` or
    ``max_in_flight_requests_per_connection`` above 5 is a config error, while idempotence left at its
    default is turned off by such an explicit setting (see :meth:`resolve`).
    """

    acks: int | str = "all"
    enable_idempotence: bool = True
    linger_ms: int = 0
    batch_size: int = 16_384
    compression_type: str | None = None
    buffer_memory: int = 32 * 2**20
    max_block_ms: int = 60_000
    max_request_size: int = 2**20
    retries: int = 2**31 - 1
    delivery_timeout_ms: int = 120_000
    max_in_flight_requests_per_connection: int = 5
    allow_auto_create_topics: bool = True
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None

    def validate(self) -> None:
        super().validate()
        if self.acks not in (0, 1, -1, "all", "0", "1", "-1"):
            raise InvalidRequestError(f"acks must be 0, 1, -1 or 'all', got {self.acks!r}")
        self.compression()
        _positive("batch_size", self.batch_size)
        _positive("buffer_memory", self.buffer_memory)
        _positive("max_request_size", self.max_request_size)
        _positive("max_in_flight_requests_per_connection", self.max_in_flight_requests_per_connection)
        if not isinstance(self.enable_idempotence, bool):
            raise InvalidRequestError(
                f"enable_idempotence must be True or False, got {self.enable_idempotence!r}"
            )
        conflict = self.idempotence_conflict()
        if self.enable_idempotence and conflict is not None:
            raise InvalidRequestError(f"enable_idempotence=True requires {conflict}")

    def idempotence_conflict(self) -> str | None:
        """What keeps these settings from an idempotent producer, or None. Pure."""
        if str(self.acks) not in ("all", "-1"):
            return f"acks='all', got acks={self.acks!r}"
        if self.retries == 0:
            return "retries > 0, got retries=0"
        if self.max_in_flight_requests_per_connection > 5:
            return (
                "max_in_flight_requests_per_connection <= 5, got "
                f"{self.max_in_flight_requests_per_connection}"
            )
        return None

    @classmethod
    def resolve(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Turn idempotence off when it was left at its default and ``acks``, ``retries`` or
        ``max_in_flight_requests_per_connection`` were set explicitly to values it cannot work with (Kafka
        3.2+). An explicit ``enable_idempotence=True`` is kept (:meth:`validate` then refuses the conflict).
        Pure."""
        if "enable_idempotence" in values:
            return values
        acks = values.get("acks", "all")
        retries = values.get("retries", 1)
        in_flight = values.get("max_in_flight_requests_per_connection", 5)
        conflicting = str(acks) not in ("all", "-1") or retries == 0
        conflicting = conflicting or (isinstance(in_flight, int) and in_flight > 5)
        if conflicting:
            return {**values, "enable_idempotence": False}
        return values

    @property
    def acks_param(self) -> str:
        """The ``acks`` query value of the native produce route: ``0``, ``1`` or ``all``."""
        return {"0": "0", "1": "1", "-1": "all", "all": "all"}[str(self.acks)]

    def compression(self) -> Compression:
        """The codec for ``compression_type`` (None means none). Raises InvalidRequestError."""
        return (
            Compression.NONE
            if self.compression_type is None
            else Compression.from_name(self.compression_type)
        )


@dataclass(frozen=True)
class ConsumerConfig(CommonConfig):
    """``group_id``, ``enable_auto_commit``, ``auto_offset_reset``, ``max_poll_records`` ... (Kafka's names).

    ``prefetch_batches`` bounds the fetch answers buffered ahead of ``poll`` per partition.
    """

    group_id: str | None = None
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    auto_offset_reset: str = "latest"
    max_poll_records: int = 500
    fetch_max_bytes: int = 50 * 2**20
    max_partition_fetch_bytes: int = 2**20
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    prefetch_batches: int = 2
    check_crcs: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: str = "range"
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def validate(self) -> None:
        super().validate()
        if self.auto_offset_reset not in _OFFSET_RESETS:
            raise InvalidRequestError(
                f"auto_offset_reset must be earliest, latest or none, got {self.auto_offset_reset!r}"
            )
        if self.partition_assignment_strategy not in _STRATEGIES:
            raise InvalidRequestError(
                f"partition_assignment_strategy must be one of {', '.join(_STRATEGIES)}"
            )
        if self.group_id is not None and not self.group_id:
            raise InvalidRequestError("group_id must not be empty")
        for name in ("max_poll_records", "max_partition_fetch_bytes", "fetch_max_bytes", "prefetch_batches"):
            _positive(name, getattr(self, name))
        _positive("heartbeat_interval_ms", self.heartbeat_interval_ms)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise InvalidRequestError("heartbeat_interval_ms must be lower than session_timeout_ms")

    @property
    def partition_fetch_bytes(self) -> int:
        """``max_bytes`` of one partition's fetch request."""
        return min(self.max_partition_fetch_bytes, self.fetch_max_bytes)
