"""DeleteRecords, the ACL keys, the SCRAM-credential keys and Metadata v0 over the Kafka listener, with
Kafka's own admin clients (confluent-kafka, kafka-python, aiokafka) against one SASL broker whose
``admin`` is a super user and whose ``alice`` has only the ACLs a test gives her."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.cimpl import NewTopic
from kafka import KafkaAdminClient
from kafka import admin as kp
from kafka.errors import ClusterAuthorizationFailedError, InvalidRequestError, UnknownTopicOrPartitionError
from kafka.structs import TopicPartition as KpPartition
from kio.schema.metadata.v0.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.integration.broker import BrokerThread
from tests.integration.kafka.sasl_support import connect, request, sasl, start_with_users

pytestmark = pytest.mark.integration

WAIT_S = 15
ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    users = {ADMIN[0]: (ADMIN[1], "SCRAM-SHA-256"), ALICE[0]: (ALICE[1], "SCRAM-SHA-512")}
    settings = {"authentication.methods": "basic", "super.users": "User:admin", "num.partitions": "1"}
    running = start_with_users(tmp_path_factory.mktemp("admin-keys") / "data", users, settings)
    yield running
    running.close()


def _kp_client(broker: BrokerThread, user: tuple[str, str], mechanism: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=broker.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user[0],
        sasl_plain_password=user[1],
        request_timeout_ms=10_000,
    )


@pytest.fixture(scope="module")
def admin(broker: BrokerThread) -> AdminClient:
    return AdminClient({**sasl(broker, "SCRAM-SHA-256", ADMIN), "socket.timeout.ms": 10_000})


@pytest.fixture(scope="module")
def alice(broker: BrokerThread) -> AdminClient:
    return AdminClient({**sasl(broker, "SCRAM-SHA-512", ALICE), "socket.timeout.ms": 10_000})


@pytest.fixture
def kp_admin(broker: BrokerThread) -> Iterator[KafkaAdminClient]:
    client = _kp_client(broker, ADMIN, "PLAIN")
    yield client
    client.close()


def _topic(broker: BrokerThread, admin: AdminClient, name: str, records: int) -> None:
    admin.create_topics([NewTopic(name, 1)])[name].result(timeout=WAIT_S)
    producer = Producer({**sasl(broker, "SCRAM-SHA-256", ADMIN), "linger.ms": 0})
    for i in range(records):
        producer.produce(name, f"v{i}".encode())
        producer.flush(WAIT_S)  # one batch per record: DeleteRecords moves the start into segments' middle
    assert producer.flush(WAIT_S) == 0


def _error(call: Any) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        call()
    error: KafkaError = caught.value.args[0]
    return error


# ---- DeleteRecords ----------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_refuses_past_the_high_watermark(
    broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    _topic(broker, admin, topic_name, 6)
    (deleted,) = admin.delete_records([TopicPartition(topic_name, 0, 4)]).values()
    assert deleted.result(timeout=WAIT_S).low_watermark == 4
    consumer = Consumer(
        {**sasl(broker, "SCRAM-SHA-256", ADMIN), "group.id": "unused", "auto.offset.reset": "earliest"}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=WAIT_S)
        assert (low, high) == (4, 6)
        consumer.assign([TopicPartition(topic_name, 0, 0)])  # below the start: reset to the earliest
        message = consumer.poll(WAIT_S)
        assert message is not None and message.error() is None and message.offset() == 4
    finally:
        consumer.close()
    (past,) = admin.delete_records([TopicPartition(topic_name, 0, 7)]).values()
    assert _error(lambda: past.result(timeout=WAIT_S)).code() == KafkaError.OFFSET_OUT_OF_RANGE
    (to_end,) = admin.delete_records([TopicPartition(topic_name, 0, -1)]).values()
    assert to_end.result(timeout=WAIT_S).low_watermark == 6


def test_delete_records_needs_delete_on_the_topic_and_a_known_topic(
    broker: BrokerThread, admin: AdminClient, alice: AdminClient, kp_admin: KafkaAdminClient, topic_name: str
) -> None:
    _topic(broker, admin, topic_name, 3)
    describe = _acl(topic_name, ResourcePatternType.LITERAL, AclOperation.DESCRIBE)
    admin.create_acls([describe])[describe].result(timeout=WAIT_S)  # alice sees the topic, may not delete
    (refused,) = alice.delete_records([TopicPartition(topic_name, 0, 1)]).values()
    assert _error(lambda: refused.result(timeout=WAIT_S)).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    partition = KpPartition(topic_name, 0)
    assert kp_admin.delete_records({partition: 2})[partition]["low_watermark"] == 2
    with pytest.raises(UnknownTopicOrPartitionError):
        kp_admin.delete_records({KpPartition(topic_name + "-unknown", 0): 1})


async def test_aiokafka_deletes_records(broker: BrokerThread, admin: AdminClient, topic_name: str) -> None:
    await asyncio.to_thread(_topic, broker, admin, topic_name, 3)

    client = AIOKafkaAdminClient(
        bootstrap_servers=broker.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=ADMIN[0],
        sasl_plain_password=ADMIN[1],
    )
    await client.start()
    try:
        answer = await client.delete_records({AioPartition(topic_name, 0): RecordsToDelete(1)})
        assert answer[AioPartition(topic_name, 0)] == 1
    finally:
        await client.close()


# ---- ACLs -------------------------------------------------------------------------------------------------


def _acl(name: str, pattern: ResourcePatternType, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, pattern, "User:alice", "*", operation, AclPermissionType.ALLOW
    )


def _filter(name: str, pattern: ResourcePatternType, principal: str | None = None) -> AclBindingFilter:
    """Topic ACLs of ``name`` under ``pattern`` (of ``principal``, else of anyone, from any host)."""
    anyone: Any = None  # None matches any principal and host (the stubs say str)
    return AclBindingFilter(
        ResourceType.TOPIC,
        name,
        pattern,
        principal or anyone,
        anyone,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def test_acls_are_created_described_matched_and_deleted(admin: AdminClient, topic_name: str) -> None:
    literal = _acl(topic_name, ResourcePatternType.LITERAL, AclOperation.READ)
    prefixed = _acl(topic_name[:10], ResourcePatternType.PREFIXED, AclOperation.WRITE)
    for future in admin.create_acls([literal, prefixed]).values():
        future.result(timeout=WAIT_S)
    match = _filter(topic_name, ResourcePatternType.MATCH)
    found = admin.describe_acls(match).result(timeout=WAIT_S)
    assert {(b.name, b.resource_pattern_type, b.operation) for b in found} == {
        (topic_name, ResourcePatternType.LITERAL, AclOperation.READ),
        (topic_name[:10], ResourcePatternType.PREFIXED, AclOperation.WRITE),
    }
    literal_only = _filter(topic_name, ResourcePatternType.LITERAL, "User:alice")
    (deletion,) = admin.delete_acls([literal_only]).values()
    assert [b.operation for b in deletion.result(timeout=WAIT_S)] == [AclOperation.READ]
    assert len(admin.describe_acls(match).result(timeout=WAIT_S)) == 1


def test_acl_keys_need_the_cluster_acls(broker: BrokerThread, alice: AdminClient, topic_name: str) -> None:
    client = _kp_client(broker, ALICE, "SCRAM-SHA-512")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            client.describe_acls(_kp_filter(kp.ResourceType.ANY, None))
    finally:
        client.close()
    (created,) = alice.create_acls(
        [_acl(topic_name, ResourcePatternType.LITERAL, AclOperation.READ)]
    ).values()
    error = _error(lambda: created.result(timeout=WAIT_S))
    assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def _kp_filter(resource_type: kp.ResourceType, name: str | None) -> kp.ACLFilter:
    pattern = kp.ResourcePatternFilter(resource_type, name, kp.ACLResourcePatternType.ANY)
    return kp.ACLFilter(None, None, kp.ACLOperation.ANY, kp.ACLPermissionType.ANY, pattern)


def test_an_acl_our_model_cannot_hold_is_refused(kp_admin: KafkaAdminClient, topic_name: str) -> None:
    bad_cluster = kp.ACL(
        "User:alice",
        "*",
        kp.ACLOperation.ALTER,
        kp.ACLPermissionType.ALLOW,
        kp.ResourcePattern(kp.ResourceType.CLUSTER, "not-the-cluster", kp.ACLResourcePatternType.LITERAL),
    )
    good = kp.ACL(
        "User:alice",
        "10.0.0.1",
        kp.ACLOperation.DESCRIBE,
        kp.ACLPermissionType.DENY,
        kp.ResourcePattern(kp.ResourceType.GROUP, topic_name, kp.ACLResourcePatternType.LITERAL),
    )
    user_acl = kp.ACL(
        "User:alice",
        "*",
        kp.ACLOperation.ALTER,
        kp.ACLPermissionType.ALLOW,
        kp.ResourcePattern(kp.ResourceType.USER, "bob", kp.ACLResourcePatternType.LITERAL),
    )
    answer = kp_admin.create_acls([bad_cluster, good])
    assert answer["succeeded"] == [good]
    assert answer["failed"] == [InvalidRequestError]
    answer = kp_admin.create_acls([user_acl])  # tierlog's model has no USER resources
    assert answer["failed"] == [InvalidRequestError]
    found, _error_code = kp_admin.describe_acls(_kp_filter(kp.ResourceType.GROUP, topic_name))
    assert [(a.host, a.permission_type) for a in found] == [("10.0.0.1", kp.ACLPermissionType.DENY)]


# ---- SCRAM credentials ------------------------------------------------------------------------------------


def test_scram_credentials_are_upserted_described_used_and_deleted(
    broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    user = f"user-{topic_name}"[:100]
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"s3cret", os.urandom(16)
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=WAIT_S)
    described = _described(admin, user).result(timeout=WAIT_S)
    (info,) = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)
    new_user = AdminClient({**sasl(broker, "SCRAM-SHA-512", (user, "s3cret")), "socket.timeout.ms": 10_000})
    # authenticated: a refused password would fail the call with an authentication error
    assert new_user.list_topics(timeout=WAIT_S).brokers
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(timeout=WAIT_S)
    error = _error(lambda: _described(admin, user).result(timeout=WAIT_S))
    assert error.code() == KafkaError.RESOURCE_NOT_FOUND


def test_scram_alterations_follow_kafkas_rules(kp_admin: KafkaAdminClient, alice: AdminClient) -> None:
    too_few = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw"
    )
    (future,) = alice.alter_user_scram_credentials([too_few]).values()
    assert _error(lambda: future.result(timeout=WAIT_S)).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    described = kp_admin.describe_user_scram_credentials()
    assert described["alice"] == {
        "error": None,
        "credential_infos": [{"mechanism": kp.ScramMechanism.SCRAM_SHA_512, "iterations": 4096}],
    }
    results = kp_admin.alter_user_scram_credentials(
        [
            kp.UserScramCredentialUpsertion("bob", kp.ScramMechanism.SCRAM_SHA_256, "pw", iterations=100),
            kp.UserScramCredentialDeletion("nobody", kp.ScramMechanism.SCRAM_SHA_256),
            kp.UserScramCredentialUpsertion("carol", kp.ScramMechanism.SCRAM_SHA_256, "pw"),
            kp.UserScramCredentialDeletion("carol", kp.ScramMechanism.SCRAM_SHA_256),
        ]
    )
    assert results == {
        "bob": "Too few iterations",
        "nobody": "Attempt to delete a user credential that does not exist: nobody",
        "carol": "A user credential cannot be altered twice in the same request",
    }
    assert set(kp_admin.describe_user_scram_credentials()) == {"admin", "alice"}


def _described(admin: AdminClient, user: str) -> Any:
    futures = admin.describe_user_scram_credentials([user])
    assert isinstance(futures, dict)
    return futures[user]


# ---- Metadata v0 ------------------------------------------------------------------------------------------


def test_metadata_v0_with_no_topics_lists_every_topic(
    broker: BrokerThread, admin: AdminClient, topic_name: str
) -> None:
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(timeout=WAIT_S)
    with connect(broker) as sock:
        assert request(sock, 17, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code.value == 0
        token = b"\0" + ADMIN[0].encode() + b"\0" + ADMIN[1].encode()
        assert request(sock, 36, 0, SaslAuthenticateRequest(auth_bytes=token)).error_code.value == 0
        answer = request(sock, 3, 0, MetadataRequest(topics=()))
    assert topic_name in {t.name for t in answer.topics}
