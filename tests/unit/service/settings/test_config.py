"""Broker settings: precedence, TOML shapes, validation messages naming the setting and its source."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest

from tierlog.service.security.settings import SecuritySettings
from tierlog.service.settings import table as settings_table
from tierlog.service.settings.config import (
    SETTINGS_TABLE,
    Settings,
    SettingsError,
    SettingSpec,
    build_settings,
    env_name,
    flag_name,
    load_settings,
)


def test_defaults(tmp_path: Path) -> None:
    settings = build_settings({"data.dir": str(tmp_path)})
    assert settings.port == 8082
    assert settings.host == "127.0.0.1"
    assert settings.num_partitions == 1
    assert settings.auto_create_topics_enable is True
    assert settings.remote_uri.scheme == "file"
    assert settings.remote_uri.path == tmp_path / "remote"
    assert settings.advertised_url == "http://127.0.0.1:8082"
    assert settings.topic_defaults["segment.bytes"] == "1073741824"
    assert settings.topic_defaults["cleanup.policy"] == "delete"
    assert settings.log_retention_check_interval_ms == 300000


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    config = tmp_path / "tierlog.toml"
    config.write_text(
        'port = 9001\nnum_partitions = 4\n[log]\n"segment.bytes" = 2048\nretention.ms = 1000\n',
        encoding="utf-8",
    )
    env = {"TIERLOG_PORT": "9002", "TIERLOG_LOG_SEGMENT_BYTES": "4096", "TIERLOG_UNRELATED": "x"}
    settings = load_settings({"port": "9003"}, env, config)
    assert settings.port == 9003
    assert settings.topic_defaults["segment.bytes"] == "4096"
    assert settings.num_partitions == 4
    assert settings.topic_defaults["retention.ms"] == "1000"
    assert settings.sources["port"] == "--port"
    assert settings.sources["log.segment.bytes"] == "TIERLOG_LOG_SEGMENT_BYTES"
    assert settings.sources["num.partitions"].startswith("config file")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"log.segment.bytes": "13"}, "log.segment.bytes"),
        ({"port": "http"}, "port"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"remote.uri": "ftp://host/x"}, "remote.uri"),
        ({"remote.uri": "s3://A_Bucket/x"}, "S3 bucket"),
        ({"s3.endpoint.url": "localhost:9000"}, "s3.endpoint.url"),
        ({"log.message.timestamp.type": "Now"}, "log.message.timestamp.type"),
        ({"log.local.retention.ms": "2000", "log.retention.ms": "1000"}, "local.retention.ms"),
        ({"no.such.setting": "1"}, "no.such.setting"),
    ],
)
def test_invalid_settings_name_the_setting(values: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        build_settings(values, {name: flag_name(name) for name in values})
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_key_in_file_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("colour = 'blue'\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"unknown setting 'colour' \(from config file .*bad.toml\)"):
        load_settings({}, {}, config)


def test_unparseable_file(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text("port = = 1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({}, {}, config)
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings({}, {}, tmp_path / "missing.toml")


def test_s3_remote_and_endpoint_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000/")
    settings = build_settings({"remote.uri": "s3://tier-bucket/some/prefix/"})
    assert str(settings.remote_uri) == "s3://tier-bucket/some/prefix"
    assert settings.remote_uri.bucket == "tier-bucket"
    assert settings.s3_endpoint_url == "http://127.0.0.1:5000"
    explicit = build_settings({"remote.uri": "s3://tier-bucket", "s3.endpoint.url": "https://s3.example"})
    assert explicit.s3_endpoint_url == "https://s3.example"


def test_file_uri_and_relative_path(tmp_path: Path) -> None:
    assert build_settings({"remote.uri": f"file://{tmp_path}/r"}).remote_uri.path == tmp_path / "r"
    assert build_settings({"remote.uri": "rel/dir"}).remote_uri.path == Path("rel/dir").absolute()


def test_every_setting_has_flag_and_env_names() -> None:
    for name in SETTINGS_TABLE:
        assert flag_name(name).startswith("--") and "." not in flag_name(name)
        assert env_name(name).startswith("TIERLOG_") and env_name(name).isupper()


def test_parsers_hand_over_the_types_settings_declare(tmp_path: Path) -> None:
    """Every value is parsed once, by its setting's parser, into the type of its ``Settings`` field."""
    values: dict[str, object] = {name: spec.default for name, spec in SETTINGS_TABLE.items()}
    values |= {
        "data.dir": str(tmp_path),
        "advertised.url": "http://h:1/",
        "s3.endpoint.url": "http://s3:9",
        "broker.rack": "r1",
    }
    settings = build_settings(values)
    hints = get_type_hints(Settings)
    checked = []
    for f in dataclasses.fields(Settings):
        hint = hints[f.name]
        options = get_args(hint) if isinstance(hint, types.UnionType) else (hint,)  # `str | None`
        kinds = [k for k in options if k in (int, bool, str, Path)]
        if kinds:
            value = getattr(settings, f.name)
            assert isinstance(value, tuple(kinds)) and (bool in kinds or type(value) is not bool), f.name
            checked.append(f.name)
    assert len(checked) >= 20
    assert (settings.data_dir, settings.advertised_url, settings.port) == (tmp_path, "http://h:1", 8082)


def test_metadata_uris_name_etcd_endpoints_or_a_local_file(tmp_path: Path) -> None:
    etcd = build_settings({"metadata.uri": "etcd://10.0.0.1:2379,10.0.0.2:2379/prod/tierlog"}).metadata_uri
    assert etcd is not None
    assert (etcd.scheme, etcd.endpoints, etcd.prefix) == (
        "etcd",
        (("10.0.0.1", 2379), ("10.0.0.2", 2379)),
        "prod/tierlog",
    )
    local = build_settings({"metadata.uri": f"file://{tmp_path}/meta.json"}).metadata_uri
    assert local is not None and (local.scheme, local.path) == ("file", tmp_path / "meta.json")
    assert build_settings({}).metadata_uri is None
    for bad in ("etcd://nohost/x", "file://relative/x", "file:///dir/", "zk://h:1/x", "etcd://h:1/a b"):
        with pytest.raises(SettingsError, match=r"metadata\.uri"):
            build_settings({"metadata.uri": bad})


@pytest.mark.parametrize(
    ("cls", "rows", "besides"),
    [
        (
            Settings,
            settings_table.PROCESS_TABLE + settings_table.CLUSTER_TABLE,
            {"topic_defaults", "security", "sources"},
        ),
        (SecuritySettings, settings_table.SECURITY_TABLE, set()),
    ],
)
def test_each_row_fills_one_attribute_of_its_type(
    cls: type[object], rows: tuple[SettingSpec[Any], ...], besides: set[str]
) -> None:
    """The table and the settings classes agree: one attribute per row, named by the row, of the type its
    parser returns (checked on the default and, for an unset default, on a value the parser takes)."""
    attributes = [spec.attr for spec in rows if spec.attr is not None]
    assert len(attributes) == len(rows)
    assert sorted(f.name for f in dataclasses.fields(cls)) == sorted([*attributes, *besides])  # type: ignore[arg-type]
    hints = get_type_hints(cls)
    examples = {
        "advertised.url": "http://h:1",
        "s3.endpoint.url": "http://s3:9",
        "remote.uri": "s3://bucket-1",
        "metadata.uri": "etcd://h:1/x",
        "plaintext.port": "1",
        "authentication.failure.address.limit": "100",
        "kafka.advertised.listener": "kafka.example:9092",
    }
    for spec in rows:
        assert spec.attr == (spec.attribute or spec.name.replace(".", "_"))
        text = spec.default if spec.default is not None else examples.get(spec.name, "/a.pem")
        value = spec.parse(text)
        hint = hints[spec.attr]
        options = get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds = tuple(get_origin(k) or k for k in options if k is not type(None))
        assert value is None or isinstance(value, kinds), spec.name


def test_topic_defaults_fill_no_attribute() -> None:
    assert all(spec.attr is None and spec.topic_config for spec in settings_table.TOPIC_DEFAULTS_TABLE)


def test_cross_field_rules_derive_and_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    tls = build_settings({"ssl.certfile": "/c.pem", "ssl.keyfile": "/k.pem", "port": "9443"})
    assert tls.advertised_url == "https://127.0.0.1:9443"
    assert build_settings({"advertised.url": "http://lb:80/"}).advertised_url == "http://lb:80"
    with pytest.raises(SettingsError, match=r"^broker\.heartbeat\.interval\.ms=5000 must be at most half"):
        build_settings({"broker.heartbeat.interval.ms": "5000"})
    monkeypatch.setenv("AWS_ENDPOINT_URL", "s3.local")
    with pytest.raises(SettingsError, match=r"^invalid AWS_ENDPOINT_URL 's3\.local': expected an http"):
        build_settings({})
    assert build_settings({"s3.endpoint.url": "http://s3:9"}).s3_endpoint_url == "http://s3:9"


def test_kip848_and_kip392_settings(tmp_path: Path) -> None:
    settings = build_settings({"data.dir": str(tmp_path)})
    assert (settings.group_consumer_session_timeout_ms, settings.group_consumer_heartbeat_interval_ms) == (
        45000,
        5000,
    )
    assert settings.replica_selector_class == "leader"
    kafka_name = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    chosen = build_settings({"data.dir": str(tmp_path), "replica.selector.class": kafka_name})
    assert chosen.replica_selector_class == "rack-aware"
    with pytest.raises(SettingsError, match=r"replica\.selector\.class"):
        build_settings({"data.dir": str(tmp_path), "replica.selector.class": "closest"})
    with pytest.raises(SettingsError, match=r"must be less than group\.consumer\.session\.timeout\.ms"):
        build_settings(
            {
                "data.dir": str(tmp_path),
                "group.consumer.session.timeout.ms": "2000",
                "group.consumer.heartbeat.interval.ms": "2000",
            }
        )
