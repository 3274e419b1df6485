"""The Python client against a broker with Basic authentication and ACLs: the admin, the producer and the
consumer work with exactly the ACLs docs/security.md lists, and a refusal is an AuthorizationError that
appends nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.security.test_authentication import BASIC, bootstrap, serve
from tierlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, AuthorizationError, ClientSecurity
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.model import AclBinding
from tierlog.service.web.keys import BROKER

USERS = {"admin": "admin-pw", "alice": "alice-pw"}


def _alice_acls() -> list[AclBinding]:
    allow = [
        ("TOPIC", "alice-", "PREFIXED", "CREATE"),
        ("TOPIC", "alice-", "PREFIXED", "WRITE"),
        ("TOPIC", "alice-", "PREFIXED", "READ"),
        ("GROUP", "alice-", "PREFIXED", "READ"),
    ]
    return [
        validate_binding(kind, name, pattern, "User:alice", "*", operation, "ALLOW")
        for kind, name, pattern, operation in allow
    ]


def _security(user: str, password: str) -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_plain_username=user, sasl_plain_password=password
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    found = tmp_path / "data"
    found.mkdir()
    return found


async def test_a_user_with_topic_acls_creates_produces_and_consumes_only_its_topics(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _alice_acls())
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        url = str(broker.client.make_url("")).rstrip("/")
        alice = _security("alice", "alice-pw")
        admin = AsyncAdmin(url, security=alice)
        try:
            assert await admin.create_topic("alice-orders", 1) == 1
            with pytest.raises(AuthorizationError):
                await admin.create_topic("bob-orders", 1)
            assert await admin.list_topics() == ["alice-orders"]
        finally:
            await admin.close()
        assert "bob-orders" not in broker.app[BROKER].topic_names()

        producer = AsyncProducer(
            url,
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
            enable_idempotence=False,
        )
        await producer.start()
        try:
            await producer.send_and_wait("alice-orders", b"v1", key=b"k")
        finally:
            await producer.close()

        consumer = AsyncConsumer(
            "alice-orders",
            bootstrap_servers=url,
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
            auto_offset_reset="earliest",
            group_id="alice-readers",
        )
        async with consumer:
            records = []
            for _ in range(20):  # each poll waits up to 1 s for the group to form and the record to come
                records += await consumer.poll(timeout=1)
                if records:
                    break
            assert [(r.key, r.value) for r in records] == [(b"k", b"v1")]
            await consumer.commit()


async def test_a_refused_produce_is_an_authorization_error_and_appends_nothing(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _alice_acls())
    async with serve(data_dir, BASIC) as broker:
        await broker.app[BROKER].create_topic("payments", 1, {})
        url = str(broker.client.make_url("")).rstrip("/")
        producer = AsyncProducer(
            url,
            security_protocol="SASL_PLAINTEXT",
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
            enable_idempotence=False,
            retries=0,
        )
        await producer.start()
        try:
            with pytest.raises(AuthorizationError):
                await producer.send_and_wait("payments", b"v1")
        finally:
            await producer.close()
        partition = broker.app[BROKER].topic("payments").partition(0)
        assert partition.log_end_offset == 0
