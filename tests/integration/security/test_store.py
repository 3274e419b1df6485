"""The security store on a real metadata store: a LocalMetadataStore (in memory and persisted to the
local metadata file of a data directory) and a real etcd process.

Two SecurityStores on one metadata store stand for two brokers of a cluster: each must see the other's
writes through its watch. Waits are on the store's own signals (``wait_for`` a revision, user-change
callbacks), never on sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tierlog.service.cluster.etcd_store import EtcdMetadataStore
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import MetadataStore, Put
from tierlog.service.security.acl import validate_binding, validate_filter
from tierlog.service.security.model import AclBinding
from tierlog.service.security.scram import (
    ScramCredential,
    decode_user,
    encode_user,
    make_credential,
    verify,
)
from tierlog.service.security.security_store import (
    SecurityStore,
    acl_key,
    decode_acls,
    encode_acls,
    parse_acl_key,
    user_key,
)
from tierlog.service.settings.config import parse_metadata_uri
from tierlog.service.topics.data_dir import CLUSTER_METADATA_FILE
from tierlog.wire.errors import InvalidRequestError, NotFoundError, UnavailableError

ALICE_PASSWORD = "alice-secret"


def acl(
    name: str,
    principal: str = "User:alice",
    operation: str = "READ",
    *,
    kind: str = "TOPIC",
    pattern: str = "LITERAL",
    permission: str = "ALLOW",
    host: str = "*",
) -> AclBinding:
    return validate_binding(kind, name, pattern, principal, host, operation, permission)


@pytest.fixture(scope="module")
def alice_credential() -> ScramCredential:
    return make_credential(ALICE_PASSWORD, "SCRAM-SHA-256", 4096)


@dataclass
class Pair:
    """Two security stores over one backing store (two brokers), and a raw client of that backing."""

    a: SecurityStore
    b: SecurityStore
    raw: MetadataStore

    async def revision(self) -> int:
        return (await self.raw.range(""))[1]

    async def settle(self) -> None:
        """Wait until both security stores reflect everything written so far."""
        await self.a.sync()
        await self.b.sync()


@pytest.fixture(params=["local", pytest.param("etcd", marks=pytest.mark.integration)])
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    opened: list[SecurityStore] = []
    raw: MetadataStore
    if request.param == "local":
        raw = LocalMetadataStore()
        await raw.start()
        make: Callable[[], SecurityStore] = lambda: SecurityStore(raw, owns_store=False)  # noqa: E731
    else:
        uri = parse_metadata_uri(request.getfixturevalue("etcd_uri"))
        raw = EtcdMetadataStore(uri)
        await raw.start()
        make = lambda: SecurityStore(EtcdMetadataStore(uri), owns_store=True)  # noqa: E731
    try:
        for _ in range(2):
            store = make()
            await store.start()
            opened.append(store)
        yield Pair(opened[0], opened[1], raw)
    finally:
        for store in opened:
            await store.close()
        await raw.close()


# ---- keys and values ------------------------------------------------------------------------------------


def test_acl_keys_and_values_round_trip() -> None:
    bindings = {acl("a/b c", "User:x"), acl("a/b c", "User:y", "WRITE", permission="DENY", host="10.0.0.1")}
    key = acl_key(next(iter(bindings)).resource_type, next(iter(bindings)).pattern_type, "a/b c")
    assert key == "security/acls/TOPIC/LITERAL/a%2Fb%20c"
    assert parse_acl_key(key)[2] == "a/b c"
    assert decode_acls(key, encode_acls(bindings)) == bindings
    assert encode_acls(bindings) == encode_acls(sorted(bindings, key=str, reverse=True))
    assert user_key("alice") == "security/users/alice"
    assert user_key("a/b") == "security/users/a%2Fb"
    for bad in ("", " alice", "a\nb", "x" * 256):
        with pytest.raises(InvalidRequestError):
            user_key(bad)


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("security/acls/TOPIC/LITERAL/t", b"not json"),
        ("security/acls/TOPIC/LITERAL/t", b'{"format": 2, "acls": []}'),
        ("security/acls/TOPIC/LITERAL/t", b'{"format": 1, "acls": [{"principal": "nobody"}]}'),
        ("security/acls/NOPE/LITERAL/t", b'{"format": 1, "acls": []}'),
        ("security/acls/TOPIC/MATCH/t", b'{"format": 1, "acls": []}'),
        ("security/acls/TOPIC/t", b'{"format": 1, "acls": []}'),
    ],
)
def test_malformed_acl_values_are_value_errors(key: str, raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_acls(key, raw)


# ---- two stores, one backing ----------------------------------------------------------------------------


async def test_two_stores_see_each_others_users(pair: Pair, alice_credential: ScramCredential) -> None:
    changed: asyncio.Queue[str] = asyncio.Queue()
    pair.b.on_user_change(changed.put_nowait)

    assert await pair.a.put_user("alice", alice_credential) is True
    assert pair.a.user_names() == ["alice"]  # a write is visible to its writer when it returns
    assert await asyncio.wait_for(changed.get(), 20) == "alice"
    seen = pair.b.user("alice")
    assert seen is not None and verify(seen["SCRAM-SHA-256"], ALICE_PASSWORD)

    other = make_credential("alice-512", "SCRAM-SHA-512", 8192)
    assert await pair.b.put_user("alice", other) is False  # a new password replaces the old one
    await pair.settle()
    replaced = pair.a.user("alice")
    assert replaced is not None and list(replaced) == ["SCRAM-SHA-512"]
    assert replaced["SCRAM-SHA-512"].iterations == 8192

    await pair.b.remove_user("alice")
    await pair.settle()
    assert pair.a.user("alice") is None and pair.a.user_names() == []
    with pytest.raises(NotFoundError):
        await pair.a.remove_user("alice")


async def test_a_password_replaces_every_mechanism_of_a_kafka_shaped_user(pair: Pair) -> None:
    old = {m: make_credential("old-pw", m) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
    await pair.raw.commit([], [Put(user_key("alice"), encode_user(old))])  # as another tool may write it
    await pair.settle()
    assert sorted(pair.a.user("alice") or {}) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]

    new = make_credential("new-pw", "SCRAM-SHA-512")
    assert await pair.a.put_user("alice", new) is False
    await pair.settle()
    for store in (pair.a, pair.b):
        held = store.user("alice")
        assert held is not None and list(held) == ["SCRAM-SHA-512"]
        assert verify(held["SCRAM-SHA-512"], "new-pw") and not verify(held["SCRAM-SHA-512"], "old-pw")
    stored = await pair.raw.get(user_key("alice"))
    assert stored is not None and list(decode_user(stored.value)) == ["SCRAM-SHA-512"]


async def test_two_stores_see_each_others_acls(pair: Pair) -> None:
    first = [acl("orders"), acl("orders", "User:bob", "WRITE"), acl("pay", pattern="PREFIXED")]
    await pair.a.create_acls(first)
    assert pair.a.acls.bindings == frozenset(first)
    await pair.settle()
    assert pair.b.acls.bindings == frozenset(first)

    await pair.b.create_acls([acl("orders")])  # idempotent: nothing written
    revision = await pair.revision()
    await pair.b.create_acls(first)
    assert await pair.revision() == revision

    group = acl("readers", kind="GROUP")
    await pair.b.create_acls([group])
    await pair.settle()
    assert pair.a.acls.bindings == frozenset([*first, group])


async def test_delete_by_filter(pair: Pair) -> None:
    everything = [
        acl("orders"),
        acl("orders", "User:bob", "WRITE"),
        acl("ord", pattern="PREFIXED"),
        acl("*", "User:carol", "DESCRIBE"),
        acl("other"),
        acl("orders", kind="GROUP"),
        acl("kafka-cluster", kind="CLUSTER", operation="ALTER", permission="DENY"),
    ]
    await pair.a.create_acls(everything)

    assert await pair.b.delete_acls(validate_filter(principal="User:nobody")) == []
    gone = await pair.b.delete_acls(validate_filter("TOPIC", "orders", "MATCH"))
    assert set(gone) == {everything[0], everything[1], everything[2], everything[3]}
    assert gone == sorted(gone, key=lambda b: (b.pattern_type.name, b.resource_name, b.principal))
    assert pair.b.acls.bindings == frozenset(everything[4:])

    gone = await pair.b.delete_acls(validate_filter(operation="ALTER", permission="DENY"))
    assert gone == [everything[6]]
    await pair.settle()
    assert pair.a.acls.bindings == frozenset(everything[4:6])
    assert pair.a.acls.select(validate_filter(resource_type="GROUP")) == [everything[5]]

    remaining = await pair.a.delete_acls(validate_filter())
    assert set(remaining) == set(everything[4:6])
    await pair.settle()
    assert pair.b.acls.bindings == frozenset()
    assert (await pair.raw.range("security/acls/"))[0] == []  # emptied keys are deleted, not left empty


async def test_concurrent_writers_both_land(pair: Pair) -> None:
    mine = [acl("shared", f"User:a{n}") for n in range(5)]
    theirs = [acl("shared", f"User:b{n}") for n in range(5)]
    await asyncio.gather(*(pair.a.create_acls([b]) for b in mine), *(pair.b.create_acls([b]) for b in theirs))
    await pair.settle()
    assert pair.a.acls.bindings == pair.b.acls.bindings == frozenset([*mine, *theirs])


async def test_malformed_values_are_logged_and_skipped(
    pair: Pair, alice_credential: ScramCredential, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="tierlog.security.store")
    await pair.raw.commit(
        [],
        [
            Put("security/users/mallory", b"{not json"),
            Put("security/acls/TOPIC/LITERAL/bad", b'{"format": 1, "acls": [{"host": "*"}]}'),
            Put("security/acls/WHAT/EVER", b"{}"),
        ],
    )
    await pair.a.put_user("alice", alice_credential)
    await pair.a.create_acls([acl("good")])
    await pair.settle()
    for store in (pair.a, pair.b):
        assert store.user_names() == ["alice"]
        assert store.acls.bindings == frozenset([acl("good")])
    assert "security/users/mallory" in caplog.text and "security/acls/TOPIC/LITERAL/bad" in caplog.text

    # a later start reads the same malformed keys and skips them too
    third = SecurityStore(pair.raw, owns_store=False)
    await third.start()
    try:
        assert third.user_names() == ["alice"] and third.acls.bindings == frozenset([acl("good")])
        await third.put_user("mallory", alice_credential)  # a malformed record is replaced by a write
        assert third.user_names() == ["alice", "mallory"]
    finally:
        await third.close()


async def test_invalid_writes_are_refused(pair: Pair, alice_credential: ScramCredential) -> None:
    with pytest.raises(InvalidRequestError):
        await pair.a.put_user("", alice_credential)
    bad = acl("t")
    with pytest.raises(InvalidRequestError):
        await pair.a.create_acls([AclBinding(bad.resource_type, "t", bad.pattern_type, "nobody", "*",
                                             bad.operation, bad.permission)])  # fmt: skip
    assert pair.a.acls.bindings == frozenset()


# ---- the offline store in a data directory, and watches that break ----------------------------------------


async def test_offline_store_persists_across_reopen(
    tmp_path: Path, alice_credential: ScramCredential
) -> None:
    store = SecurityStore.offline(tmp_path)
    await store.start()
    await store.put_user("alice", alice_credential)
    await store.create_acls([acl("orders"), acl("pay", pattern="PREFIXED", permission="DENY")])
    await store.delete_acls(validate_filter(resource_name="orders"))
    await store.close()
    assert (tmp_path / CLUSTER_METADATA_FILE).is_file()

    again = SecurityStore.offline(tmp_path)
    await again.start()
    try:
        credentials = again.user("alice")
        assert credentials is not None and verify(credentials["SCRAM-SHA-256"], ALICE_PASSWORD)
        assert again.acls.bindings == frozenset([acl("pay", pattern="PREFIXED", permission="DENY")])
        await again.remove_user("alice")
    finally:
        await again.close()

    last = SecurityStore.offline(tmp_path)
    await last.start()
    assert last.user_names() == []
    await last.close()


async def test_a_broken_watch_is_followed_by_a_reload(alice_credential: ScramCredential) -> None:
    raw = LocalMetadataStore(history_limit=1)  # a watcher more than one revision behind breaks
    await raw.start()
    store = SecurityStore(raw, owns_store=False)
    await store.start()
    changed: asyncio.Queue[str] = asyncio.Queue()
    store.on_user_change(changed.put_nowait)
    try:
        for name in ("u1", "u2", "u3"):  # three commits before the watch task runs: its watch breaks
            await raw.commit([], [Put(user_key(name), b"")])
        for name in ("u1", "u2", "u3"):
            await raw.commit([], [Put(user_key(name), _encoded(alice_credential))])
        await store.sync()
        assert store.user_names() == ["u1", "u2", "u3"]
        assert {await asyncio.wait_for(changed.get(), 20) for _ in range(3)} == {"u1", "u2", "u3"}
    finally:
        await store.close()
        await raw.close()


async def test_a_closed_store_refuses_writes(alice_credential: ScramCredential) -> None:
    raw = LocalMetadataStore()
    await raw.start()
    store = SecurityStore(raw, owns_store=False)
    with pytest.raises(UnavailableError):
        await store.put_user("alice", alice_credential)  # not started
    await store.start()
    await store.close()
    await store.close()  # idempotent
    for write in (store.put_user("alice", alice_credential), store.delete_acls(validate_filter())):
        with pytest.raises(UnavailableError):
            await write
    assert (await raw.range("security/"))[0] == []
    await raw.close()


def _encoded(credential: ScramCredential) -> bytes:
    from tierlog.service.security.scram import encode_user

    return encode_user({credential.mechanism: credential})
