"""REST v2 ``GET /topics/{topic}`` under ACLs: Describe shows the topic, its configs only with
DescribeConfigs (as Kafka answers configs), and AlterConfigs implies DescribeConfigs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.security.test_authentication import BASIC, basic, bootstrap, serve
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.model import AclBinding
from tierlog.service.web.keys import BROKER

USERS = {"admin": "admin-pw", "reader": "reader-pw", "auditor": "auditor-pw", "operator": "operator-pw"}


def _acls() -> list[AclBinding]:
    # every user may Describe the topic (neither configs operation implies it, in Kafka as here)
    grants = {"reader": [], "auditor": ["DESCRIBE_CONFIGS"], "operator": ["ALTER_CONFIGS"]}
    return [
        validate_binding("TOPIC", "t", "LITERAL", f"User:{user}", "*", operation, "ALLOW")
        for user, extra in grants.items()
        for operation in ["DESCRIBE", *extra]
    ]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    found = tmp_path / "data"
    found.mkdir()
    return found


async def test_configs_are_shown_only_with_describe_configs(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS, _acls())
    async with serve(data_dir, BASIC) as broker:
        await broker.app[BROKER].create_topic("t", 1, {"retention.ms": "3600000"})
        configs = {}
        for user in ("reader", "auditor", "operator"):
            headers = {**basic(user, USERS[user]), "Accept": "application/vnd.kafka.v2+json"}
            async with broker.client.get("/topics/t", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                configs[user] = (await resp.json())["configs"]
        assert configs["reader"] == {}
        assert configs["auditor"]["retention.ms"] == "3600000"
        assert configs["operator"] == configs["auditor"]
