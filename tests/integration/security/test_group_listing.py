"""Listing consumer groups under ACLs, as Kafka's ListGroups: Describe on the Cluster lists every group,
otherwise only the groups the caller may Describe are listed (the others are not named at all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.security.test_authentication import BASIC, basic, bootstrap, serve
from tierlog.service.groups.state import GROUPS_READY
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.model import AclBinding
from tierlog.service.web.keys import BROKER

USERS = {"admin": "admin-pw", "carol": "carol-pw", "dave": "dave-pw"}


def _acls() -> list[AclBinding]:
    return [
        validate_binding("CLUSTER", "kafka-cluster", "LITERAL", "User:carol", "*", "DESCRIBE", "ALLOW"),
        validate_binding("GROUP", "a", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW"),
    ]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    found = tmp_path / "data"
    found.mkdir()
    return found


async def test_describe_on_the_cluster_lists_every_group_else_only_describable_ones(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _acls())
    async with serve(data_dir, BASIC) as broker:
        await broker.app[GROUPS_READY].wait()
        await broker.app[BROKER].create_topic("t", 1, {})
        for group in ("a", "b"):
            async with broker.client.post(
                f"/native/v1/groups/{group}/join", json={"topics": ["t"]}, headers=basic("admin", "admin-pw")
            ) as resp:
                assert resp.status == 200, await resp.text()

        async def listed(user: str) -> tuple[list[str], list[str]]:
            headers = basic(user, USERS[user])
            async with broker.client.get("/native/v1/groups", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                native = [g["group_id"] for g in (await resp.json())["groups"]]
            cluster_id = broker.app[BROKER].cluster_id
            async with broker.client.get(
                f"/v3/clusters/{cluster_id}/consumer-groups", headers=headers
            ) as resp:
                assert resp.status == 200, await resp.text()
                v3 = [g["consumer_group_id"] for g in (await resp.json())["data"]]
            return native, v3

        assert await listed("carol") == (["a", "b"], ["a", "b"])
        assert await listed("dave") == (["a"], ["a"])
