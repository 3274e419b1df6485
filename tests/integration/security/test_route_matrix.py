"""Every route, for every kind of caller, against one real broker with Basic authentication and ACLs.

Callers: anonymous, a wrong password, ``alice`` (literal ACLs allowing what the routes need on her own
resources), ``mallory`` (the same ALLOW ACLs overridden by DENY ACLs), ``pete`` (PREFIXED ACLs only) and
``admin`` (a super user). Each caller works on resources of its own name (topic ``mx-<who>``, group
``mx-<who>-g``) so one caller's writes never change another's answers. The routes are enumerated from the
application's router: a route added without a row here (or in ``authz.ROUTE_ACTIONS``) fails.

A refused request must change nothing: the broker's state (log end offsets, topics, configs, committed
offsets, ACLs, users) is compared before and after every 401 or 403.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from tests.integration.broker import RunningBroker, broker_settings, start_broker
from tierlog.service.groups.state import COORDINATOR
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.authn import AUTHENTICATOR
from tierlog.service.security.authz import AUTHENTICATED, HANDLER, OPEN, ROUTE_ACTIONS, Row
from tierlog.service.security.scram import make_credential
from tierlog.service.security.security_store import SECURITY_STORE, SecurityStore
from tierlog.service.web.keys import BROKER
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

PASSWORDS = {"alice": "alice-secret", "mallory": "mallory-secret", "pete": "pete-secret", "admin": "admin-pw"}
CALLERS = ("anonymous", "wrong", "alice", "mallory", "pete", "admin")
ALLOWED = {"alice", "pete", "admin"}

TOPIC_OPS = ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS")
GROUP_OPS = ("READ", "DESCRIBE")
CLUSTER_OPS = ("DESCRIBE", "ALTER", "CLUSTER_ACTION", "IDEMPOTENT_WRITE")

SETTINGS = {
    "authentication.methods": "basic",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "false",
    "authentication.failure.limit": "100000",
    "offsets.topic.num.partitions": "1",
}
JSON = "application/json"
V2 = "application/vnd.kafka.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
BATCHES = "application/vnd.tierlog.batches"


def topic_of(who: str) -> str:
    return f"mx-{who}"


def group_of(who: str) -> str:
    return f"mx-{who}-g"


def _acl(kind: str, name: str, pattern: str, principal: str, op: str, permission: str) -> Any:
    return validate_binding(kind, name, pattern, principal, "*", op, permission)


def _acls() -> list[Any]:
    acls = []
    for who in ("alice", "mallory"):
        principal = f"User:{who}"
        for name in (topic_of(who), f"{topic_of(who)}-del", f"{topic_of(who)}-new"):
            acls += [_acl("TOPIC", name, "LITERAL", principal, op, "ALLOW") for op in TOPIC_OPS]
        acls += [_acl("GROUP", group_of(who), "LITERAL", principal, op, "ALLOW") for op in GROUP_OPS]
        acls += [_acl("CLUSTER", "kafka-cluster", "LITERAL", principal, op, "ALLOW") for op in CLUSTER_OPS]
    for kind, name in (("TOPIC", "mx-mallory"), ("GROUP", "mx-mallory-g")):
        acls.append(_acl(kind, name, "PREFIXED", "User:mallory", "ALL", "DENY"))
    acls.append(_acl("CLUSTER", "kafka-cluster", "LITERAL", "User:mallory", "ALL", "DENY"))
    pete = "User:pete"
    acls += [_acl("TOPIC", "mx-pe", "PREFIXED", pete, op, "ALLOW") for op in TOPIC_OPS]
    acls += [_acl("GROUP", "mx-pe", "PREFIXED", pete, op, "ALLOW") for op in GROUP_OPS]
    acls += [_acl("CLUSTER", "kafka-cluster", "LITERAL", pete, op, "ALLOW") for op in CLUSTER_OPS]
    return acls


def _headers(who: str) -> dict[str, str]:
    if who == "anonymous":
        return {}
    user, password = ("alice", "not-her-password") if who == "wrong" else (who, PASSWORDS[who])
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class Matrix:
    running: RunningBroker
    cluster_id: str

    async def call(
        self,
        who: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        accept: str | None = None,
    ) -> tuple[int, str]:
        headers = _headers(who)
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if accept is not None:
            headers["Accept"] = accept
        async with self.running.client.request(method, path, data=data, headers=headers) as resp:
            return resp.status, (await resp.read()).decode("utf-8", "replace")


async def _bootstrap(data_dir: Path) -> None:
    """Users and ACLs written offline into the broker's security store, as ``tierlog users add`` does."""
    store = SecurityStore.offline(data_dir)
    await store.start()
    try:
        for name, password in PASSWORDS.items():
            await store.put_user(name, make_credential(password))
        for who in CALLERS:
            await store.put_user(f"u-{who}-del", make_credential("to-be-deleted"))
        await store.create_acls(_acls())
    finally:
        await store.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def matrix(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Matrix]:
    data_dir = tmp_path_factory.mktemp("matrix") / "data"
    data_dir.mkdir()
    await _bootstrap(data_dir)
    running = await start_broker(broker_settings(data_dir, SETTINGS), wait_groups=True)
    running.app[AUTHENTICATOR].failed_basic_floor_s = 0.0  # "wrong" fails on every route; timing not measured
    try:
        m = Matrix(running, running.broker.cluster_id)
        for who in CALLERS:
            for name in (topic_of(who), f"{topic_of(who)}-del"):
                status, text = await m.call(
                    "admin", "POST", f"/v3/clusters/{m.cluster_id}/topics", body={"topic_name": name}
                )
                assert status == 201, text
            records = {"records": [{"value": "YQ=="}, {"value": "Yg=="}]}
            path = f"/topics/{topic_of(who)}/partitions/0"
            status, text = await m.call("admin", "POST", path, body=records, content_type=V2_BINARY)
            assert status == 200, text
            for name in ("inst", "gone"):
                body = {"name": name, "format": "binary"}
                status, text = await m.call(
                    "admin", "POST", f"/consumers/{group_of(who)}", body=body, content_type=V2
                )
                assert status == 200, text
            commit = {"offsets": [{"topic": topic_of(who), "partition": 0, "offset": 1}]}
            path = f"/native/v1/groups/{group_of(who)}/offsets/commit"
            status, text = await m.call("admin", "POST", path, body=commit)
            assert status == 204, text
        yield m
    finally:
        await running.stop()


def _params(who: str, method: str, path: str) -> dict[str, str]:
    topic = topic_of(who)
    deleting = method == "DELETE"
    return {
        "cluster_id": "",
        "broker_id": "0",
        "topic": topic,
        "topic_name": f"{topic}-del" if deleting and path.endswith("{topic_name}") else topic,
        "partition": "0",
        "partition_id": "0",
        "group": group_of(who),
        "instance": "gone" if deleting and path.endswith("{instance}") else "inst",
        "name": (f"u-{who}-del" if deleting else f"u-{who}") if "/users/" in path else "retention.ms",
        "epoch": "0",
    }


def _batch() -> bytes:
    return build_batch([Record(key=None, value=b"native")])


def _request(who: str, method: str, path: str, cluster_id: str) -> tuple[str, dict[str, Any]]:
    """The concrete URL and the body, content type and Accept of a valid request to this route."""
    params = _params(who, method, path)
    params["cluster_id"] = cluster_id
    url = path.format(**params)
    topic = topic_of(who)
    partitions = {"partitions": [{"topic": topic, "partition": 0}]}
    offsets = {"offsets": [{"topic": topic, "partition": 0, "offset": 0}]}
    acl = {
        "resource_type": "TOPIC",
        "resource_name": "zz",
        "pattern_type": "LITERAL",
        "principal": "User:nobody",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/v3/clusters/{cluster_id}/topics"): {"body": {"topic_name": f"{topic}-new"}},
        ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic_name}"): {"body": {"partitions_count": 2}},
        ("POST", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter"): {
            "body": {"data": [{"name": "retention.ms", "value": "7777"}]}
        },
        ("PUT", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}"): {
            "body": {"value": "123456"}
        },
        ("POST", "/v3/clusters/{cluster_id}/acls"): {"body": acl},
        ("POST", "/v3/clusters/{cluster_id}/acls:batch"): {"body": {"data": [acl]}},
        ("PUT", "/v3/clusters/{cluster_id}/users/{name}"): {"body": {"password": "a-new-password"}},
        ("POST", "/topics/{topic}"): {"body": {"records": [{"value": "YQ=="}]}, "content_type": V2_BINARY},
        ("POST", "/topics/{topic}/partitions/{partition}"): {
            "body": {"records": [{"value": "YQ=="}]},
            "content_type": V2_BINARY,
        },
        ("POST", "/native/v1/topics/{topic}/partitions/{partition}/batches"): {
            "body": _batch(),
            "content_type": BATCHES,
            "accept": JSON,
        },
        ("POST", "/consumers/{group}"): {"body": {"name": "new", "format": "binary"}, "content_type": V2},
        ("POST", "/consumers/{group}/instances/{instance}/subscription"): {
            "body": {"topics": [topic]},
            "content_type": V2,
        },
        ("POST", "/consumers/{group}/instances/{instance}/assignments"): {
            "body": partitions,
            "content_type": V2,
        },
        ("POST", "/consumers/{group}/instances/{instance}/positions"): {"body": offsets, "content_type": V2},
        ("POST", "/consumers/{group}/instances/{instance}/positions/beginning"): {
            "body": partitions,
            "content_type": V2,
        },
        ("POST", "/consumers/{group}/instances/{instance}/positions/end"): {
            "body": partitions,
            "content_type": V2,
        },
        ("POST", "/consumers/{group}/instances/{instance}/offsets"): {"body": offsets, "content_type": V2},
        ("GET", "/consumers/{group}/instances/{instance}/offsets"): {"body": partitions, "content_type": V2},
        ("POST", "/native/v1/groups/{group}/join"): {
            "body": {"topics": [topic], "rebalance_timeout_ms": 1000}
        },
        ("POST", "/native/v1/groups/{group}/sync"): {"body": {"member_id": "nobody", "generation": 0}},
        ("POST", "/native/v1/groups/{group}/heartbeat"): {"body": {"member_id": "nobody", "generation": 0}},
        ("POST", "/native/v1/groups/{group}/leave"): {"body": {"member_id": "nobody"}},
        ("POST", "/native/v1/groups/{group}/offsets/commit"): {
            "body": {"offsets": [{"topic": topic, "partition": 0, "offset": 2}]}
        },
        ("POST", "/native/v1/groups/{group}/offsets/fetch"): {"body": partitions},
        ("POST", "/native/v1/replication/alter-partition"): {"body": {}},
    }
    query = {
        "/topics/{topic}/partitions/{partition}/records": ("?offset=0", V2_BINARY),
        "/topics/{topic}/partitions/{partition}/messages": ("?offset=0", V2_BINARY),
        "/native/v1/topics/{topic}/partitions/{partition}/batches": ("?offset=0", None),
        "/native/v1/replication/topics/{topic}/partitions/{partition}/batches": (
            "?offset=0&replica_id=7",
            None,
        ),
        "/consumers/{group}/instances/{instance}/records": ("?timeout=0", V2_BINARY),
        "/consumers/{group}/instances/{instance}/topics/{topic}": ("?timeout=0", V2_BINARY),
        "/v3/clusters/{cluster_id}/acls": ("?principal=User:nobody", None),
    }
    kwargs = dict(bodies.get((method, path), {}))
    if method in {"GET", "HEAD"} and path in query:
        suffix, accept = query[path]
        url += suffix
        if accept is not None:
            kwargs.setdefault("accept", accept)
    if method == "DELETE" and path == "/v3/clusters/{cluster_id}/acls":
        url += "?resource_type=TOPIC&pattern_type=ANY&operation=ANY&permission=ANY&principal=User:nobody"
    return url, kwargs


def _routes() -> list[tuple[str, str]]:
    """Every (method, canonical path) of a broker app built with the matrix settings."""
    from tierlog.service.app import create_app

    app = create_app(broker_settings(Path("/nonexistent-matrix-dir"), SETTINGS))
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    return sorted(routes)


ROUTES = _routes()


def _listing(method: str, path: str, row: Row) -> bool:
    return row is HANDLER and method in {"GET", "HEAD"} and path != "/metrics"


def _expected(who: str, method: str, path: str) -> set[int] | None:
    """The status a caller must get, or None for "allowed": any 2xx or a domain 4xx other than 401/403."""
    row = ROUTE_ACTIONS[(method, path)]
    if row is OPEN:
        return {200}
    if who in {"anonymous", "wrong"}:
        return {401}
    if who == "mallory" and row is not AUTHENTICATED and not _listing(method, path, row):
        return {403}
    return None


def _state(app: web.Application) -> Mapping[str, Any]:
    broker = app[BROKER]
    store = app[SECURITY_STORE]
    coordinator = app[COORDINATOR]
    topics = {t.name: t for t in broker.topics()}
    return {
        "topics": sorted(topics),
        "log_end_offsets": {
            (name, p.index): p.log_end_offset for name, t in topics.items() for p in t.partitions
        },
        "configs": {name: t.configs() for name, t in topics.items() if name.startswith("mx-")},
        "committed": {
            g: coordinator.committed(g, None) for g in coordinator.group_ids() if g.startswith("mx-")
        },
        "acls": store.acls.bindings,
        "users": store.user_names(),
    }


def test_every_route_has_a_row() -> None:
    assert ROUTES
    missing = [route for route in ROUTES if route not in ROUTE_ACTIONS]
    assert not missing, f"routes without a row in authz.ROUTE_ACTIONS: {missing}"


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("route", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
@pytest.mark.parametrize("who", CALLERS)
async def test_route(matrix: Matrix, who: str, route: tuple[str, str]) -> None:
    method, path = route
    url, kwargs = _request(who, method, path, matrix.cluster_id)
    expected = _expected(who, method, path)
    before = _state(matrix.running.app) if expected is not None and 200 not in expected else None
    status, text = await matrix.call(who, method, url, **kwargs)
    if expected is not None:
        assert status in expected, (who, method, url, status, text)
    else:
        assert status not in {401, 403} and status < 500, (who, method, url, status, text)
    if before is not None:
        assert _state(matrix.running.app) == before, f"{who} {method} {url} was refused but changed state"
    if who == "mallory" and _listing(method, path, ROUTE_ACTIONS[route]):
        assert "mx-mallory" not in text, f"{method} {url} lists what mallory may not describe"


SLASHED = [(method, path) for method, path in ROUTES if method == "GET" and "{" in path]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("route", SLASHED, ids=[f"{m} {p}/" for m, p in SLASHED])
@pytest.mark.parametrize("who", ("alice", "mallory"))
async def test_a_trailing_slash_gets_the_answer_of_the_path_without_it(
    matrix: Matrix, who: str, route: tuple[str, str]
) -> None:
    method, path = route
    url, kwargs = _request(who, method, path, matrix.cluster_id)
    plain, _ = await matrix.call(who, method, url, **kwargs)
    bare, mark, query = url.partition("?")
    slashed, text = await matrix.call(who, method, f"{bare}/{mark}{query}", **kwargs)
    assert slashed == plain, (who, method, url, plain, slashed, text)
