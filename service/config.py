"""Broker settings: one table of names, defaults and parsers, read from flags, environment and a TOML file.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar, cast
from urllib.parse import urlsplit

from tierlog.service.topic_configs import TOPIC_CONFIGS, check_combination, effective_configs
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

ENV_PREFIX = "TIERLOG_"
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
class SettingSpec(Generic[T]):
    """One broker setting. ``parse`` turns its text into the typed value :class:`Settings` holds (raising
    ``ValueError`` with the reason); nothing converts that value again."""

    name: str
    default: str | None
    doc: str
    parse: Callable[[str], T]
    topic_config: str | None = None


def _text(raw: str) -> str:
    return raw


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError("not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def _url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return raw.strip().rstrip("/")


def _assignor(raw: str) -> str:
    if raw not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        raise ValueError("expected range, roundrobin, sticky or cooperative-sticky")
    return raw


def _level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return value


def _path(raw: str) -> Path:
    return Path(raw).absolute()


def _topic_default(topic_config: str, broker_name: str, doc: str) -> SettingSpec[str]:
    spec = TOPIC_CONFIGS[topic_config]

    def parse(raw: str) -> str:
        try:
            return spec.parse(broker_name, raw)
        except InvalidRequestError as err:
            raise ValueError(err.message.split(": ", 1)[-1]) from None

    return SettingSpec(broker_name, spec.default, doc, parse, topic_config)


DATA_DIR = SettingSpec(
    "data.dir", "./data", "directory holding the partition logs and the broker state", _path
)
HOST = SettingSpec("host", "127.0.0.1", "address the HTTP server binds", _text)
PORT = SettingSpec("port", "8082", "TCP port of the HTTP server (0 picks a free one)", _int(0, 65535))
ADVERTISED_URL = SettingSpec(
    "advertised.url", None, "base URL of v3 `metadata.self` links (default http://host:port)", _url
)
REMOTE_URI = SettingSpec(
    "remote.uri",
    None,
    "remote tier: a local directory (default <data.dir>/remote) or s3://bucket/prefix",
    _text,
)
S3_ENDPOINT_URL = SettingSpec(
    "s3.endpoint.url", None, "S3 endpoint for s3:// remote URIs (default $AWS_ENDPOINT_URL)", _url
)
REMOTE_UPLOAD_CONCURRENCY = SettingSpec(
    "remote.upload.concurrency",
    "4",
    "partitions uploading to the remote tier at the same time",
    _int(1, 1024),
)
REMOTE_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.upload.interval.ms",
    "10000",
    "how often the uploader looks for sealed segments besides when a segment rolls",
    _int(1, 2**31 - 1),
)
REMOTE_MAX_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.max.upload.interval.ms",
    "3600000",
    "roll an active segment whose oldest unuploaded data is this old (-1 never)",
    _int(-1, 2**63 - 1),
)
REMOTE_LOCAL_DISK_BUDGET_BYTES = SettingSpec(
    "remote.local.disk.budget.bytes",
    "-1",
    "refuse produce (503) to remote topics past this many local bytes while uploads are behind; -1 unlimited",
    _int(-1, 2**63 - 1),
)
REMOTE_RETRY_DEADLINE_MS = SettingSpec(
    "remote.retry.deadline.ms",
    "30000",
    "how long one object-store request is retried (capped, jittered backoff) before it fails",
    _int(0, 2**31 - 1),
)
S3_CONNECT_TIMEOUT_MS = SettingSpec(
    "s3.connect.timeout.ms",
    "10000",
    "how long one attempt waits for a TCP connection to the S3 endpoint",
    _int(1, 2**31 - 1),
)
S3_READ_TIMEOUT_MS = SettingSpec(
    "s3.read.timeout.ms",
    "30000",
    "how long one attempt waits for the next bytes of an S3 response",
    _int(1, 2**31 - 1),
)
REMOTE_CACHE_BYTES = SettingSpec(
    "remote.cache.bytes", "268435456", "memory for cached chunks of remote segments", _int(0, 2**63 - 1)
)
REMOTE_RESTORE_ON_START = SettingSpec(
    "remote.restore.on.start",
    "false",
    "at start, recreate topics found in the remote tier that this broker does not have",
    _bool,
)
NUM_PARTITIONS = SettingSpec(
    "num.partitions", "1", "partitions of a topic created without a count", _int(1, 100_000)
)
AUTO_CREATE_TOPICS_ENABLE = SettingSpec(
    "auto.create.topics.enable", "true", "create a topic on first produce", _bool
)
MAX_REQUEST_SIZE = SettingSpec(
    "max.request.size", "10485760", "largest HTTP request body in bytes", _int(1024, 2**31 - 1)
)
LOG_RETENTION_CHECK_INTERVAL_MS = SettingSpec(
    "log.retention.check.interval.ms",
    "300000",
    "how often retention runs over every partition",
    _int(1, 2**63 - 1),
)
LOG_FLUSH_SCHEDULER_INTERVAL_MS = SettingSpec(
    "log.flush.scheduler.interval.ms",
    "1000",
    "how often flush.ms and segment.ms are checked",
    _int(1, 2**63 - 1),
)
OFFSETS_RETENTION_MINUTES = SettingSpec(
    "offsets.retention.minutes",
    "10080",
    "keep a memberless group's committed offsets this long",
    _int(1, 2**31 - 1),
)
CONSUMER_INSTANCE_TIMEOUT_MS = SettingSpec(
    "consumer.instance.timeout.ms",
    "300000",
    "delete a REST consumer instance unused this long",
    _int(1000, 2**31 - 1),
)
GROUP_DEFAULT_ASSIGNOR = SettingSpec(
    "group.default.assignor",
    "range",
    "assignment strategy of groups whose members ask for none (range, roundrobin, sticky)",
    _assignor,
)
LOGGING_LEVEL = SettingSpec(
    "logging.level", "INFO", "DEBUG, INFO, WARNING or ERROR (log lines go to stderr)", _level
)
CONNECTIONS_MAX_IDLE_MS = SettingSpec(
    "connections.max.idle.ms",
    "600000",
    "close a client connection that has no request in progress for this long",
    _int(100, 2**31 - 1),
)
REQUEST_READ_TIMEOUT_MS = SettingSpec(
    "request.read.timeout.ms",
    "30000",
    "close a connection whose request headers and body are not all received this long after its first byte",
    _int(100, 2**31 - 1),
)
MAX_CONNECTIONS = SettingSpec(
    "max.connections",
    "512",
    "most client connections open at once; more are answered 503 (50301) and closed. Keep it well "
    "below the process's file descriptor limit, which segments share",
    _int(1, 2**20),
)
REST_PRODUCE_MAX_RECORDS = SettingSpec(
    "rest.produce.max.records",
    "100000",
    "most records in one REST produce request; more are refused with 422 before any batch is built",
    _int(1, 2**31 - 1),
)
REST_PRODUCE_CONVERSION_MAX_BYTES = SettingSpec(
    "rest.produce.conversion.max.bytes",
    "16777216",
    "bytes of REST JSON produce bodies converted to batches at once; a body that does not fit is "
    "answered 503 (50301, retriable)",
    _int(1, 2**63 - 1),
)
QUEUED_MAX_REQUEST_BYTES = SettingSpec(
    "queued.max.request.bytes",
    "67108864",
    "bytes of acks=0 native produce bodies waiting for their background append; a body that does not "
    "fit is answered 503 (50301, retriable)",
    _int(1, 2**63 - 1),
)
LOG_IO_THREADS = SettingSpec(
    "log.io.threads",
    "8",
    "worker threads for partition log I/O (appends, local reads, flushes, retention), apart from other work",
    _int(1, 1024),
)
ACCEPT_ERROR_LOG_INTERVAL_MS = SettingSpec(
    "accept.error.log.interval.ms",
    "10000",
    "log failures to accept a connection (EMFILE, ENFILE) at most once per this interval",
    _int(1, 2**31 - 1),
)

BROKER_ID = SettingSpec(
    "broker.id", "0", "this broker's id in its cluster (unique per broker)", _int(0, 2**31 - 1)
)
BROKER_RACK = SettingSpec(
    "broker.rack", None, "rack (or zone) of this broker; replicas of a partition spread over racks", _text
)
METADATA_URI = SettingSpec(
    "metadata.uri",
    None,
    "cluster metadata store: etcd://host:port[,host:port...]/prefix; unset runs one broker on local metadata",
    _text,
)
DEFAULT_REPLICATION_FACTOR = SettingSpec(
    "default.replication.factor",
    "1",
    "replicas of each partition of a topic created without replication_factor",
    _int(1, 32767),
)
AUTO_LEADER_REBALANCE_ENABLE = SettingSpec(
    "auto.leader.rebalance.enable",
    "true",
    "the controller moves leadership back to each partition's preferred (first) replica when it can",
    _bool,
)
LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS = SettingSpec(
    "leader.imbalance.check.interval.seconds",
    "300",
    "how often the controller looks for partitions not led by their preferred replica",
    _int(1, 2**31 - 1),
)
BROKER_SESSION_TIMEOUT_MS = SettingSpec(
    "broker.session.timeout.ms",
    "9000",
    "a broker (and the controller) whose metadata-store lease is not renewed for this long is gone",
    _int(2000, 2**31 - 1),
)
OFFSETS_TOPIC_NUM_PARTITIONS = SettingSpec(
    "offsets.topic.num.partitions",
    "1",
    "partitions of __consumer_offsets when it is created; a group's coordinator leads partition "
    "hash(group) % count (Kafka's default is 50)",
    _int(1, 1000),
)
BROKER_HEARTBEAT_INTERVAL_MS = SettingSpec(
    "broker.heartbeat.interval.ms",
    "2000",
    "how often a broker renews its metadata-store lease",
    _int(100, 2**31 - 1),
)

_TABLE: tuple[SettingSpec[Any], ...] = (
    DATA_DIR,
    HOST,
    PORT,
    ADVERTISED_URL,
    REMOTE_URI,
    S3_ENDPOINT_URL,
    REMOTE_UPLOAD_CONCURRENCY,
    REMOTE_UPLOAD_INTERVAL_MS,
    REMOTE_MAX_UPLOAD_INTERVAL_MS,
    REMOTE_LOCAL_DISK_BUDGET_BYTES,
    REMOTE_RETRY_DEADLINE_MS,
    S3_CONNECT_TIMEOUT_MS,
    S3_READ_TIMEOUT_MS,
    REMOTE_CACHE_BYTES,
    REMOTE_RESTORE_ON_START,
    NUM_PARTITIONS,
    AUTO_CREATE_TOPICS_ENABLE,
    MAX_REQUEST_SIZE,
    LOG_RETENTION_CHECK_INTERVAL_MS,
    LOG_FLUSH_SCHEDULER_INTERVAL_MS,
    OFFSETS_RETENTION_MINUTES,
    CONSUMER_INSTANCE_TIMEOUT_MS,
    GROUP_DEFAULT_ASSIGNOR,
    LOGGING_LEVEL,
    CONNECTIONS_MAX_IDLE_MS,
    REQUEST_READ_TIMEOUT_MS,
    MAX_CONNECTIONS,
    ACCEPT_ERROR_LOG_INTERVAL_MS,
    LOG_IO_THREADS,
    REST_PRODUCE_MAX_RECORDS,
    REST_PRODUCE_CONVERSION_MAX_BYTES,
    QUEUED_MAX_REQUEST_BYTES,
    BROKER_ID,
    BROKER_RACK,
    METADATA_URI,
    DEFAULT_REPLICATION_FACTOR,
    AUTO_LEADER_REBALANCE_ENABLE,
    LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS,
    BROKER_SESSION_TIMEOUT_MS,
    BROKER_HEARTBEAT_INTERVAL_MS,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    _topic_default("segment.bytes", "log.segment.bytes", "default segment.bytes"),
    _topic_default("segment.ms", "log.roll.ms", "default segment.ms"),
    _topic_default("segment.index.bytes", "log.index.size.max.bytes", "default segment.index.bytes"),
    _topic_default("index.interval.bytes", "log.index.interval.bytes", "default index.interval.bytes"),
    _topic_default("retention.ms", "log.retention.ms", "default retention.ms"),
    _topic_default("retention.bytes", "log.retention.bytes", "default retention.bytes"),
    _topic_default("local.retention.ms", "log.local.retention.ms", "default local.retention.ms"),
    _topic_default("local.retention.bytes", "log.local.retention.bytes", "default local.retention.bytes"),
    _topic_default("flush.messages", "log.flush.interval.messages", "default flush.messages"),
    _topic_default("flush.ms", "log.flush.interval.ms", "default flush.ms"),
    _topic_default("max.message.bytes", "message.max.bytes", "default max.message.bytes"),
    _topic_default("message.timestamp.type", "log.message.timestamp.type", "default message.timestamp.type"),
    _topic_default("cleanup.policy", "log.cleanup.policy", "default cleanup.policy"),
    _topic_default("compression.type", "compression.type", "default compression.type"),
    _topic_default("file.delete.delay.ms", "log.segment.delete.delay.ms", "default file.delete.delay.ms"),
)  # fmt: skip

SETTINGS_TABLE: dict[str, SettingSpec[Any]] = {spec.name: spec for spec in _TABLE}


def flag_name(name: str) -> str:
    """``log.segment.bytes`` -> ``--log-segment-bytes``. Pure."""
    return "--" + name.replace(".", "-")


def env_name(name: str) -> str:
    """``log.segment.bytes`` -> ``TIERLOG_LOG_SEGMENT_BYTES``. Pure."""
    return ENV_PREFIX + name.replace(".", "_").upper()


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
    metadata_uri: MetadataUri | None = None  # None: one broker on local metadata (the embedded default)
    default_replication_factor: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    offsets_topic_num_partitions: int = 1
    sources: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"data.dir={self.data_dir} listen={self.host}:{self.port} remote.uri={self.remote_uri} "
            f"s3.endpoint.url={self.s3_endpoint_url or '-'} num.partitions={self.num_partitions} "
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
    parsed: dict[str, object] = {spec.name: _parse(spec, values, sources) for spec in _TABLE}

    def get(spec: SettingSpec[T]) -> T:
        return _typed(parsed, spec)

    def optional(spec: SettingSpec[T]) -> T | None:
        return None if parsed[spec.name] is None else get(spec)

    data_dir = get(DATA_DIR)
    raw_remote = optional(REMOTE_URI)
    try:
        remote = _remote_uri(raw_remote, data_dir)
    except ValueError as err:
        origin = _origin(sources.get(REMOTE_URI.name))
        raise SettingsError(f"invalid value {raw_remote!r} for remote.uri{origin}: {err}") from None
    endpoint = optional(S3_ENDPOINT_URL)
    if endpoint is None and os.environ.get("AWS_ENDPOINT_URL"):
        try:
            endpoint = _url(os.environ["AWS_ENDPOINT_URL"])
        except ValueError as err:
            raise SettingsError(
                f"invalid AWS_ENDPOINT_URL {os.environ['AWS_ENDPOINT_URL']!r}: {err}"
            ) from None
    topic_defaults = {spec.topic_config: get(spec) for spec in _TABLE if spec.topic_config is not None}
    try:
        check_combination(effective_configs(topic_defaults, {}))
    except InvalidRequestError as err:
        raise SettingsError(f"invalid log.* defaults: {err.message}") from None
    host, port = get(HOST), get(PORT)
    raw_metadata = optional(METADATA_URI)
    try:
        metadata_uri = parse_metadata_uri(raw_metadata) if raw_metadata and raw_metadata.strip() else None
    except ValueError as err:
        origin = _origin(sources.get(METADATA_URI.name))
        raise SettingsError(f"invalid value {raw_metadata!r} for metadata.uri{origin}: {err}") from None
    session_ms, heartbeat_ms = get(BROKER_SESSION_TIMEOUT_MS), get(BROKER_HEARTBEAT_INTERVAL_MS)
    if heartbeat_ms * 2 > session_ms:
        raise SettingsError(
            f"broker.heartbeat.interval.ms={heartbeat_ms} must be at most half of "
            f"broker.session.timeout.ms={session_ms}"
        )
    return Settings(
        data_dir=data_dir,
        host=host,
        port=port,
        advertised_url=optional(ADVERTISED_URL) or f"http://{host}:{port}",
        remote_uri=remote,
        s3_endpoint_url=endpoint,
        num_partitions=get(NUM_PARTITIONS),
        auto_create_topics_enable=get(AUTO_CREATE_TOPICS_ENABLE),
        max_request_size=get(MAX_REQUEST_SIZE),
        log_retention_check_interval_ms=get(LOG_RETENTION_CHECK_INTERVAL_MS),
        log_flush_scheduler_interval_ms=get(LOG_FLUSH_SCHEDULER_INTERVAL_MS),
        logging_level=get(LOGGING_LEVEL),
        topic_defaults=MappingProxyType(topic_defaults),
        offsets_retention_minutes=get(OFFSETS_RETENTION_MINUTES),
        consumer_instance_timeout_ms=get(CONSUMER_INSTANCE_TIMEOUT_MS),
        group_default_assignor=get(GROUP_DEFAULT_ASSIGNOR),
        remote_upload_concurrency=get(REMOTE_UPLOAD_CONCURRENCY),
        remote_upload_interval_ms=get(REMOTE_UPLOAD_INTERVAL_MS),
        remote_max_upload_interval_ms=get(REMOTE_MAX_UPLOAD_INTERVAL_MS),
        remote_local_disk_budget_bytes=get(REMOTE_LOCAL_DISK_BUDGET_BYTES),
        remote_cache_bytes=get(REMOTE_CACHE_BYTES),
        remote_retry_deadline_ms=get(REMOTE_RETRY_DEADLINE_MS),
        s3_connect_timeout_ms=get(S3_CONNECT_TIMEOUT_MS),
        s3_read_timeout_ms=get(S3_READ_TIMEOUT_MS),
        remote_restore_on_start=get(REMOTE_RESTORE_ON_START),
        connections_max_idle_ms=get(CONNECTIONS_MAX_IDLE_MS),
        request_read_timeout_ms=get(REQUEST_READ_TIMEOUT_MS),
        max_connections=get(MAX_CONNECTIONS),
        accept_error_log_interval_ms=get(ACCEPT_ERROR_LOG_INTERVAL_MS),
        log_io_threads=get(LOG_IO_THREADS),
        rest_produce_max_records=get(REST_PRODUCE_MAX_RECORDS),
        rest_produce_conversion_max_bytes=get(REST_PRODUCE_CONVERSION_MAX_BYTES),
        queued_max_request_bytes=get(QUEUED_MAX_REQUEST_BYTES),
        broker_id=get(BROKER_ID),
        broker_rack=optional(BROKER_RACK) or None,
        metadata_uri=metadata_uri,
        default_replication_factor=get(DEFAULT_REPLICATION_FACTOR),
        auto_leader_rebalance_enable=get(AUTO_LEADER_REBALANCE_ENABLE),
        leader_imbalance_check_interval_seconds=get(LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS),
        broker_session_timeout_ms=session_ms,
        broker_heartbeat_interval_ms=heartbeat_ms,
        offsets_topic_num_partitions=get(OFFSETS_TOPIC_NUM_PARTITIONS),
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
