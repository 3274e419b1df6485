"""Kafka-style server.properties: Java's properties syntax, Kafka's names mapped to ours, and the file read
through load_settings beside TOML (detected by name or by content, with flag > env > file precedence)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.settings import properties
from tierlog.service.settings.config import SETTINGS_TABLE, SettingsError, load_settings
from tierlog.service.settings.properties import PropertiesError, looks_like_properties, map_kafka_names


def test_separators_comments_and_blank_lines() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "a=1\n"
        "b = 2\n"
        "c: 3\n"
        "d 4\n"
        "   e   =   five and more  \n"
        "f\n"
        "g=\n"
        "a=last wins\n"
    )
    assert properties.parse(text) == {
        "a": "last wins",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "five and more  ",
        "f": "",
        "g": "",
    }


def test_continuation_lines_drop_the_leading_blanks_of_the_next_line() -> None:
    text = "listeners=PLAINTEXT://:9092,\\\n    CONTROLLER://:9093\nnext=1\n"
    assert properties.parse(text) == {"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "next": "1"}
    # an even number of backslashes is an escaped backslash, not a continuation
    assert properties.parse("path=C:\\\\\nother=2\n") == {"path": "C:\\", "other": "2"}
    # a comment line inside a continuation is part of the value
    assert properties.parse("a=1\\\n# 2\n") == {"a": "1# 2"}


def test_escapes_in_keys_and_values() -> None:
    text = "key\\ with\\=odd\\:chars = tab\\there\\nnewline \\u00e9\\u20AC \\q\n"
    assert properties.parse(text) == {"key with=odd:chars": "tab\there\nnewline é€ q"}


def test_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError, match=r"line 2: malformed \\uXXXX escape"):
        properties.parse("a=1\nb=\\u12G4\n")
    with pytest.raises(PropertiesError, match=r"line 1: .*half of a surrogate pair"):
        properties.parse("a=\\ud800\n")
    assert properties.parse("a=\\ud83d\\ude00\n") == {"a": "\U0001f600"}


def _escaped(text: str, *, key: bool) -> str:
    """How Java's Properties.store writes ``text``."""
    out = []
    for index, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif not " " <= char <= "~":
            utf16 = char.encode("utf-16-be")
            out.extend(f"\\u{utf16[i : i + 2].hex()}" for i in range(0, len(utf16), 2))
        else:
            out.append(char)
    return "".join(out)


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_round_trip_of_what_java_would_store(entries: dict[str, str]) -> None:
    text = "".join(f"{_escaped(k, key=True)}={_escaped(v, key=False)}\n" for k, v in entries.items())
    assert properties.parse(text) == entries


def test_kafka_names_map_to_ours() -> None:
    mapped = map_kafka_names(
        {
            "listeners": "CONTROLLER://:9093,PLAINTEXT://:19092",
            "advertised.listeners": "PLAINTEXT://broker.example:19092",
            "log.dirs": "/var/lib/kafka",
            "node.id": "3",
            "log.retention.hours": "168",
            "log.roll.hours": "1",
            "num.partitions": "6",
            "auto.create.topics.enable": "false",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "socket.request.max.bytes": "104857600",
            "log.segment.bytes": "1073741824",
        },
        SETTINGS_TABLE,
    )
    assert {name: value for name, (value, _) in mapped.items()} == {
        "kafka.listener": "0.0.0.0:19092",
        "kafka.advertised.listener": "broker.example:19092",
        "data.dir": "/var/lib/kafka",
        "broker.id": "3",
        "log.retention.ms": str(168 * 3_600_000),
        "log.roll.ms": "3600000",
        "num.partitions": "6",
        "auto.create.topics.enable": "false",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "socket.request.max.bytes": "104857600",
        "log.segment.bytes": "1073741824",
    }
    assert mapped["data.dir"] == ("/var/lib/kafka", "log.dirs")
    assert mapped["num.partitions"] == ("6", "num.partitions")


def test_kafka_precedence_between_names_of_one_setting() -> None:
    def retention(given: dict[str, str]) -> tuple[str, str]:
        return map_kafka_names(given, SETTINGS_TABLE)["log.retention.ms"]

    assert retention({"log.retention.hours": "1", "log.retention.minutes": "2"}) == (
        "120000",
        "log.retention.minutes",
    )
    assert retention({"log.retention.ms": "5", "log.retention.hours": "1"}) == ("5", "log.retention.ms")
    assert retention({"log.retention.hours": "-1"}) == ("-1", "log.retention.hours")
    dirs = map_kafka_names({"log.dir": "/a", "log.dirs": "/b"}, SETTINGS_TABLE)
    assert dirs["data.dir"] == ("/b", "log.dirs")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"listeners": "SSL://:9093"}, r"invalid value 'SSL://:9093' for listeners: .*PLAINTEXT only"),
        ({"listeners": "PLAINTEXT://nohost"}, r"for listeners: expected PLAINTEXT://HOST:PORT"),
        ({"log.dirs": "/a,/b"}, r"for log.dirs: tierlog keeps its logs in one directory"),
        ({"log.retention.hours": "a week"}, r"for log.retention.hours: expected an integer"),
        ({"num.partition": "3"}, r"unknown setting 'num.partition'; did you mean 'num.partitions'\?"),
        ({"log.dirz": "/a"}, r"unknown setting 'log.dirz'; did you mean 'log.dir.?'\?"),
        ({"zzzz.qqqq": "1"}, r"unknown setting 'zzzz.qqqq'$"),
    ],
)
def test_mapping_errors_name_the_kafka_name(given: dict[str, str], message: str) -> None:
    with pytest.raises(PropertiesError, match=message):
        map_kafka_names(given, SETTINGS_TABLE)


def test_looks_like_properties() -> None:
    assert looks_like_properties("# Kafka\nlog.dirs=/tmp/kafka-logs\nbroker.id: 0\n")
    assert not looks_like_properties("port = = 1\n")
    assert not looks_like_properties("[log]\nsegment.bytes = 1\n")
    assert not looks_like_properties("# only a comment\n")


SERVER_PROPERTIES = """\
# A Kafka broker's server.properties
node.id=7
listeners=PLAINTEXT://127.0.0.1:19092
log.dirs={data}
num.partitions=3
log.retention.hours=24
auto.create.topics.enable = false
"""


def test_load_settings_reads_a_properties_file(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(SERVER_PROPERTIES.format(data=tmp_path / "data"), encoding="utf-8")
    settings = load_settings({}, {}, config)
    assert settings.broker_id == 7
    assert settings.kafka_listener == ("127.0.0.1", 19092)
    assert settings.data_dir == tmp_path / "data"
    assert settings.num_partitions == 3
    assert settings.topic_defaults["retention.ms"] == str(24 * 3_600_000)
    assert settings.auto_create_topics_enable is False
    assert settings.sources["data.dir"] == f"config file {config}, as log.dirs"
    assert settings.sources["num.partitions"] == f"config file {config}"


def test_precedence_flag_over_env_over_properties_file(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=2\nbroker.id=1\nlog.dir=/x\n", encoding="utf-8")
    settings = load_settings(
        {"num.partitions": "4"}, {"TIERLOG_BROKER_ID": "5", "TIERLOG_DATA_DIR": str(tmp_path)}, config
    )
    assert (settings.num_partitions, settings.broker_id, settings.data_dir) == (4, 5, tmp_path)


def test_properties_detected_by_content_under_another_name(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text(f"log.dirs={tmp_path}\nnum.partitions=2\n", encoding="utf-8")
    settings = load_settings({}, {}, config)
    assert (settings.data_dir, settings.num_partitions) == (tmp_path, 2)


def test_properties_file_errors_name_the_file_and_the_closest_name(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("num.partitons=2\n", encoding="utf-8")
    with pytest.raises(
        SettingsError, match=r"server.properties: unknown setting 'num.partitons'; did you mean"
    ):
        load_settings({}, {}, config)
    config.write_text("num.partitions=-1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"num.partitions \(from config file .*server.properties\)"):
        load_settings({}, {}, config)


def test_neither_toml_nor_properties_says_both(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text("port = = 1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"not valid TOML: .*nor a Kafka-style properties file"):
        load_settings({}, {}, config)
