"""The ACL decision against a brute-force model, Kafka's documented examples, and input validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.security.acl import (
    AclAuthorizer,
    AclSnapshot,
    canonical_host,
    implied_by,
    matches,
    validate_binding,
    validate_filter,
)
from tierlog.service.security.model import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from tierlog.wire.errors import InvalidRequestError

ALICE = Principal.user("alice")
BOB = Principal.user("bob")
HOST = "10.0.0.1"
OPS = [op for op in Operation if op is not Operation.ANY]


def acl(
    name: str,
    op: str,
    permission: str = "ALLOW",
    *,
    pattern: str = "LITERAL",
    principal: str = "User:alice",
    host: str = "*",
    kind: str = "TOPIC",
) -> AclBinding:
    return validate_binding(kind, name, pattern, principal, host, op, permission)


def authorizer(
    *bindings: AclBinding, everyone: bool = False, supers: frozenset[str] = frozenset()
) -> AclAuthorizer:
    return AclAuthorizer(
        AclSnapshot(frozenset(bindings)), super_users=supers, allow_everyone_if_no_acl_found=everyone
    )


# --- the reference: a plain loop over every binding ---------------------------------------------------


def names_resource(b: AclBinding, kind: ResourceType, name: str) -> bool:
    if b.resource_type is not kind:
        return False
    if b.pattern_type is PatternType.LITERAL:
        return b.resource_name in (name, "*")
    return name.startswith(b.resource_name)


def applies(b: AclBinding, principal: Principal, host: str) -> bool:
    return b.principal in (str(principal), "User:*") and b.host in (host, "*")


def reference(
    bindings: frozenset[AclBinding],
    supers: frozenset[str],
    everyone: bool,
    principal: Principal,
    host: str,
    op: Operation,
    kind: ResourceType,
    name: str,
) -> bool:
    if str(principal) in supers:
        return True
    named = [b for b in bindings if names_resource(b, kind, name)]
    if not named:
        return everyone
    for b in named:
        if (
            applies(b, principal, host)
            and b.permission is Permission.DENY
            and b.operation in (op, Operation.ALL)
        ):
            return False
    granting = {op, Operation.ALL}
    if op is Operation.DESCRIBE:
        granting |= {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    if op is Operation.DESCRIBE_CONFIGS:
        granting.add(Operation.ALTER_CONFIGS)
    return any(
        applies(b, principal, host) and b.permission is Permission.ALLOW and b.operation in granting
        for b in named
    )


NAMES = ["a", "ab", "abc", "b", "ba"]
bindings_strategy = st.builds(
    lambda kind, name, pattern, principal, host, op, perm: validate_binding(
        kind,
        "*" if (name == "*" and pattern == "LITERAL") else name.strip("*") or "a",
        pattern,
        principal,
        host,
        op,
        perm,
    ),
    st.sampled_from(["TOPIC", "GROUP"]),
    st.sampled_from([*NAMES, "*"]),
    st.sampled_from(["LITERAL", "PREFIXED"]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from([HOST, "10.0.0.2", "*"]),
    st.sampled_from(
        [
            Operation.READ,
            Operation.WRITE,
            Operation.DESCRIBE,
            Operation.ALL,
            Operation.ALTER_CONFIGS,
            Operation.DESCRIBE_CONFIGS,
        ]
    ),
    st.sampled_from(["ALLOW", "DENY"]),
)


@given(
    bindings=st.frozensets(bindings_strategy, max_size=8),
    everyone=st.booleans(),
    principal=st.sampled_from([ALICE, BOB, Principal.user("admin")]),
    host=st.sampled_from([HOST, "10.0.0.2"]),
    op=st.sampled_from(OPS),
    kind=st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    name=st.sampled_from([*NAMES, "abcd", "c"]),
)
def test_authorize_agrees_with_the_reference(
    bindings: frozenset[AclBinding],
    everyone: bool,
    principal: Principal,
    host: str,
    op: Operation,
    kind: ResourceType,
    name: str,
) -> None:
    supers = frozenset({"User:admin"})
    auth = AclAuthorizer(AclSnapshot(bindings), super_users=supers, allow_everyone_if_no_acl_found=everyone)
    expected = reference(bindings, supers, everyone, principal, host, op, kind, name)
    assert auth.authorize(principal, host, op, kind, name) is expected
    assert auth.authorize(principal, host, op, kind, name) is expected  # from the cache


@given(
    bindings=st.frozensets(bindings_strategy, max_size=8),
    everyone=st.booleans(),
    principal=st.sampled_from([ALICE, BOB]),
    host=st.sampled_from([HOST, "10.0.0.2"]),
    op=st.sampled_from(OPS),
    kind=st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
)
def test_authorize_any_is_true_exactly_when_some_resource_is_allowed(
    bindings: frozenset[AclBinding],
    everyone: bool,
    principal: Principal,
    host: str,
    op: Operation,
    kind: ResourceType,
) -> None:
    auth = AclAuthorizer(
        AclSnapshot(bindings), super_users=frozenset(), allow_everyone_if_no_acl_found=everyone
    )
    # Every ACL name, each extended by a character no ACL uses, and a name nothing covers are enough
    # witnesses: any other name is decided the same way as one of them.
    candidates = {"zz", *NAMES, *(n + "~" for n in NAMES), *(n + "~" for n in ("", "a", "b"))}
    expected = any(
        reference(bindings, frozenset(), everyone, principal, host, op, kind, n) for n in candidates
    )
    assert auth.authorize_any(principal, host, op, kind) is expected


# --- Kafka's documented examples ----------------------------------------------------------------------------


def test_prefixed_allow_with_a_literal_deny() -> None:
    auth = authorizer(
        acl("payments.", "READ", pattern="PREFIXED"),
        acl("payments.secret", "READ", "DENY"),
    )
    assert auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "payments.orders")
    assert not auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "payments.secret")
    assert not auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "payment")
    assert not auth.authorize(BOB, HOST, Operation.READ, ResourceType.TOPIC, "payments.orders")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC, "payments.orders")


def test_deny_wins_over_allow_and_all() -> None:
    auth = authorizer(acl("t", "ALL"), acl("t", "WRITE", "DENY", principal="User:*"))
    assert auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC, "t")
    deny_all = authorizer(acl("t", "READ"), acl("*", "ALL", "DENY"))
    assert not deny_all.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "t")


def test_super_users_are_allowed_despite_a_deny() -> None:
    auth = authorizer(acl("t", "ALL", "DENY", principal="User:*"), supers=frozenset({"User:admin"}))
    assert auth.authorize(Principal.user("admin"), HOST, Operation.DELETE, ResourceType.TOPIC, "t")
    assert auth.authorize_any(Principal.user("admin"), HOST, Operation.DELETE, ResourceType.TOPIC)
    assert not auth.authorize(ALICE, HOST, Operation.DELETE, ResourceType.TOPIC, "t")


def test_allow_everyone_applies_only_to_resources_no_acl_names() -> None:
    auth = authorizer(acl("t", "READ", principal="User:bob"), everyone=True)
    assert auth.authorize(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC, "other")
    assert not auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "t")
    assert not authorizer().authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "other")
    assert authorizer(everyone=True).authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "other")


def test_implications() -> None:
    for op in ("READ", "WRITE", "DELETE", "ALTER"):
        auth = authorizer(acl("t", op))
        assert auth.authorize(ALICE, HOST, Operation.DESCRIBE, ResourceType.TOPIC, "t"), op
        assert not auth.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "t"), op
    auth = authorizer(acl("t", "AlterConfigs"))
    assert auth.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Operation.DESCRIBE, ResourceType.TOPIC, "t")
    # A deny of Describe does not deny Read; implications only widen ALLOWs.
    auth = authorizer(acl("t", "READ"), acl("t", "DESCRIBE", "DENY"))
    assert auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, "t")
    assert not auth.authorize(ALICE, HOST, Operation.DESCRIBE, ResourceType.TOPIC, "t")
    assert implied_by(Operation.CREATE) == {Operation.CREATE, Operation.ALL}


def test_hosts_and_wildcard_principal() -> None:
    auth = authorizer(acl("t", "READ", principal="User:*", host=HOST))
    assert auth.authorize(BOB, HOST, Operation.READ, ResourceType.TOPIC, "t")
    assert not auth.authorize(BOB, "10.9.9.9", Operation.READ, ResourceType.TOPIC, "t")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::FFFF:10.0.0.1", "10.0.0.1"),
        (" 10.0.0.1 ", "10.0.0.1"),
        ("0:0::1", "::1"),
        ("2001:DB8::0:1", "2001:db8::1"),
        ("*", "*"),
        ("broker-1.example", "broker-1.example"),
        ("", ""),
    ],
)
def test_canonical_host(text: str, canonical: str) -> None:
    assert canonical_host(text) == canonical


def test_a_host_scoped_deny_matches_an_ipv4_client_seen_through_a_dual_stack_listener() -> None:
    deny = acl("t", "READ", "DENY", host="::ffff:127.0.0.1")
    assert deny.host == "127.0.0.1"
    auth = authorizer(acl("t", "READ"), deny)
    assert not auth.authorize(
        ALICE, canonical_host("::ffff:127.0.0.1"), Operation.READ, ResourceType.TOPIC, "t"
    )
    assert auth.authorize(ALICE, canonical_host("::ffff:127.0.0.2"), Operation.READ, ResourceType.TOPIC, "t")
    assert validate_filter(host="::ffff:127.0.0.1").host == "127.0.0.1"


def test_authorize_any_for_idempotent_write() -> None:
    auth = authorizer(acl("orders", "WRITE"), acl("ord", "WRITE", "DENY", pattern="PREFIXED"))
    assert not auth.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)
    auth = authorizer(acl("orders", "WRITE"), acl("orders-x", "WRITE", "DENY", pattern="PREFIXED"))
    assert auth.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)
    assert not auth.authorize_any(BOB, HOST, Operation.WRITE, ResourceType.TOPIC)
    assert not auth.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.GROUP)
    everyone_but_wildcard = authorizer(acl("*", "READ", principal="User:bob"), everyone=True)
    assert not everyone_but_wildcard.authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)
    assert authorizer(everyone=True).authorize_any(ALICE, HOST, Operation.WRITE, ResourceType.TOPIC)


def test_any_is_not_an_operation_to_authorize() -> None:
    with pytest.raises(ValueError):
        authorizer().authorize(ALICE, HOST, Operation.ANY, ResourceType.TOPIC, "t")
    with pytest.raises(ValueError):
        authorizer().authorize_any(ALICE, HOST, Operation.ANY, ResourceType.TOPIC)


# --- validation and filters ----------------------------------------------------------------------------


def test_validate_binding_accepts_any_spelling_and_normalises() -> None:
    b = validate_binding("topic", " t ", "prefixed", " User:alice ", "::0:1", "DescribeConfigs", "allow")
    assert b == AclBinding(
        ResourceType.TOPIC,
        "t",
        PatternType.PREFIXED,
        "User:alice",
        "::1",
        Operation.DESCRIBE_CONFIGS,
        Permission.ALLOW,
    )
    assert (
        validate_binding("TransactionalId", "tx", "LITERAL", ALICE, "*", "write", "deny").principal
        == "User:alice"
    )
    assert validate_binding("CLUSTER", "kafka-cluster", "LITERAL", "User:a", "*", "cluster-action", "ALLOW")


@pytest.mark.parametrize(
    "args",
    [
        ("TOPIC", "t", "MATCH", "User:a", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "ANY", "User:a", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "User:a", "*", "ANY", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "User:a", "*", "READ", "ANY"),
        ("TOPIC", "", "LITERAL", "User:a", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "alice", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "User:", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "User:a", " ", "READ", "ALLOW"),
        ("CLUSTER", "other", "LITERAL", "User:a", "*", "ALTER", "ALLOW"),
        ("SUBJECT", "t", "LITERAL", "User:a", "*", "READ", "ALLOW"),
        ("TOPIC", "t", "LITERAL", "User:a", "*", "FLY", "ALLOW"),
    ],
)
def test_validate_binding_rejects(args: tuple[str, ...]) -> None:
    with pytest.raises(InvalidRequestError):
        validate_binding(*args)


def test_validate_filter() -> None:
    assert validate_filter() == AclFilter()
    assert validate_filter("ANY", None, "ANY", None, None, "ANY", "ANY") == AclFilter(
        pattern_type=PatternType.ANY
    )
    f = validate_filter("topic", "payments.orders", "match", "User:alice", "*", "read", "allow")
    assert f.resource_type is ResourceType.TOPIC and f.operation is Operation.READ
    with pytest.raises(InvalidRequestError):
        validate_filter(principal="nobody")
    with pytest.raises(InvalidRequestError):
        validate_filter(resource_name="")


def test_filter_match_any_and_exact() -> None:
    literal = acl("payments.orders", "READ")
    wildcard = acl("*", "READ")
    prefix = acl("payments.", "READ", pattern="PREFIXED")
    other_prefix = acl("pay", "READ", pattern="PREFIXED", kind="GROUP")
    unrelated = acl("payments.order", "READ")
    snapshot = AclSnapshot(frozenset({literal, wildcard, prefix, other_prefix, unrelated}))
    match = validate_filter(resource_name="payments.orders", pattern_type="MATCH")
    assert snapshot.select(match) == [other_prefix, wildcard, literal, prefix]
    topic_match = validate_filter(
        resource_type="TOPIC", resource_name="payments.orders", pattern_type="MATCH"
    )
    assert snapshot.select(topic_match) == [wildcard, literal, prefix]
    any_pattern = validate_filter(resource_name="payments.", pattern_type="ANY")
    assert snapshot.select(any_pattern) == [prefix]
    assert snapshot.select(validate_filter(pattern_type="PREFIXED")) == [other_prefix, prefix]
    assert snapshot.select(validate_filter(resource_type="GROUP")) == [other_prefix]
    assert not matches(validate_filter(resource_name="payments.orders", pattern_type="LITERAL"), prefix)
    assert len(snapshot.select(AclFilter())) == 5
    assert snapshot.select(validate_filter(permission="DENY")) == []


def test_the_decision_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tierlog.service.security.acl._CACHE_LIMIT", 3)
    auth = authorizer(acl("t", "READ", pattern="PREFIXED"))
    for round_ in range(3):
        for name in ("t", "t1", "t2", "u", "u1"):
            assert auth.authorize(ALICE, HOST, Operation.READ, ResourceType.TOPIC, name) is name.startswith(
                "t"
            ), round_
        assert len(auth._cache) <= 3
