"""The admin APIs over the Kafka listener, with Kafka's own admin clients (confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient): create (with configs, validate only), describe, alter and incrementally
alter configs, create partitions, delete, describe the cluster and the log dirs, each error Kafka's clients
tell apart; topics created through one door seen through the other (the HTTP APIs); kcat's metadata."""

from __future__ import annotations

import io
import json
import shutil
import socket
import struct
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.cimpl import NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka import admin as kp
from kio.index import load_response_schema
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from tests.integration.broker import BrokerThread, StartThread

pytestmark = pytest.mark.integration

WAIT_S = 15


@pytest.fixture
def admin(kafka_broker: BrokerThread) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_broker.kafka_bootstrap, "socket.timeout.ms": 10_000})


@pytest.fixture
def kp_admin(kafka_broker: BrokerThread) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kafka_broker.kafka_bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


def _http(
    broker: BrokerThread, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


def _create(admin: AdminClient, topic: NewTopic, *, validate_only: bool = False) -> None:
    futures = admin.create_topics([topic], request_timeout=WAIT_S, validate_only=validate_only)
    futures[topic.topic].result(timeout=WAIT_S)


def _error_of(call: Any) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        call()
    error: KafkaError = caught.value.args[0]
    return error


def _source(entry: ConfigEntry) -> ConfigSource:
    """An entry's source (librdkafka hands it over as an int)."""
    return ConfigSource(entry.source)


def _topic_configs(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    found: dict[str, ConfigEntry] = admin.describe_configs([resource], request_timeout=WAIT_S)[
        resource
    ].result(timeout=WAIT_S)
    return found


# ---- create -----------------------------------------------------------------------------------------------


def test_a_topic_created_with_configs_is_served_over_http_with_them(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 4, 1, config={"retention.ms": "3600000", "cleanup.policy": "delete"}))
    topic = _http(kafka_broker, "GET", f"/topics/{topic_name}")
    assert topic["configs"]["retention.ms"] == "3600000"
    assert len(topic["partitions"]) == 4
    assert admin.list_topics(topic_name, timeout=WAIT_S).topics[topic_name].error is None


def test_validate_only_checks_and_creates_nothing(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 2, 1, config={"retention.ms": "1000"}), validate_only=True)
    assert topic_name not in _http(kafka_broker, "GET", "/topics")
    bad = NewTopic(topic_name, 2, 1, config={"retention.ms": "soon"})
    assert _error_of(lambda: _create(admin, bad, validate_only=True)).code() == KafkaError.INVALID_CONFIG


@pytest.mark.parametrize(
    ("partitions", "replication", "config", "expected"),
    [
        (0, 1, {}, KafkaError.INVALID_PARTITIONS),
        (20_000, 1, {}, KafkaError.INVALID_PARTITIONS),
        (1, 3, {}, KafkaError.INVALID_REPLICATION_FACTOR),
        (1, 0, {}, KafkaError.INVALID_REPLICATION_FACTOR),
        (1, 1, {"retention.ms": "-5"}, KafkaError.INVALID_CONFIG),
        (1, 1, {"no.such.config": "1"}, KafkaError.INVALID_CONFIG),
    ],
)
def test_create_refusals_carry_kafkas_codes(
    admin: AdminClient,
    topic_name: str,
    partitions: int,
    replication: int,
    config: dict[str, str],
    expected: int,
) -> None:
    error = _error_of(lambda: _create(admin, NewTopic(topic_name, partitions, replication, config=config)))
    assert error.code() == expected, error.str()


def test_create_refuses_an_existing_an_illegal_and_a_reserved_name(
    admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 1, 1))
    exists = _error_of(lambda: _create(admin, NewTopic(topic_name, 1, 1)))
    assert exists.code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert exists.str() == f"Topic '{topic_name}' already exists."
    illegal = _error_of(lambda: _create(admin, NewTopic("bad/name", 1, 1)))
    assert illegal.code() == KafkaError.TOPIC_EXCEPTION
    reserved = _error_of(lambda: _create(admin, NewTopic("__mine", 1, 1)))
    assert reserved.code() == KafkaError.POLICY_VIOLATION


def test_a_manual_assignment_on_this_broker_alone_is_taken(admin: AdminClient, topic_name: str) -> None:
    _create(admin, NewTopic(topic_name, 2, -1, replica_assignment=[[0], [0]]))
    assert len(admin.list_topics(topic_name, timeout=WAIT_S).topics[topic_name].partitions) == 2
    other = NewTopic(topic_name + "-x", 1, -1, replica_assignment=[[7]])
    assert _error_of(lambda: _create(admin, other)).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT


# ---- configs ----------------------------------------------------------------------------------------------


def test_describe_configs_names_sources_and_synonyms(admin: AdminClient, topic_name: str) -> None:
    _create(admin, NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"}))
    configs = _topic_configs(admin, topic_name)
    retention = configs["retention.ms"]
    assert retention.value == "3600000"
    assert _source(retention) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.name for s in retention.synonyms.values()] == ["retention.ms", "log.retention.ms"]
    segment = configs["segment.bytes"]
    assert (_source(segment), segment.is_read_only, segment.is_sensitive) == (
        ConfigSource.DEFAULT_CONFIG,
        False,
        False,
    )


def test_describe_configs_of_the_broker_and_of_an_unknown_topic(admin: AdminClient) -> None:
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([broker], request_timeout=WAIT_S)[broker].result(timeout=WAIT_S)
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].is_read_only
    unknown = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    future = admin.describe_configs([unknown], request_timeout=WAIT_S)[unknown]
    error = _error_of(lambda: future.result(timeout=WAIT_S))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_sets_deletes_appends_and_subtracts(admin: AdminClient, topic_name: str) -> None:
    _create(admin, NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"}))
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=WAIT_S)[resource].result(timeout=WAIT_S)
    configs = _topic_configs(admin, topic_name)
    assert configs["segment.ms"].value == "60000"
    assert _source(configs["retention.ms"]) == ConfigSource.DEFAULT_CONFIG
    assert configs["cleanup.policy"].value == "delete,compact"
    subtract = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)
        ],
    )
    admin.incremental_alter_configs([subtract], request_timeout=WAIT_S)[subtract].result(timeout=WAIT_S)
    assert _topic_configs(admin, topic_name)["cleanup.policy"].value == "compact"


def test_alter_configs_replaces_the_overrides(admin: AdminClient, topic_name: str) -> None:
    _create(admin, NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"}))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"segment.ms": "60000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka's own, for the API Kafka deprecated
        futures = admin.alter_configs([resource], request_timeout=WAIT_S)
    futures[resource].result(timeout=WAIT_S)
    configs = _topic_configs(admin, topic_name)
    assert configs["segment.ms"].value == "60000"
    assert _source(configs["retention.ms"]) == ConfigSource.DEFAULT_CONFIG


def test_incremental_alter_refusals_and_validate_only(admin: AdminClient, topic_name: str) -> None:
    _create(admin, NewTopic(topic_name, 1, 1))

    def alter(entry: ConfigEntry, validate_only: bool = False) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[entry])
        futures = admin.incremental_alter_configs(
            [resource], request_timeout=WAIT_S, validate_only=validate_only
        )
        futures[resource].result(timeout=WAIT_S)

    append = ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)
    assert _error_of(lambda: alter(append)).code() == KafkaError.INVALID_CONFIG
    bad = ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
    assert _error_of(lambda: alter(bad)).code() == KafkaError.INVALID_CONFIG
    alter(
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET), validate_only=True
    )
    assert _topic_configs(admin, topic_name)["retention.ms"].value == "604800000"


def test_kafka_python_creates_alters_describes_grows_and_deletes(
    kafka_broker: BrokerThread, kp_admin: KafkaAdminClient, topic_name: str
) -> None:
    kp_admin.create_topics([kp.NewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "3600000"})])
    resource = kp.ConfigResource(kp.ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "60000"})
    kp_admin.alter_configs([resource], incremental=False)  # the client sends the other overrides too
    configs = _http(kafka_broker, "GET", f"/topics/{topic_name}")["configs"]
    assert (configs["segment.ms"], configs["retention.ms"]) == ("60000", "3600000")
    kp_admin.alter_configs(
        [kp.ConfigResource(kp.ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "70000"})]
    )
    assert _http(kafka_broker, "GET", f"/topics/{topic_name}")["configs"]["segment.ms"] == "70000"
    described = kp_admin.describe_configs([kp.ConfigResource(kp.ConfigResourceType.TOPIC, topic_name)])
    assert "segment.ms" in json.dumps(described, default=str)
    kp_admin.create_partitions({topic_name: kp.NewPartitions(total_count=5)})
    assert len(_http(kafka_broker, "GET", f"/topics/{topic_name}")["partitions"]) == 5
    kp_admin.delete_topics([topic_name])
    assert topic_name not in _http(kafka_broker, "GET", "/topics")


def test_kafka_python_describes_the_log_dirs(
    kafka_broker: BrokerThread, kp_admin: KafkaAdminClient, topic_name: str
) -> None:
    kp_admin.create_topics([kp.NewTopic(topic_name, 2, 1)])
    found = json.dumps(kp_admin.describe_log_dirs(), default=str)
    assert topic_name in found


# ---- partitions and delete --------------------------------------------------------------------------------


def test_create_partitions_grows_and_refuses_to_shrink(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 2, 1))

    def grow(count: int, validate_only: bool = False) -> None:
        futures = admin.create_partitions(
            [NewPartitions(topic_name, count)], request_timeout=WAIT_S, validate_only=validate_only
        )
        futures[topic_name].result(timeout=WAIT_S)

    grow(6, validate_only=True)
    assert len(_http(kafka_broker, "GET", f"/topics/{topic_name}")["partitions"]) == 2
    grow(3)
    assert len(_http(kafka_broker, "GET", f"/topics/{topic_name}")["partitions"]) == 3
    assert _error_of(lambda: grow(1)).code() == KafkaError.INVALID_PARTITIONS
    assert _error_of(lambda: grow(3)).code() == KafkaError.INVALID_PARTITIONS


def test_delete_topics_and_its_refusals(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 1, 1))
    admin.delete_topics([topic_name], request_timeout=WAIT_S)[topic_name].result(timeout=WAIT_S)
    assert topic_name not in _http(kafka_broker, "GET", "/topics")
    again = admin.delete_topics([topic_name], request_timeout=WAIT_S)[topic_name]
    assert _error_of(lambda: again.result(timeout=WAIT_S)).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # a group lookup creates the internal offsets topic
    described = admin.describe_consumer_groups(["any-group"], request_timeout=WAIT_S)["any-group"]
    described.result(timeout=WAIT_S)
    internal = admin.delete_topics(["__consumer_offsets"], request_timeout=WAIT_S)["__consumer_offsets"]
    assert _error_of(lambda: internal.result(timeout=WAIT_S)).code() == KafkaError.POLICY_VIOLATION


# ---- the cluster, the other door, kcat --------------------------------------------------------------------


def test_describe_cluster(kafka_broker: BrokerThread, admin: AdminClient) -> None:
    cluster = admin.describe_cluster(request_timeout=WAIT_S).result(timeout=WAIT_S)
    assert [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(0, kafka_broker.kafka_bootstrap)]
    assert cluster.controller.id == 0
    assert cluster.cluster_id == _http(kafka_broker, "GET", "/v3/clusters")["data"][0]["cluster_id"]


def test_a_topic_created_over_http_is_described_over_kafka(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    cluster_id = _http(kafka_broker, "GET", "/v3/clusters")["data"][0]["cluster_id"]
    doc = {
        "topic_name": topic_name,
        "partitions_count": 2,
        "configs": [{"name": "max.message.bytes", "value": "2000000"}],
    }
    _http(kafka_broker, "POST", f"/v3/clusters/{cluster_id}/topics", doc)
    configs = _topic_configs(admin, topic_name)
    assert configs["max.message.bytes"].value == "2000000"
    assert _source(configs["max.message.bytes"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG


KCAT = shutil.which("kcat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it as root on Debian)")
def test_kcat_lists_the_metadata(kafka_broker: BrokerThread, admin: AdminClient, topic_name: str) -> None:
    assert KCAT is not None
    _create(admin, NewTopic(topic_name, 2, 1))
    listed = subprocess.run(
        [KCAT, "-b", kafka_broker.kafka_bootstrap, "-L", "-J", "-m", "10"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=True,
    )
    metadata = json.loads(listed.stdout)
    assert [b["id"] for b in metadata["brokers"]] == [0]
    topics = {t["topic"]: t for t in metadata["topics"]}
    assert [p["leader"] for p in topics[topic_name]["partitions"]] == [0, 0]


# ---- the newest versions, over a raw socket ---------------------------------------------------------------


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"closed after {len(data)} of {n} bytes"
        data += chunk
    return data


def _call(bootstrap: str, api_key: int, version: int, body: Any) -> Any:
    """Send one flexible-version request (header v2) built from a kio entity; the decoded answer."""
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"t" + b"\x00"
    frame = header + buffer.getvalue()
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _read(sock, 4))[0]
        data = _read(sock, size)
    assert struct.unpack_from(">i", data)[0] == 1
    entity, _ = entity_reader(load_response_schema(api_key, version))(data, 5)  # correlation id, tag count
    return entity


def test_create_topics_v7_answers_the_topics_configs(kafka_broker: BrokerThread, topic_name: str) -> None:
    topic = CreatableTopic(
        name=TopicName(topic_name),
        num_partitions=i32(2),
        replication_factor=i16(-1),
        assignments=(),
        configs=(CreatableTopicConfig(name="retention.ms", value="1000"),),
    )
    answer = _call(kafka_broker.kafka_bootstrap, 19, 7, CreateTopicsRequest(topics=(topic,)))
    (result,) = answer.topics
    assert (result.error_code.value, result.num_partitions, result.replication_factor) == (0, 2, 1)
    assert result.topic_id is not None  # the topic's id (kio reads the zero UUID as None)
    configs = {c.name: c for c in result.configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
    assert configs["segment.bytes"].config_source == 5


def test_describe_configs_v4_documents_and_types_each_config(kafka_broker: BrokerThread) -> None:
    resource = DescribeConfigsResource(
        resource_type=i8(4), resource_name="", configuration_keys=("log.retention.ms",)
    )
    body = DescribeConfigsRequest(resources=(resource,), include_synonyms=False, include_documentation=True)
    (result,) = _call(kafka_broker.kafka_bootstrap, 32, 4, body).results
    (config,) = result.configs
    assert (config.name, config.read_only, config.config_type) == ("log.retention.ms", True, 5)  # LONG
    assert config.documentation


def test_describe_log_dirs_v4_sizes_each_partition(
    kafka_broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _create(admin, NewTopic(topic_name, 2, 1))
    records = {"records": [{"value": {"n": n}} for n in range(10)]}
    path = f"/topics/{topic_name}/partitions/1"
    _http(kafka_broker, "POST", path, records, content_type="application/vnd.kafka.json.v2+json")
    wanted = DescribableLogDirTopic(topic=TopicName(topic_name), partitions=(i32(0), i32(1)))
    answer = _call(kafka_broker.kafka_bootstrap, 35, 4, DescribeLogDirsRequest(topics=(wanted,)))
    (log_dir,) = answer.results
    assert log_dir.total_bytes >= log_dir.usable_bytes > 0
    (topic,) = log_dir.topics
    sizes = {p.partition_index: (p.partition_size, p.offset_lag, p.is_future_key) for p in topic.partitions}
    assert sizes[0] == (0, 0, False)
    assert sizes[1][0] > 0 and sizes[1][1:] == (0, False)


def test_a_one_broker_cluster_serves_the_admin_apis_through_its_metadata_store(
    broker_threads: StartThread, tmp_path: Path, topic_name: str
) -> None:
    settings = {
        "metadata.uri": f"file://{tmp_path / 'metadata.json'}",
        "broker.id": "7",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    broker = broker_threads(settings)
    admin = AdminClient({"bootstrap.servers": broker.kafka_bootstrap, "socket.timeout.ms": 10_000})
    _create(admin, NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"}))
    assert _topic_configs(admin, topic_name)["retention.ms"].value == "3600000"
    two = NewTopic(topic_name + "-2", 1, 2)
    assert _error_of(lambda: _create(admin, two)).code() == KafkaError.INVALID_REPLICATION_FACTOR
    elsewhere = NewTopic(topic_name + "-p", 1, -1, replica_assignment=[[8]])  # no broker 8 is live
    assert _error_of(lambda: _create(admin, elsewhere)).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    _create(
        admin, NewTopic(topic_name + "-own", 1, -1, replica_assignment=[[7]])
    )  # its one possible placement
    admin.create_partitions([NewPartitions(topic_name, 3)], request_timeout=WAIT_S)[topic_name].result(
        timeout=WAIT_S
    )
    assert len(_http(broker, "GET", f"/topics/{topic_name}")["partitions"]) == 3
    admin.delete_topics([topic_name], request_timeout=WAIT_S)[topic_name].result(timeout=WAIT_S)
    assert topic_name not in _http(broker, "GET", "/topics")
