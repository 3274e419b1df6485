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
from urllib.parse import urlsplit

from tierlog.service.topic_configs import TOPIC_CONFIGS, check_combination, effective_configs
from tierlog.tiering.errors import InvalidRequestError

__all__ = [
    "SETTINGS_TABLE",
    "RemoteUri",
    "Settings",
    "SettingSpec",
    "SettingsError",
    "build_settings",
    "env_name",
    "flag_name",
    "load_settings",
]

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
class SettingSpec:
    """One broker setting."""

    name: str
    default: str | None
    doc: str
    parse: Callable[[str], object] = str
    topic_config: str | None = None


def _int(low: int, high: int) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError("not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _bool(raw: str) -> object:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def _url(raw: str) -> object:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return raw.strip().rstrip("/")


def _assignor(raw: str) -> object:
    if raw not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        raise ValueError("expected range, roundrobin, sticky or cooperative-sticky")
    return raw


def _level(raw: str) -> object:
    value = raw.strip().upper()
    if value not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return value


def _topic_default(topic_config: str, broker_name: str, doc: str) -> SettingSpec:
    spec = TOPIC_CONFIGS[topic_config]

    def parse(raw: str) -> object:
        try:
            return spec.parse(broker_name, raw)
        except InvalidRequestError as err:
            raise ValueError(err.message.split(": ", 1)[-1]) from None

    return SettingSpec(broker_name, spec.default, doc, parse, topic_config)


_TABLE: tuple[SettingSpec, ...] = (
    SettingSpec("data.dir", "./data", "directory holding the partition logs and the broker state"),
    SettingSpec("host", "127.0.0.1", "address the HTTP server binds"),
    SettingSpec("port", "8082", "TCP port of the HTTP server (0 picks a free one)", _int(0, 65535)),
    SettingSpec("advertised.url", None, "base URL of v3 `metadata.self` links (default http://host:port)",
                _url),
    SettingSpec("remote.uri", None,
                "remote tier: a local directory (default <data.dir>/remote) or s3://bucket/prefix"),
    SettingSpec("s3.endpoint.url", None, "S3 endpoint for s3:// remote URIs (default $AWS_ENDPOINT_URL)",
                _url),
    SettingSpec("remote.upload.concurrency", "4", "partitions uploading to the remote tier at the same time",
                _int(1, 1024)),
    SettingSpec("remote.upload.interval.ms", "10000",
                "how often the uploader looks for sealed segments besides when a segment rolls",
                _int(1, 2**31 - 1)),
    SettingSpec("remote.max.upload.interval.ms", "3600000",
                "roll an active segment whose oldest unuploaded data is this old (-1 never)",
                _int(-1, 2**63 - 1)),
    SettingSpec("remote.local.disk.budget.bytes", "-1",
                "refuse produce (503) to remote topics past this many local bytes while uploads are behind; "
                "-1 unlimited", _int(-1, 2**63 - 1)),
    SettingSpec("remote.retry.deadline.ms", "30000",
                "how long one object-store request is retried (capped, jittered backoff) before it fails",
                _int(0, 2**31 - 1)),
    SettingSpec("remote.cache.bytes", "268435456", "memory for cached chunks of remote segments",
                _int(0, 2**63 - 1)),
    SettingSpec("remote.restore.on.start", "false",
                "at start, recreate topics found in the remote tier that this broker does not have", _bool),
    SettingSpec("num.partitions", "1", "partitions of a topic created without a count", _int(1, 100_000)),
    SettingSpec("auto.create.topics.enable", "true", "create a topic on first produce", _bool),
    SettingSpec("max.request.size", "10485760", "largest HTTP request body in bytes", _int(1024, 2**31 - 1)),
    SettingSpec("log.retention.check.interval.ms", "300000",
                "how often retention runs over every partition", _int(1, 2**63 - 1)),
    SettingSpec("log.flush.scheduler.interval.ms", "1000",
                "how often flush.ms and segment.ms are checked", _int(1, 2**63 - 1)),
    SettingSpec("offsets.retention.minutes", "10080",
                "keep a memberless group's committed offsets this long", _int(1, 2**31 - 1)),
    SettingSpec("consumer.instance.timeout.ms", "300000",
                "delete a REST consumer instance unused this long", _int(1000, 2**31 - 1)),
    SettingSpec("group.default.assignor", "range",
                "assignment strategy of groups whose members ask for none (range, roundrobin, sticky)",
                _assignor),
    SettingSpec("logging.level", "INFO", "DEBUG, INFO, WARNING or ERROR (log lines go to stderr)", _level),
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

SETTINGS_TABLE: dict[str, SettingSpec] = {spec.name: spec for spec in _TABLE}


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
    remote_restore_on_start: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"data.dir={self.data_dir} listen={self.host}:{self.port} remote.uri={self.remote_uri} "
            f"s3.endpoint.url={self.s3_endpoint_url or '-'} num.partitions={self.num_partitions} "
            f"auto.create.topics.enable={str(self.auto_create_topics_enable).lower()}"
        )


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
    parsed: dict[str, object] = {}
    for name in values:
        if name not in SETTINGS_TABLE:
            raise SettingsError(f"unknown setting {name!r}{_origin(sources.get(name))}")
    for name, spec in SETTINGS_TABLE.items():
        raw = values.get(name, spec.default)
        if raw is None:
            parsed[name] = None
            continue
        text = _as_text(raw)
        try:
            parsed[name] = spec.parse(text)
        except ValueError as err:
            raise SettingsError(
                f"invalid value {text!r} for {name}{_origin(sources.get(name))}: {err}"
            ) from None
    data_dir = Path(str(parsed["data.dir"])).absolute()
    try:
        remote = _remote_uri(_opt(parsed["remote.uri"]), data_dir)
    except ValueError as err:
        origin = _origin(sources.get("remote.uri"))
        raise SettingsError(f"invalid value {parsed['remote.uri']!r} for remote.uri{origin}: {err}") from None
    endpoint = _opt(parsed["s3.endpoint.url"])
    if endpoint is None and os.environ.get("AWS_ENDPOINT_URL"):
        try:
            endpoint = str(_url(os.environ["AWS_ENDPOINT_URL"]))
        except ValueError as err:
            raise SettingsError(
                f"invalid AWS_ENDPOINT_URL {os.environ['AWS_ENDPOINT_URL']!r}: {err}"
            ) from None
    topic_defaults = {
        spec.topic_config: str(parsed[spec.name]) for spec in _TABLE if spec.topic_config is not None
    }
    try:
        check_combination(effective_configs(topic_defaults, {}))
    except InvalidRequestError as err:
        raise SettingsError(f"invalid log.* defaults: {err.message}") from None
    host = str(parsed["host"])
    port = int(str(parsed["port"]))
    return Settings(
        data_dir=data_dir,
        host=host,
        port=port,
        advertised_url=_opt(parsed["advertised.url"]) or f"http://{host}:{port}",
        remote_uri=remote,
        s3_endpoint_url=endpoint,
        num_partitions=int(str(parsed["num.partitions"])),
        auto_create_topics_enable=bool(parsed["auto.create.topics.enable"]),
        max_request_size=int(str(parsed["max.request.size"])),
        log_retention_check_interval_ms=int(str(parsed["log.retention.check.interval.ms"])),
        log_flush_scheduler_interval_ms=int(str(parsed["log.flush.scheduler.interval.ms"])),
        logging_level=str(parsed["logging.level"]),
        topic_defaults=MappingProxyType(topic_defaults),
        offsets_retention_minutes=int(str(parsed["offsets.retention.minutes"])),
        consumer_instance_timeout_ms=int(str(parsed["consumer.instance.timeout.ms"])),
        group_default_assignor=str(parsed["group.default.assignor"]),
        remote_upload_concurrency=int(str(parsed["remote.upload.concurrency"])),
        remote_upload_interval_ms=int(str(parsed["remote.upload.interval.ms"])),
        remote_max_upload_interval_ms=int(str(parsed["remote.max.upload.interval.ms"])),
        remote_local_disk_budget_bytes=int(str(parsed["remote.local.disk.budget.bytes"])),
        remote_cache_bytes=int(str(parsed["remote.cache.bytes"])),
        remote_retry_deadline_ms=int(str(parsed["remote.retry.deadline.ms"])),
        remote_restore_on_start=bool(parsed["remote.restore.on.start"]),
        sources=MappingProxyType(sources),
    )


def _opt(value: object) -> str | None:
    return None if value is None else str(value)


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
