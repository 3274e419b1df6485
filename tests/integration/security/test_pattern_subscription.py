"""A REST consumer instance's ``topic_pattern`` under ACLs: it matches only the topics its creator may Read,
so no answer (subscription, assignments, records) ever names a topic the creator may not Describe, and
reading does not fail on one. With security off the pattern matches every topic."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.integration.security.test_authentication import BASIC, basic, bootstrap, serve
from tierlog.service.groups.state import GROUPS_READY
from tierlog.service.security.acl import validate_binding, validate_filter
from tierlog.service.security.model import AclBinding
from tierlog.service.security.security_store import SECURITY_STORE

USERS = {"admin": "admin-pw", "eve": "eve-pw"}
V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
INSTANCE = "/consumers/g/instances/eve-1"
SECRET = b"secret-"


def _eve_acls() -> list[AclBinding]:
    return [
        validate_binding("GROUP", "g", "LITERAL", "User:eve", "*", "READ", "ALLOW"),
        validate_binding("TOPIC", "public-", "PREFIXED", "User:eve", "*", "READ", "ALLOW"),
    ]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    found = tmp_path / "data"
    found.mkdir()
    return found


class Caller:
    """Requests of one user (or of nobody, with security off); every answer's raw body is kept."""

    def __init__(self, client: TestClient[web.Request, web.Application], user: str | None) -> None:
        self.client = client
        self.headers = basic(user, USERS[user]) if user is not None else {}
        self.bodies: list[bytes] = []

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        status: int = 200,
        content_type: str = V2,
        accept: str = V2,
    ) -> Any:
        headers = {**self.headers, "Content-Type": content_type, "Accept": accept}
        data = None if body is None else json.dumps(body)
        async with self.client.request(method, path, data=data, headers=headers) as resp:
            raw = await resp.read()
            assert resp.status == status, f"{method} {path}: {resp.status} {raw!r}"
        self.bodies.append(raw)
        return json.loads(raw) if raw else None

    async def create_topic(self, name: str) -> None:
        cluster = (await self.call("GET", "/v3/clusters"))["data"][0]["cluster_id"]
        body = {"topic_name": name, "partitions_count": 2}
        await self.call("POST", f"/v3/clusters/{cluster}/topics", body, status=201)

    async def produce(self, topic: str, value: str) -> None:
        records = {"records": [{"value": base64.b64encode(value.encode()).decode()}]}
        await self.call("POST", f"/topics/{topic}", records, content_type=BINARY)

    async def subscribe_everything(self) -> None:
        config = {"name": "eve-1", "format": "binary", "auto.offset.reset": "earliest"}
        answer = await self.call("POST", "/consumers/g", config)
        assert answer["instance_id"] == "eve-1"
        await self.call("POST", INSTANCE + "/subscription", {"topic_pattern": ".*"}, status=204)

    async def subscription(self) -> list[str]:
        topics: list[str] = (await self.call("GET", INSTANCE + "/subscription"))["topics"]
        return topics

    async def assigned_topics(self) -> set[str]:
        answer = await self.call("GET", INSTANCE + "/assignments")
        return {p["topic"] for p in answer["partitions"]}

    async def read(self, count: int) -> list[tuple[str, str]]:
        """Records until ``count`` arrived; each request waits on the broker for new ones."""
        got: list[tuple[str, str]] = []
        while len(got) < count:
            batch = await self.call("GET", INSTANCE + "/records?timeout=5000", accept=BINARY)
            assert batch, f"no record within 5 s after {got}"
            got += [(r["topic"], base64.b64decode(r["value"]).decode()) for r in batch]
        return sorted(got)


async def _ready(app: web.Application) -> None:
    await app[GROUPS_READY].wait()


async def test_a_pattern_matches_only_the_topics_the_creator_may_read(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _eve_acls())
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        await _ready(broker.app)
        admin, eve = Caller(broker.client, "admin"), Caller(broker.client, "eve")
        for topic in ("secret-hr", "public-a"):
            await admin.create_topic(topic)
            await admin.produce(topic, f"{topic}-1")

        await eve.subscribe_everything()
        assert await eve.subscription() == ["public-a"]
        assert await eve.assigned_topics() == {"public-a"}
        assert await eve.read(1) == [("public-a", "public-a-1")]
        assert await eve.call("GET", INSTANCE + "/records?timeout=0", accept=BINARY) == []

        # a topic created later: matched when allowed, never when not
        for topic in ("secret-2", "public-b"):
            await admin.create_topic(topic)
            await admin.produce(topic, f"{topic}-1")
        assert await eve.assigned_topics() == {"public-a", "public-b"}
        assert await eve.subscription() == ["public-a", "public-b"]
        assert await eve.read(1) == [("public-b", "public-b-1")]

        # the Read ACL revoked: nothing matches any more, and reading is not refused
        await broker.app[SECURITY_STORE].delete_acls(
            validate_filter(resource_type="TOPIC", principal="User:eve")
        )
        assert await eve.call("GET", INSTANCE + "/records?timeout=0", accept=BINARY) == []
        assert await eve.assigned_topics() == set()
        assert await eve.subscription() == []

        assert all(SECRET not in body for body in eve.bodies), [b for b in eve.bodies if SECRET in b]


async def test_a_new_match_never_makes_a_request_wait_for_other_members_to_rejoin(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _eve_acls())
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        await _ready(broker.app)
        admin, eve = Caller(broker.client, "admin"), Caller(broker.client, "eve")
        await admin.create_topic("public-a")
        await eve.subscribe_everything()
        native = {"member_id": "", "topics": ["public-a"], "client_id": "native"}
        member_id = (await admin.call("POST", "/native/v1/groups/g/join", native))["member_id"]

        await admin.create_topic("public-b")
        await admin.produce("public-b", "public-b-1")
        assert await eve.call("GET", INSTANCE + "/records?timeout=0", accept=BINARY) == []
        assert "public-b" not in await eve.assigned_topics()  # the group waits for the native member

        await admin.call("POST", "/native/v1/groups/g/join", {**native, "member_id": member_id})
        assert "public-b" in await eve.assigned_topics()
        assert await eve.read(1) == [("public-b", "public-b-1")]


async def test_explicit_topics_the_creator_may_not_read_are_still_refused(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _eve_acls())
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        await _ready(broker.app)
        admin, eve = Caller(broker.client, "admin"), Caller(broker.client, "eve")
        await admin.create_topic("secret-hr")
        await eve.call("POST", "/consumers/g", {"name": "eve-1", "format": "binary"})
        answer = await eve.call("POST", INSTANCE + "/subscription", {"topics": ["secret-hr"]}, status=403)
        assert answer["error_code"] == 40301


async def test_with_security_off_a_pattern_matches_every_topic(data_dir: Path) -> None:
    async with serve(data_dir, {}) as broker:
        await _ready(broker.app)
        anyone = Caller(broker.client, None)
        for topic in ("secret-hr", "public-a"):
            await anyone.create_topic(topic)
            await anyone.produce(topic, f"{topic}-1")
        await anyone.subscribe_everything()
        assert await anyone.subscription() == ["public-a", "secret-hr"]
        assert await anyone.assigned_topics() == {"public-a", "secret-hr"}
        assert await anyone.read(2) == [("public-a", "public-a-1"), ("secret-hr", "secret-hr-1")]


async def test_a_native_member_joining_by_pattern_is_assigned_only_readable_topics(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _eve_acls())
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        await _ready(broker.app)
        admin, eve = Caller(broker.client, "admin"), Caller(broker.client, "eve")
        for topic in ("secret-hr", "public-a"):
            await admin.create_topic(topic)
        joined = await eve.call(
            "POST",
            "/native/v1/groups/g/join",
            {"pattern": ".*"},
            content_type="application/json",
            accept="application/json",
        )
        synced = await eve.call(
            "POST",
            "/native/v1/groups/g/sync",
            {"member_id": joined["member_id"], "generation": joined["generation"], "assignment": []},
            content_type="application/json",
            accept="application/json",
        )
        assert {entry["topic"] for entry in synced["assignment"]} == {"public-a"}
        assert all(SECRET not in body for body in eve.bodies)
