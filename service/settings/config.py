"""Broker settings: the table (:mod:`~tierlog.service.settings.table`) read from flags, env and a file.

Every setting has a dotted name (``log.segment.bytes``), a flag (``--log-segment-bytes``) and an
environment variable (``TIERLOG_LOG_SEGMENT_BYTES``). Precedence is flag > environment > file > default.
In the TOML file a key may be written dotted and quoted (``"log.segment.bytes" = 1024``), as nested
tables (``[log] segment.bytes = 1024``) or with ``_``/``-`` for dots (``data_dir = "/var/lib/tierlog"``).
Settings named ``log.*`` (and ``message.max.bytes``, ``compression.type``) are the defaults of the topic
configs they stand for; they are validated by the same rules as topic configs. The file may also be a
Kafka-style ``server.properties`` (:mod:`~tierlog.service.settings.properties`): Kafka's names map to ours.

Each row of the table fills one attribute of :class:`Settings` (or of its ``security``), after the
cross-field rules of :mod:`~tierlog.service.settings.rules` have checked and completed the parsed values.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from tierlog.service.security.redact import without_userinfo
from tierlog.service.security.settings import SECURITY_TABLE, SecuritySettings
from tierlog.service.settings import properties
from tierlog.service.settings import table as t
from tierlog.service.settings.rules import RULES, topic_defaults
from tierlog.service.settings.spec import ParsedSettings, SettingsError
from tierlog.service.settings.table import SETTINGS_TABLE, SettingSpec, env_name, flag_name
from tierlog.service.settings.uris import MetadataUri, RemoteUri, parse_metadata_uri

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
    "read_settings_file",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The broker's resolved settings: one attribute per row of the table (its name with ``_`` for ``.``
    unless the row names another), the topic defaults by topic config, the security settings and where
    each value came from. Build with :func:`build_settings` or :func:`load_settings`; the defaults live in
    the table only."""

    data_dir: Path
    host: str
    port: int
    advertised_url: str
    kafka_listener: tuple[str, int] | None
    kafka_advertised_listener: tuple[str, int] | None
    socket_request_max_bytes: int
    connections_max_reauth_ms: int
    remote_uri: RemoteUri
    s3_endpoint_url: str | None
    num_partitions: int
    auto_create_topics_enable: bool
    max_request_size: int
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    logging_level: str
    offsets_retention_minutes: int
    consumer_instance_timeout_ms: int
    group_default_assignor: str
    group_consumer_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    remote_upload_concurrency: int
    remote_upload_interval_ms: int
    remote_max_upload_interval_ms: int
    remote_local_disk_budget_bytes: int
    remote_cache_bytes: int
    remote_retry_deadline_ms: int
    s3_connect_timeout_ms: int
    s3_read_timeout_ms: int
    remote_restore_on_start: bool
    connections_max_idle_ms: int
    request_read_timeout_ms: int
    max_connections: int
    http_cors_allowed_origins: tuple[str, ...]
    http_cors_allow_credentials: bool
    http_cors_max_age_seconds: int
    accept_error_log_interval_ms: int
    log_io_threads: int
    rest_produce_max_records: int
    rest_produce_conversion_max_bytes: int
    queued_max_request_bytes: int
    broker_id: int
    broker_rack: str | None
    replica_selector_class: str
    metadata_uri: MetadataUri | None  # None: a cluster of one on <data-dir>/cluster-metadata.json
    default_replication_factor: int
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    broker_session_timeout_ms: int
    broker_heartbeat_interval_ms: int
    offsets_topic_num_partitions: int
    remote_fetch_readahead_chunks: int
    remote_log_reader_threads: int
    remote_upload_part_threads: int
    remote_upload_batch_bytes: int
    remote_upload_batch_segments: int
    remote_upload_file_concurrency: int
    remote_upload_indexes_packed: bool
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_backoff_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    topic_defaults: Mapping[str, str]
    security: SecuritySettings
    sources: Mapping[str, str]

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"data.dir={self.data_dir} listen={self.host}:{self.port} remote.uri={self.remote_uri} "
            f"s3.endpoint.url={without_userinfo(self.s3_endpoint_url) if self.s3_endpoint_url else '-'} "
            f"num.partitions={self.num_partitions} "
            f"auto.create.topics.enable={str(self.auto_create_topics_enable).lower()}"
        )


def build_settings(values: Mapping[str, object], sources: Mapping[str, str] | None = None) -> Settings:
    """Resolve settings from ``values`` (dotted name -> raw value); missing names take their defaults.

    ``sources`` names where each value came from, for error messages. Each value is parsed by its row,
    then the cross-field rules (:data:`~tierlog.service.settings.rules.RULES`) run in order. Pure apart from
    reading ``AWS_ENDPOINT_URL`` when ``s3.endpoint.url`` is unset. Raises:
        SettingsError: an unknown name, an invalid value or combination (one line naming the setting and
            its source).
    """
    sources = dict(sources or {})
    for name in values:
        if name not in SETTINGS_TABLE:
            raise SettingsError(f"unknown setting {name!r}{_origin(sources.get(name))}")
    parsed = ParsedSettings({spec.name: _parse(spec, values, sources) for spec in t.TABLE})
    for rule in RULES:
        rule(parsed)
    return Settings(
        **_attributes(parsed, t.PROCESS_TABLE + t.CLUSTER_TABLE),
        topic_defaults=MappingProxyType(topic_defaults(parsed)),
        security=SecuritySettings(**_attributes(parsed, SECURITY_TABLE)),
        sources=MappingProxyType(sources),
    )


def _attributes(parsed: ParsedSettings, table: tuple[SettingSpec[Any], ...]) -> dict[str, Any]:
    """The attribute values the rows of ``table`` fill, by attribute name."""
    return {spec.attr: parsed.get(spec) for spec in table if spec.attr is not None}


def _parse(spec: SettingSpec[T], values: Mapping[str, object], sources: Mapping[str, str]) -> T | None:
    """Parse the one value of ``spec`` (its default when ``values`` has none). Raises SettingsError, showing
    the value without a URL's ``user:password@``."""
    raw = values.get(spec.name, spec.default)
    if raw is None:
        return None
    text = _as_text(raw)
    try:
        return spec.parse(text)
    except ValueError as err:
        origin = _origin(sources.get(spec.name))
        raise SettingsError(f"invalid value {_shown(text)!r} for {spec.name}{origin}: {err}") from None


def _shown(text: str) -> str:
    try:
        return without_userinfo(text)
    except ValueError:  # not even a URL's syntax: nothing to hide in it
        return text


def _as_text(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)


def _origin(source: str | None) -> str:
    return f" (from {source})" if source else ""


def read_settings_file(path: Path) -> dict[str, tuple[object, str]]:
    """Read a settings file, TOML or Kafka-style properties, into dotted name -> (value, the name the file
    gave it as: a Kafka name for a mapped one, see :mod:`~tierlog.service.settings.properties`).

    A name ending in ``.properties`` is read as properties; any other as TOML, or as properties when it is
    not valid TOML but reads as a properties file.
    Raises:
        SettingsError: the file is missing or unreadable, neither format, or gives an unknown name (naming
            the closest known one) or a value of a type no setting takes.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise SettingsError(f"cannot read config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise SettingsError(f"config file {path} is not UTF-8 text: {err}") from None
    if path.suffix != ".properties":
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            if not properties.looks_like_properties(text):
                raise SettingsError(
                    f"config file {path} is not valid TOML: {err} (nor a Kafka-style properties file; "
                    "a file named *.properties is read as one)"
                ) from None
        else:
            return {name: (value, name) for name, value in _flatten(path, document).items()}
    try:
        return dict(properties.map_kafka_names(properties.parse(text), SETTINGS_TABLE))
    except properties.PropertiesError as err:
        raise SettingsError(f"config file {path}: {err}") from None


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
    return _flatten(path, document)


def _flatten(path: Path, document: Mapping[str, object]) -> dict[str, object]:
    """A parsed TOML document as dotted names -> values. Raises SettingsError for an array or a date."""
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
    environment (only ``TIERLOG_*`` names that match a setting are read). Reads ``config_file``: TOML or a
    Kafka-style ``server.properties`` (:func:`read_settings_file`).
    Raises:
        SettingsError: as :func:`build_settings`, or an unreadable config file.
    """
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if config_file is not None:
        for name, (value, given) in read_settings_file(config_file).items():
            values[name] = value
            sources[name] = f"config file {config_file}" + (f", as {given}" if given != name else "")
    for name in SETTINGS_TABLE:
        if env.get(env_name(name)) is not None:
            values[name] = env[env_name(name)]
            sources[name] = env_name(name)
    for name, value in flags.items():
        values[name] = value
        sources[name] = flag_name(name)
    return build_settings(values, sources)
