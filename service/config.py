"""Broker settings: the table (:mod:`~tierlog.service.settings_table`) read from flags, env and a TOML file.

Every setting has a dotted name (``log.segment.bytes``), a flag (``--log-segment-bytes``) and an
environment variable (``TIERLOG_LOG_SEGMENT_BYTES``). Precedence is flag > environment > file > default.
In the TOML file a key may be written dotted and quoted (``"log.segment.bytes" = 1024``), as nested
tables (``[log] segment.bytes = 1024``) or with ``_``/``-`` for dots (``data_dir = "/var/lib/tierlog"``).
Settings named ``log.*`` (and ``message.max.bytes``, ``compression.type``) are the defaults of the topic
configs they stand for; they are validated by the same rules as topic configs.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar, cast
from urllib.parse import urlsplit

from tierlog.service import settings_table as t
from tierlog.service.security.redact import without_userinfo
from tierlog.service.security.settings import SecuritySettings, security_settings
from tierlog.service.settings_table import SETTINGS_TABLE, SettingSpec, env_name, flag_name
from tierlog.service.topic_configs import check_combination, effective_configs
from tierlog.tiering.errors import InvalidRequestError

__all__ = [
    "SETTINGS_TABLE",
    "MetadataUri",
    "RemoteUri",
    "Settings",
    "SettingSpec",
    "SettingsError",
    "build_settings",
    "env_name",
    "flag_name",
    "load_settings",
    "parse_metadata_uri",
]

T = TypeVar("T")

_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class SettingsError(Exception):
    """A setting is unknown or has an invalid value; the message is one line naming it and its source."""


@dataclass(frozen=True, slots=True)
class RemoteUri:
    """Where the remote tier lives: a local directory or ``s3://bucket/prefix``."""

    scheme: str
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return str(self.path)


@dataclass(frozen=True, slots=True)
class Settings:
    """The broker's resolved settings. Build with :func:`build_settings` or :func:`load_settings`."""

    data_dir: Path
    host: str
    port: int
    advertised_url: str
    remote_uri: RemoteUri
    s3_endpoint_url: str | None
    num_partitions: int
    auto_create_topics_enable: bool
    max_request_size: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    logging_level: str
    topic_defaults: Mapping[str, str]
    offsets_retention_minutes: int = 10080
    consumer_instance_timeout_ms: int = 300_000
    group_default_assignor: str = "range"
    remote_upload_concurrency: int = 4
    remote_upload_interval_ms: int = 10_000
    remote_max_upload_interval_ms: int = 3_600_000
    remote_local_disk_budget_bytes: int = -1
    remote_cache_bytes: int = 256 * 2**20
    remote_retry_deadline_ms: int = 30_000
    s3_connect_timeout_ms: int = 10_000
    s3_read_timeout_ms: int = 30_000
    remote_restore_on_start: bool = False
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    max_connections: int = 512
    accept_error_log_interval_ms: int = 10_000
    log_io_threads: int = 8
    rest_produce_max_records: int = 100_000
    rest_produce_conversion_max_bytes: int = 16 * 2**20
    queued_max_request_bytes: int = 64 * 2**20
    broker_id: int = 0
    broker_rack: str | None = None
    metadata_uri: MetadataUri | None = None  # None: a cluster of one on <data-dir>/cluster-metadata.json
    default_replication_factor: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    offsets_topic_num_partitions: int = 1
    remote_fetch_readahead_chunks: int = 4
    remote_log_reader_threads: int = 8
    remote_upload_part_threads: int = 8
    remote_upload_batch_bytes: int = 64 * 2**20
    remote_upload_batch_segments: int = 32
    remote_upload_file_concurrency: int = 4
    remote_upload_indexes_packed: bool = True
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 2**20
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    security: SecuritySettings = field(default_factory=SecuritySettings)
    sources: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"data.dir={self.data_dir} listen={self.host}:{self.port} remote.uri={self.remote_uri} "
            f"s3.endpoint.url={without_userinfo(self.s3_endpoint_url) if self.s3_endpoint_url else '-'} "
            f"num.partitions={self.num_partitions} "
            f"auto.create.topics.enable={str(self.auto_create_topics_enable).lower()}"
        )


@dataclass(frozen=True, slots=True)
class MetadataUri:
    """Where the cluster metadata lives: an etcd cluster's client endpoints and a key prefix, or (scheme
    ``file``) one local metadata file for a cluster of a single broker without etcd."""

    scheme: str  # "etcd" or "file"
    endpoints: tuple[tuple[str, int], ...]
    prefix: str  # etcd: keys live under "/<prefix>/"; never empty
    path: Path | None = None  # file: the metadata file

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        hosts = ",".join(f"{host}:{port}" for host, port in self.endpoints)
        return f"{self.scheme}://{hosts}/{self.prefix}"


def parse_metadata_uri(raw: str) -> MetadataUri:
    """``etcd://host:port[,host:port...][/prefix]`` (prefix default ``tierlog``), or ``file:///path``: the
    local metadata store persisted in one file (one broker, no etcd). Pure.

    Raises: ValueError naming what is wrong (scheme, host, port, prefix characters, path).
    """
    parts = urlsplit(raw.strip())
    if parts.scheme == "file":
        absolute = parts.path.startswith("/") and not parts.path.endswith("/")
        if parts.netloc not in ("", "localhost") or not absolute:
            raise ValueError("expected file:///absolute/path/of/the/metadata/file")
        if parts.query or parts.fragment:
            raise ValueError("a file:// URI takes no query or fragment")
        return MetadataUri("file", (), "", Path(parts.path))
    if parts.scheme != "etcd":
        raise ValueError("expected etcd://host:port[,host:port...]/prefix or file:///path")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("an etcd:// URI takes no credentials, query or fragment")
    endpoints: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {item!r} is not host:port")
        endpoints.append((host.strip("[]"), int(port)))
    prefix = parts.path.strip("/") or "tierlog"
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", prefix):
        raise ValueError(f"prefix {prefix!r} may hold only letters, digits, '.', '_', '-' and '/'")
    return MetadataUri("etcd", tuple(endpoints), prefix)


def _remote_uri(raw: str | None, data_dir: Path) -> RemoteUri:
    if raw is None or not raw.strip():
        return RemoteUri("file", path=data_dir / "remote")
    raw = raw.strip()
    parts = urlsplit(raw)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if "@" in bucket:  # never echo what may be credentials
            raise ValueError("an s3:// URI takes no credentials: use the AWS_* environment or a profile")
        if not _S3_BUCKET.match(bucket) or ".." in bucket:
            raise ValueError(f"invalid S3 bucket name {bucket!r}")
        if parts.query or parts.fragment:
            raise ValueError("an s3:// URI takes no query or fragment")
        return RemoteUri("s3", bucket=bucket, prefix=parts.path.strip("/"))
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ValueError("expected file:///absolute/path")
        return RemoteUri("file", path=Path(parts.path))
    if parts.scheme and len(parts.scheme) > 1:
        raise ValueError(f"unsupported scheme {parts.scheme!r}: use a directory or s3://bucket/prefix")
    return RemoteUri("file", path=Path(raw).absolute())


def build_settings(values: Mapping[str, object], sources: Mapping[str, str] | None = None) -> Settings:
    """Resolve settings from ``values`` (dotted name -> raw value); missing names take their defaults.

    ``sources`` names where each value came from, for error messages. Pure apart from reading
    ``AWS_ENDPOINT_URL`` when ``s3.endpoint.url`` is unset. Raises:
        SettingsError: an unknown name or an invalid value (one line naming the setting and its source).
    """
    sources = dict(sources or {})
    for name in values:
        if name not in SETTINGS_TABLE:
            raise SettingsError(f"unknown setting {name!r}{_origin(sources.get(name))}")
    parsed: dict[str, object] = {spec.name: _parse(spec, values, sources) for spec in t.TABLE}

    def get(spec: SettingSpec[T]) -> T:
        return _typed(parsed, spec)

    def optional(spec: SettingSpec[T]) -> T | None:
        return None if parsed[spec.name] is None else get(spec)

    data_dir = get(t.DATA_DIR)
    raw_remote = optional(t.REMOTE_URI)
    try:
        remote = _remote_uri(raw_remote, data_dir)
    except ValueError as err:
        origin = _origin(sources.get(t.REMOTE_URI.name))
        shown = without_userinfo(raw_remote or "")
        raise SettingsError(f"invalid value {shown!r} for remote.uri{origin}: {err}") from None
    endpoint = optional(t.S3_ENDPOINT_URL)
    if endpoint is None and os.environ.get("AWS_ENDPOINT_URL"):
        try:
            endpoint = t.parse_url(os.environ["AWS_ENDPOINT_URL"])
        except ValueError as err:
            raise SettingsError(
                f"invalid AWS_ENDPOINT_URL {os.environ['AWS_ENDPOINT_URL']!r}: {err}"
            ) from None
    topic_defaults = {spec.topic_config: get(spec) for spec in t.TABLE if spec.topic_config is not None}
    try:
        check_combination(effective_configs(topic_defaults, {}))
    except InvalidRequestError as err:
        raise SettingsError(f"invalid log.* defaults: {err.message}") from None
    host, port = get(t.HOST), get(t.PORT)
    raw_metadata = optional(t.METADATA_URI)
    try:
        metadata_uri = parse_metadata_uri(raw_metadata) if raw_metadata and raw_metadata.strip() else None
    except ValueError as err:
        origin = _origin(sources.get(t.METADATA_URI.name))
        raise SettingsError(f"invalid value {raw_metadata!r} for metadata.uri{origin}: {err}") from None
    session_ms, heartbeat_ms = get(t.BROKER_SESSION_TIMEOUT_MS), get(t.BROKER_HEARTBEAT_INTERVAL_MS)
    if heartbeat_ms * 2 > session_ms:
        raise SettingsError(
            f"broker.heartbeat.interval.ms={heartbeat_ms} must be at most half of "
            f"broker.session.timeout.ms={session_ms}"
        )
    try:
        security = security_settings(optional)
    except ValueError as err:
        raise SettingsError(f"invalid security settings: {err}") from None
    scheme = "https" if security.tls else "http"
    return Settings(
        data_dir=data_dir,
        host=host,
        port=port,
        advertised_url=optional(t.ADVERTISED_URL) or f"{scheme}://{host}:{port}",
        remote_uri=remote,
        s3_endpoint_url=endpoint,
        num_partitions=get(t.NUM_PARTITIONS),
        auto_create_topics_enable=get(t.AUTO_CREATE_TOPICS_ENABLE),
        max_request_size=get(t.MAX_REQUEST_SIZE),
        log_retention_check_interval_ms=get(t.LOG_RETENTION_CHECK_INTERVAL_MS),
        log_flush_scheduler_interval_ms=get(t.LOG_FLUSH_SCHEDULER_INTERVAL_MS),
        logging_level=get(t.LOGGING_LEVEL),
        topic_defaults=MappingProxyType(topic_defaults),
        offsets_retention_minutes=get(t.OFFSETS_RETENTION_MINUTES),
        consumer_instance_timeout_ms=get(t.CONSUMER_INSTANCE_TIMEOUT_MS),
        group_default_assignor=get(t.GROUP_DEFAULT_ASSIGNOR),
        remote_upload_concurrency=get(t.REMOTE_UPLOAD_CONCURRENCY),
        remote_upload_interval_ms=get(t.REMOTE_UPLOAD_INTERVAL_MS),
        remote_max_upload_interval_ms=get(t.REMOTE_MAX_UPLOAD_INTERVAL_MS),
        remote_local_disk_budget_bytes=get(t.REMOTE_LOCAL_DISK_BUDGET_BYTES),
        remote_cache_bytes=get(t.REMOTE_CACHE_BYTES),
        remote_retry_deadline_ms=get(t.REMOTE_RETRY_DEADLINE_MS),
        s3_connect_timeout_ms=get(t.S3_CONNECT_TIMEOUT_MS),
        s3_read_timeout_ms=get(t.S3_READ_TIMEOUT_MS),
        remote_restore_on_start=get(t.REMOTE_RESTORE_ON_START),
        connections_max_idle_ms=get(t.CONNECTIONS_MAX_IDLE_MS),
        request_read_timeout_ms=get(t.REQUEST_READ_TIMEOUT_MS),
        max_connections=get(t.MAX_CONNECTIONS),
        accept_error_log_interval_ms=get(t.ACCEPT_ERROR_LOG_INTERVAL_MS),
        log_io_threads=get(t.LOG_IO_THREADS),
        rest_produce_max_records=get(t.REST_PRODUCE_MAX_RECORDS),
        rest_produce_conversion_max_bytes=get(t.REST_PRODUCE_CONVERSION_MAX_BYTES),
        queued_max_request_bytes=get(t.QUEUED_MAX_REQUEST_BYTES),
        broker_id=get(t.BROKER_ID),
        broker_rack=optional(t.BROKER_RACK) or None,
        metadata_uri=metadata_uri,
        default_replication_factor=get(t.DEFAULT_REPLICATION_FACTOR),
        auto_leader_rebalance_enable=get(t.AUTO_LEADER_REBALANCE_ENABLE),
        leader_imbalance_check_interval_seconds=get(t.LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS),
        broker_session_timeout_ms=session_ms,
        broker_heartbeat_interval_ms=heartbeat_ms,
        offsets_topic_num_partitions=get(t.OFFSETS_TOPIC_NUM_PARTITIONS),
        remote_fetch_readahead_chunks=get(t.REMOTE_FETCH_READAHEAD_CHUNKS),
        remote_log_reader_threads=get(t.REMOTE_LOG_READER_THREADS),
        remote_upload_part_threads=get(t.REMOTE_UPLOAD_PART_THREADS),
        remote_upload_batch_bytes=get(t.REMOTE_UPLOAD_BATCH_BYTES),
        remote_upload_batch_segments=get(t.REMOTE_UPLOAD_BATCH_SEGMENTS),
        remote_upload_file_concurrency=get(t.REMOTE_UPLOAD_FILE_CONCURRENCY),
        remote_upload_indexes_packed=get(t.REMOTE_UPLOAD_INDEXES_PACKED),
        replica_lag_time_max_ms=get(t.REPLICA_LAG_TIME_MAX_MS),
        replica_fetch_max_bytes=get(t.REPLICA_FETCH_MAX_BYTES),
        replica_fetch_wait_max_ms=get(t.REPLICA_FETCH_WAIT_MAX_MS),
        replica_fetch_backoff_ms=get(t.REPLICA_FETCH_BACKOFF_MS),
        replica_high_watermark_checkpoint_interval_ms=get(t.REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS),
        producer_id_expiration_ms=get(t.PRODUCER_ID_EXPIRATION_MS),
        security=security,
        producer_id_expiration_check_interval_ms=get(t.PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS),
        sources=MappingProxyType(sources),
    )


def _parse(spec: SettingSpec[T], values: Mapping[str, object], sources: Mapping[str, str]) -> T | None:
    """Parse the one value of ``spec`` (its default when ``values`` has none). Raises SettingsError."""
    raw = values.get(spec.name, spec.default)
    if raw is None:
        return None
    text = _as_text(raw)
    try:
        return spec.parse(text)
    except ValueError as err:
        origin = _origin(sources.get(spec.name))
        raise SettingsError(f"invalid value {text!r} for {spec.name}{origin}: {err}") from None


def _typed(parsed: Mapping[str, object], spec: SettingSpec[T]) -> T:
    """The value ``spec.parse`` produced for ``spec``: a ``T`` already, so it is only typed, not converted."""
    return cast(T, parsed[spec.name])


def _as_text(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)


def _origin(source: str | None) -> str:
    return f" (from {source})" if source else ""


def read_config_file(path: Path) -> dict[str, object]:
    """Read a TOML settings file into dotted names -> values.

    Raises:
        SettingsError: the file is missing, unreadable, not TOML, or holds an array or date value.
    """
    try:
        with path.open("rb") as fh:
            document = tomllib.load(fh)
    except OSError as err:
        raise SettingsError(f"cannot read config file {path}: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise SettingsError(f"config file {path} is not valid TOML: {err}") from None
    flat: dict[str, object] = {}

    def walk(prefix: str, table: Mapping[str, object]) -> None:
        for key, value in table.items():
            name = f"{prefix}{key}".replace("_", ".").replace("-", ".").lower()
            if isinstance(value, dict):
                walk(name + ".", value)
            elif isinstance(value, bool | int | float | str):
                flat[name] = value
            else:
                raise SettingsError(f"setting {name!r} in {path}: expected a string, number or boolean")

    walk("", document)
    return flat


def load_settings(
    flags: Mapping[str, str], env: Mapping[str, str], config_file: Path | None = None
) -> Settings:
    """Resolve settings with precedence flag > environment > file > default.

    ``flags`` maps dotted names to the values given on the command line; ``env`` is the process
    environment (only ``TIERLOG_*`` names that match a setting are read). Reads ``config_file``.
    Raises:
        SettingsError: as :func:`build_settings`, or an unreadable config file.
    """
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if config_file is not None:
        for name, value in read_config_file(config_file).items():
            values[name] = value
            sources[name] = f"config file {config_file}"
    for name in SETTINGS_TABLE:
        if env.get(env_name(name)) is not None:
            values[name] = env[env_name(name)]
            sources[name] = env_name(name)
    for name, value in flags.items():
        values[name] = value
        sources[name] = flag_name(name)
    return build_settings(values, sources)
