"""Authentication against a real broker: challenges, equal refusals, the failure throttle, the verification
cache, bearer tokens, client certificates and forwarded principals.

Users and ACLs are written offline into the broker's security store before it starts, as ``tierlog users
add`` does; password changes go through the running broker's v3 users API.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.integration.broker import broker_settings
from tierlog.service.app import create_app
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.metrics import AUTHENTICATION_FAILURES, AUTHENTICATION_THROTTLED
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.authn import (
    AUTHENTICATOR,
    FAILED_BASIC_FLOOR_S,
    FORWARDED_HOST,
    FORWARDED_PRINCIPAL,
    PBKDF2_THREADS,
)
from tierlog.service.security.model import AclBinding
from tierlog.service.security.scram import make_credential
from tierlog.service.security.security_store import SECURITY_STORE, SecurityStore
from tierlog.service.security.tls import server_context
from tierlog.service.web.keys import BROKER, METRICS

BASIC = {"authentication.methods": "basic", "super.users": "User:admin"}
USERS = {"admin": "admin-pw", "alice": "alice-pw"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Clock:
    """Milliseconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    app: web.Application
    client: TestClient[web.Request, web.Application]

    async def get(self, path: str, headers: Mapping[str, str] | None = None) -> tuple[int, Any, Any]:
        async with self.client.get(path, headers=dict(headers or {})) as resp:
            return resp.status, resp.headers, await resp.read()


async def bootstrap(data_dir: Path, users: Mapping[str, str], acls: list[AclBinding] | None = None) -> None:
    store = SecurityStore.offline(data_dir)
    await store.start()
    try:
        for name, password in users.items():
            await store.put_user(name, make_credential(password))
        if acls:
            await store.create_acls(acls)
    finally:
        await store.close()


@asynccontextmanager
async def serve(
    data_dir: Path,
    overrides: Mapping[str, str],
    *,
    auth_clock: Callable[[], float] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> AsyncIterator[Served]:
    app = create_app(broker_settings(data_dir, overrides), auth_clock=auth_clock)
    server = TestServer(app, host=host)
    client: TestClient[web.Request, web.Application] = TestClient(server)
    try:
        await server.start_server(ssl=ssl_context)
        await client.start_server()
        await app[BROKER].wait_ready()
        await app[SECURITY_STORE].wait_loaded()
        yield Served(app, client)
    finally:
        await client.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    found = tmp_path / "data"
    found.mkdir()
    return found


async def test_missing_credentials_get_the_challenges_of_the_listed_methods(
    data_dir: Path, tmp_path: Path
) -> None:
    await bootstrap(data_dir, USERS)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "k"}]}))
    settings = {
        **BASIC,
        "authentication.methods": "basic,bearer",
        "authentication.bearer.jwks": str(jwks),
        "authentication.bearer.audience": "tierlog",
    }
    async with serve(data_dir, settings) as broker:
        status, headers, body = await broker.get("/topics")
        assert status == 401
        assert headers.getall("WWW-Authenticate") == ['Basic realm="tierlog"', 'Bearer realm="tierlog"']
        assert json.loads(body)["error_code"] == 40101
        for path in ("/health", "/ready", "/openapi.json"):
            status, _, _ = await broker.get(path)
            assert status == 200, path
        status, _, _ = await broker.get("/metrics")
        assert status == 401
        status, _, _ = await broker.get("/topics", basic("admin", "admin-pw"))
        assert status == 200


async def test_unknown_user_and_wrong_password_get_the_same_answer(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS)
    async with serve(data_dir, BASIC) as broker:
        wrong = await broker.get("/topics", basic("alice", "not-it"))
        unknown = await broker.get("/topics", basic("nobody", "not-it"))
        malformed = await broker.get("/topics", {"Authorization": "Basic !!!"})
        for status, headers, body in (wrong, unknown, malformed):
            assert status == 401
            assert headers.getall("WWW-Authenticate") == ['Basic realm="tierlog"']
            assert body == wrong[2]
        assert b"alice" not in wrong[2] and b"nobody" not in unknown[2]
        assert broker.app[METRICS].value(AUTHENTICATION_FAILURES, method="basic") == 3


async def test_an_unknown_user_is_refused_as_slowly_as_the_dearest_credential(data_dir: Path) -> None:
    await bootstrap(data_dir, {})
    store = SecurityStore.offline(data_dir)
    await store.start()
    try:
        await store.put_user("dear", make_credential("dear-pw", "SCRAM-SHA-512", 16384))
    finally:
        await store.close()
    async with serve(data_dir, {**BASIC, "authentication.failure.limit": "1000"}) as broker:

        async def refusal_s(user: str) -> float:
            started = time.perf_counter()
            status, _, _ = await broker.get("/topics", basic(user, "not-it"))
            assert status == 401
            return time.perf_counter() - started

        wrong, unknown = [], []
        for _ in range(7):  # alternating, so load drifts hit both alike
            wrong.append(await refusal_s("dear"))
            unknown.append(await refusal_s("nobody"))
        # unfloored, SHA-512/16384 costs 25-35 ms more than the dummy's SHA-256/4096 on the CI machine; with
        # the floor both answer at it, apart from scheduling jitter
        assert abs(statistics.median(wrong) - statistics.median(unknown)) < 0.015, (wrong, unknown)
        assert min(wrong + unknown) >= FAILED_BASIC_FLOOR_S


async def test_failed_attempts_are_throttled_per_host(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS)
    clock = Clock()
    settings = {**BASIC, "authentication.failure.limit": "3", "authentication.failure.window.ms": "60000"}
    async with serve(data_dir, settings, auth_clock=clock) as broker:
        metrics = broker.app[METRICS]
        for _ in range(3):
            clock.now += 1000
            status, _, _ = await broker.get("/topics", basic("alice", "guess"))
            assert status == 401
        status, headers, body = await broker.get("/topics", basic("alice", "alice-pw"))
        assert status == 429
        assert json.loads(body)["error_code"] == 42901
        assert headers["Retry-After"] == "58"  # the first failure leaves the window 58 s from now
        assert metrics.value(AUTHENTICATION_THROTTLED) == 1
        assert metrics.value(AUTHENTICATION_FAILURES, method="basic") == 3
        clock.now += 58_000
        status, _, _ = await broker.get("/topics", basic("alice", "alice-pw"))
        assert status == 200
        status, _, _ = await broker.get("/health")
        assert status == 200


async def test_a_user_who_did_not_fail_is_let_in_from_a_throttled_address(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS)
    clock = Clock()
    settings = {**BASIC, "authentication.failure.limit": "3", "authentication.failure.window.ms": "60000"}
    async with serve(data_dir, settings, auth_clock=clock) as broker:
        broker.app[AUTHENTICATOR].failed_basic_floor_s = 0  # many failures; their timing is not measured
        metrics = broker.app[METRICS]
        for _ in range(3):
            clock.now += 1000
            status, _, _ = await broker.get("/topics", basic("alice", "guess"))
            assert status == 401
        status, headers, _ = await broker.get("/topics", basic("alice", "alice-pw"))
        assert (status, headers["Retry-After"]) == (429, "58")
        status, _, _ = await broker.get("/topics", basic("admin", "admin-pw"))
        assert status == 200  # same address, a user who did not fail
        # guessing across names: the address ceiling (5 x 3 = 15 failures) stops every name from this host
        for n in range(11):
            status, _, _ = await broker.get("/topics", basic(f"user-{n}", "guess"))
            assert status == 401
        status, _, _ = await broker.get("/topics", basic("admin", "wrong"))
        assert status == 401  # the 15th failure
        for user, password in (("admin", "admin-pw"), ("user-99", "guess")):
            status, headers, body = await broker.get("/topics", basic(user, password))
            assert (status, json.loads(body)["error_code"]) == (429, 42901)
            assert headers["Retry-After"] == "58"
        assert metrics.value(AUTHENTICATION_FAILURES, method="basic") == 15
        assert metrics.value(AUTHENTICATION_THROTTLED) == 3
        clock.now += 58_000  # alice's failures leave the window: the address is below its ceiling again
        status, _, _ = await broker.get("/topics", basic("admin", "admin-pw"))
        assert status == 200


async def test_a_burst_of_guesses_from_one_host_starts_at_most_limit_verifications(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS)
    settings = {**BASIC, "authentication.failure.limit": "3", "authentication.failure.window.ms": "60000"}
    earlier = set(threading.enumerate())
    async with serve(data_dir, settings, auth_clock=Clock()) as broker:
        burst = [broker.get("/topics", basic("alice", f"guess-{i}")) for i in range(11)]
        statuses = sorted(status for status, _, _ in await asyncio.gather(*burst))
        assert statuses == [401] * 3 + [429] * 8  # the guesses in flight filled the limit
        metrics = broker.app[METRICS]
        assert metrics.value(AUTHENTICATION_FAILURES, method="basic") == 3
        assert metrics.value(AUTHENTICATION_THROTTLED) == 8
        pool = [t for t in set(threading.enumerate()) - earlier if t.name.startswith("tierlog-pbkdf2")]
        assert 1 <= len(pool) <= PBKDF2_THREADS  # the authenticator's own pool, not the default executor
    for thread in pool:
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive()  # closing the app shut the pool down


async def test_a_password_change_drops_the_cached_verification(data_dir: Path) -> None:
    await bootstrap(data_dir, USERS)
    async with serve(data_dir, BASIC) as broker:
        old = basic("alice", "alice-pw")
        status, _, _ = await broker.get("/topics", old)
        assert status == 200  # verified once, now cached
        cluster_id = broker.app[BROKER].cluster_id
        async with broker.client.put(
            f"/v3/clusters/{cluster_id}/users/alice",
            json={"password": "new-pw"},
            headers=basic("admin", "admin-pw"),
        ) as resp:
            assert resp.status == 200, await resp.text()
        status, _, _ = await broker.get("/topics", old)
        assert status == 401
        status, _, _ = await broker.get("/topics", basic("alice", "new-pw"))
        assert status == 200


async def test_bearer_tokens_against_a_jwks_file(data_dir: Path, tmp_path: Path) -> None:
    acls = [validate_binding("TOPIC", "*", "LITERAL", "User:carol", "*", "DESCRIBE", "ALLOW")]
    await bootstrap(data_dir, {}, acls)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(
        json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "k1"}]})
    )
    settings = {
        "authentication.methods": "bearer",
        "authentication.bearer.jwks": str(jwks),
        "authentication.bearer.audience": "tierlog",
    }

    def token(signer: rsa.RSAPrivateKey, **claims: Any) -> dict[str, str]:
        now = time.time()
        body = {"sub": "carol", "aud": "tierlog", "iat": now, "exp": now + 300, **claims}
        return {
            "Authorization": "Bearer " + jwt.encode(body, signer, algorithm="RS256", headers={"kid": "k1"})
        }

    async with serve(data_dir, settings) as broker:
        status, _, body = await broker.get("/topics", token(key))
        assert status == 200, body
        status, _, body = await broker.get(f"/v3/clusters/{broker.app[BROKER].cluster_id}", token(key))
        assert status == 403 and b"User:carol" not in body
        for refused in (token(other), token(key, aud="elsewhere"), token(key, exp=time.time() - 60)):
            status, headers, _ = await broker.get("/topics", refused)
            assert status == 401
            assert headers.getall("WWW-Authenticate") == ['Bearer realm="tierlog"']
        assert broker.app[METRICS].value(AUTHENTICATION_FAILURES, method="bearer") == 3
        status, _, _ = await broker.get("/topics", basic("carol", "whatever"))
        assert status == 401  # basic is not listed


async def test_a_forwarded_principal_is_honoured_from_a_super_user(data_dir: Path) -> None:
    acls = [validate_binding("TOPIC", "open", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")]
    await bootstrap(data_dir, USERS, acls)
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}) as broker:
        await broker.app[BROKER].create_topic("open", 1)
        await broker.app[BROKER].create_topic("secret", 1)
        as_alice = {FORWARDED_PRINCIPAL: "User:alice", FORWARDED_HOST: "10.0.0.9"}
        status, _, _ = await broker.get("/topics/secret", {**basic("admin", "admin-pw"), **as_alice})
        assert status == 403  # the super user forwards alice's request: it runs as alice
        status, _, _ = await broker.get("/topics/open", {**basic("admin", "admin-pw"), **as_alice})
        assert status == 200
        as_admin = {FORWARDED_PRINCIPAL: "User:admin"}
        status, _, _ = await broker.get("/topics/secret", {**basic("alice", "alice-pw"), **as_admin})
        assert status == 403  # alice may not act for others: the header is ignored


@pytest.mark.parametrize(
    ("everyone", "cluster_acls"),
    [
        ("true", []),  # nothing names the Cluster: everyone may ClusterAction it
        ("false", [("User:alice", "CLUSTER_ACTION")]),  # an ALLOW ClusterAction ACL for alice
    ],
    ids=["allow-everyone", "cluster-action-acl"],
)
async def test_only_a_super_user_may_forward_a_principal(
    data_dir: Path, everyone: str, cluster_acls: list[tuple[str, str]]
) -> None:
    acls = [validate_binding("TOPIC", "secret", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW")]
    acls += [
        validate_binding("CLUSTER", "kafka-cluster", "LITERAL", p, "*", op, "ALLOW") for p, op in cluster_acls
    ]
    await bootstrap(data_dir, USERS, acls)
    settings = {**BASIC, "auto.create.topics.enable": "false", "allow.everyone.if.no.acl.found": everyone}
    async with serve(data_dir, settings) as broker:
        await broker.app[BROKER].create_topic("secret", 1)
        as_admin = {**basic("alice", "alice-pw"), FORWARDED_PRINCIPAL: "User:admin"}
        status, _, _ = await broker.get("/topics/secret", as_admin)
        assert status == 403  # alice as herself: only bob may describe it
        if cluster_acls:  # the Cluster is named and alice may not Alter it: as admin she could
            url = f"/v3/clusters/{broker.app[BROKER].cluster_id}/users/admin"
            async with broker.client.put(url, json={"password": "taken-over"}, headers=as_admin) as resp:
                assert resp.status == 403
            status, _, _ = await broker.get("/topics/secret", basic("admin", "admin-pw"))
            assert status == 200


async def test_a_host_scoped_deny_applies_to_an_ipv4_client_of_a_dual_stack_listener(data_dir: Path) -> None:
    acls = [
        validate_binding("TOPIC", "*", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
        validate_binding("TOPIC", "secret", "LITERAL", "User:alice", "127.0.0.1", "DESCRIBE", "DENY"),
    ]
    await bootstrap(data_dir, USERS, acls)
    async with serve(data_dir, {**BASIC, "auto.create.topics.enable": "false"}, host="::") as broker:
        await broker.app[BROKER].create_topic("open", 1)
        await broker.app[BROKER].create_topic("secret", 1)
        port = broker.client.server.port
        ipv4 = f"http://127.0.0.1:{port}"  # the listener sees this client as ::ffff:127.0.0.1
        async with broker.client.session.get(
            ipv4 + "/topics/secret", headers=basic("alice", "alice-pw")
        ) as resp:
            assert resp.status == 403
        async with broker.client.session.get(
            ipv4 + "/topics/open", headers=basic("alice", "alice-pw")
        ) as resp:
            assert resp.status == 200
        forwarded = {FORWARDED_PRINCIPAL: "User:alice", FORWARDED_HOST: "::ffff:127.0.0.1"}
        async with broker.client.session.get(
            f"http://[::1]:{port}/topics/secret", headers={**basic("admin", "admin-pw"), **forwarded}
        ) as resp:
            assert resp.status == 403  # alice's forwarded host is the IPv4 one the DENY names


async def test_client_certificates_map_to_principals(data_dir: Path, tmp_path: Path) -> None:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("alice@example.com", common_name="alice")
    paths = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "server.pem",
        "key": tmp_path / "server.key",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server_cert.private_key_pem.write_to_path(str(paths["key"]))
    acls = [validate_binding("TOPIC", "*", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")]
    await bootstrap(data_dir, USERS, acls)
    settings = {
        **BASIC,
        "authentication.methods": "mtls,basic",
        "ssl.certfile": str(paths["cert"]),
        "ssl.keyfile": str(paths["key"]),
        "ssl.cafile": str(paths["ca"]),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/L,DEFAULT",
    }
    context = server_context(broker_settings(data_dir, settings).security)
    async with serve(data_dir, settings, ssl_context=context) as broker:
        with_cert = ssl.create_default_context()
        ca.configure_trust(with_cert)
        client_cert.configure_cert(with_cert)
        without_cert = ssl.create_default_context()
        ca.configure_trust(without_cert)
        url = str(broker.client.make_url("/topics")).replace("http://", "https://")
        async with broker.client.session.get(url, ssl=with_cert) as resp:
            assert resp.status == 200, await resp.text()
        cluster = str(broker.client.make_url(f"/v3/clusters/{broker.app[BROKER].cluster_id}"))
        async with broker.client.session.get(cluster.replace("http://", "https://"), ssl=with_cert) as resp:
            assert resp.status == 403  # alice from her certificate, not a super user
        async with broker.client.session.get(url, ssl=without_cert) as resp:
            assert resp.status == 401
        async with broker.client.session.get(
            url, ssl=without_cert, headers=basic("admin", "admin-pw")
        ) as resp:
            assert resp.status == 200


async def test_authenticated_routes_wait_for_the_cluster_security_store(data_dir: Path) -> None:
    store = LocalMetadataStore()
    await store.start()
    try:
        shared = SecurityStore(store, owns_store=False)
        await shared.start()
        await shared.put_user("admin", make_credential("admin-pw"))
        await shared.close()
        gate = asyncio.Event()
        settings = {**BASIC, "broker.id": "1"}
        app = create_app(broker_settings(data_dir, settings), metadata_store=store, startup_gate=gate)
        client: TestClient[web.Request, web.Application] = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        try:
            async with client.get("/topics", headers=basic("admin", "admin-pw")) as resp:
                assert resp.status == 503  # the node has not started the metadata store yet
                assert (await resp.json())["error_code"] == 50301
            async with client.get("/health") as resp:
                assert resp.status == 200
            app[BROKER].advertise(str(client.make_url("")).rstrip("/"))
            gate.set()
            await app[SECURITY_STORE].wait_loaded()
            await app[BROKER].wait_ready()
            async with client.get("/topics", headers=basic("admin", "admin-pw")) as resp:
                assert resp.status == 200
        finally:
            await client.close()
    finally:
        await store.close()


async def test_security_off_is_anonymous_and_unchallenged(data_dir: Path) -> None:
    async with serve(data_dir, {}) as broker:
        status, headers, _ = await broker.get("/topics")
        assert status == 200
        assert "WWW-Authenticate" not in headers
        status, _, _ = await broker.get("/metrics")
        assert status == 200
