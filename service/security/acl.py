"""Kafka's ACL decision: validating bindings and filters, immutable ACL snapshots, and the authorizer.

An :class:`AclAuthorizer` is built from one :class:`AclSnapshot` (the store publishes a new snapshot, and the
HTTP layer builds a new authorizer, on every change), so it indexes the snapshot once and caches its
decisions without any invalidation. The decision is Kafka's ``AclAuthorizer.authorize``:

1. a super user is always allowed;
2. the ACLs that *name* the resource are its LITERAL ACLs, the LITERAL ``*`` ACLs of its type and every
   PREFIXED ACL whose name is a prefix of the resource's name, for any principal and host; when there are
   none, the answer is ``allow.everyone.if.no.acl.found``;
3. of those, an ACL *applies* when its principal is the caller's or ``User:*`` and its host is the caller's
   or ``*``; an applying DENY of the operation (or of ALL) refuses;
4. an applying ALLOW grants when its operation is the one asked, ALL, or one that implies it (Read, Write,
   Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs); otherwise refused.

Lookups cost one dict probe for the literal name and the wildcard, and one per distinct PREFIXED-name length
of the resource type, never a scan over every ACL.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

from tierlog.service.security.model import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_HOST,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "WILDCARD_PRINCIPAL",
    "AclAuthorizer",
    "AclSnapshot",
    "canonical_host",
    "implied_by",
    "matches",
    "validate_binding",
    "validate_filter",
]

#: The principal of an ACL that applies to every user (Kafka's ``User:*``).
WILDCARD_PRINCIPAL = "User:*"

_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}

_CACHE_LIMIT = 65_536


def implied_by(operation: Operation) -> frozenset[Operation]:
    """The ACL operations whose ALLOW grants ``operation``: itself, ALL, and the ones that imply it. Pure."""
    return _IMPLIED.get(operation, frozenset({operation})) | {Operation.ALL}


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"invalid {what} {value!r}: expected a string")
    text = value.strip()
    if not text:
        raise InvalidRequestError(f"invalid {what}: must not be empty")
    return text


def _principal(value: object) -> str:
    if isinstance(value, Principal):
        return str(value)
    return str(Principal.parse(_text(value, "principal")))


@functools.lru_cache(maxsize=1024)  # every request asks, mostly for the same few client addresses
def canonical_host(text: str) -> str:
    """``text`` as ACLs and the authorizer compare hosts: an IP address in its canonical form (``ipaddress``),
    an IPv4-mapped IPv6 address (``::ffff:127.0.0.1``, how a dual-stack listener shows an IPv4 client) as the
    IPv4 address; anything else (``*``, a name) stripped and otherwise unchanged. Pure (memoized)."""
    text = text.strip()
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _host(value: object) -> str:
    return canonical_host(_text(value, "host"))


def validate_binding(
    resource_type: ResourceType | str,
    resource_name: str,
    pattern_type: PatternType | str,
    principal: Principal | str,
    host: str,
    operation: Operation | str,
    permission: Permission | str,
) -> AclBinding:
    """One ACL from input: enums or their names in Kafka's or v3's spelling (``DescribeConfigs``,
    ``DESCRIBE_CONFIGS``). Strips whitespace, writes the principal as ``Type:name`` and an IP host in its
    canonical form. Pure.

    Raises:
        InvalidRequestError: an unknown enum name; pattern MATCH or ANY; operation or permission ANY; an
            empty resource name or host; a CLUSTER resource not named ``kafka-cluster``; a principal that is
            not ``Type:name``.
    """
    kind = ResourceType.parse(resource_type, "resource type")
    name = _text(resource_name, "resource name")
    pattern = PatternType.parse(pattern_type, "pattern type")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"invalid pattern type {pattern.name}: an ACL is LITERAL or PREFIXED")
    if kind is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidRequestError(f"invalid cluster resource name {name!r}: the cluster is {CLUSTER_NAME!r}")
    op = Operation.parse(operation, "operation")
    if op is Operation.ANY:
        raise InvalidRequestError("invalid operation ANY: an ACL names one operation (or ALL)")
    perm = Permission.parse(permission, "permission")
    if perm is Permission.ANY:
        raise InvalidRequestError("invalid permission ANY: an ACL is ALLOW or DENY")
    return AclBinding(kind, name, pattern, _principal(principal), _host(host), op, perm)


def validate_filter(
    resource_type: ResourceType | str | None = None,
    resource_name: str | None = None,
    pattern_type: PatternType | str | None = None,
    principal: Principal | str | None = None,
    host: str | None = None,
    operation: Operation | str | None = None,
    permission: Permission | str | None = None,
) -> AclFilter:
    """A filter from input: None (or ``ANY`` for the enums) matches anything; operation and permission
    ``ANY`` become None. Pure.

    Raises:
        InvalidRequestError: an unknown enum name, an empty name or host, or a malformed principal.
    """
    kind: ResourceType | None = None
    if resource_type is not None and not (isinstance(resource_type, str) and _is_any(resource_type)):
        kind = ResourceType.parse(resource_type, "resource type")
    op = None if operation is None else Operation.parse(operation, "operation")
    perm = None if permission is None else Permission.parse(permission, "permission")
    return AclFilter(
        resource_type=kind,
        resource_name=None if resource_name is None else _text(resource_name, "resource name"),
        pattern_type=None if pattern_type is None else PatternType.parse(pattern_type, "pattern type"),
        principal=None if principal is None else _principal(principal),
        host=None if host is None else _host(host),
        operation=None if op is Operation.ANY else op,
        permission=None if perm is Permission.ANY else perm,
    )


def _is_any(text: str) -> bool:
    return text.strip().upper() == "ANY"


def _pattern_matches(f: AclFilter, b: AclBinding) -> bool:
    wanted = f.pattern_type
    if wanted in (PatternType.LITERAL, PatternType.PREFIXED) and wanted is not b.pattern_type:
        return False
    if f.resource_name is None:
        return True
    if wanted is PatternType.MATCH:
        if b.pattern_type is PatternType.LITERAL:
            return b.resource_name in (f.resource_name, WILDCARD)
        return f.resource_name.startswith(b.resource_name)
    return b.resource_name == f.resource_name


def matches(f: AclFilter, b: AclBinding) -> bool:
    """Whether filter ``f`` selects binding ``b`` (see :class:`AclFilter` for MATCH and ANY). Pure."""
    return (
        (f.resource_type is None or f.resource_type is b.resource_type)
        and _pattern_matches(f, b)
        and (f.principal is None or f.principal == b.principal)
        and (f.host is None or f.host == b.host)
        and (f.operation in (None, Operation.ANY) or f.operation is b.operation)
        and (f.permission in (None, Permission.ANY) or f.permission is b.permission)
    )


def _sort_key(b: AclBinding) -> tuple[str, ...]:
    return (
        b.resource_type.value,
        b.pattern_type.value,
        b.resource_name,
        b.principal,
        b.host,
        b.operation.value,
        b.permission.value,
    )


@dataclass(frozen=True)
class AclSnapshot:
    """Every ACL at one metadata revision. Immutable: read it without locks."""

    bindings: frozenset[AclBinding] = frozenset()
    revision: int = 0

    def select(self, f: AclFilter) -> list[AclBinding]:
        """The bindings ``f`` selects, sorted by resource type, pattern type, name, principal, host,
        operation and permission. Pure."""
        return sorted((b for b in self.bindings if matches(f, b)), key=_sort_key)


class AclAuthorizer:
    """The ACL decision over one snapshot (see the module docstring). Safe to use from one event loop and
    from threads: it only reads its indexes, and its decision cache is a dict that is replaced by an empty
    one when it reaches its bound."""

    def __init__(
        self, snapshot: AclSnapshot, *, super_users: frozenset[str], allow_everyone_if_no_acl_found: bool
    ) -> None:
        self.snapshot = snapshot
        self._super_users = super_users
        self._allow_everyone = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in sorted(snapshot.bindings, key=_sort_key):
            index = self._literal if b.pattern_type is PatternType.LITERAL else self._prefixed
            index.setdefault((b.resource_type, b.resource_name), []).append(b)
            self._by_type.setdefault(b.resource_type, []).append(b)
        lengths: dict[ResourceType, set[int]] = {}
        for kind, name in self._prefixed:
            lengths.setdefault(kind, set()).add(len(name))
        self._prefix_lengths = {kind: sorted(found) for kind, found in lengths.items()}
        self._cache: dict[tuple[object, ...], bool] = {}

    def _remember(self, key: tuple[object, ...], answer: bool) -> bool:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache = {}
        self._cache[key] = answer
        return answer

    def naming(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL naming the resource (literal, ``*``, covering prefixes), for any principal. Pure."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found.extend(self._prefixed.get((resource_type, name[:length]), ()))
        return found

    def authorize(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``operation`` on the resource. Pure.

        Raises:
            ValueError: ``operation`` is ANY (a filter value, never asked for).
        """
        key = (principal, host, operation, resource_type, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        return self._remember(key, self._decide(principal, host, operation, resource_type, name))

    def _decide(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if operation is Operation.ANY:
            raise ValueError("authorize needs an operation, not ANY")
        caller = str(principal)
        if caller in self._super_users:
            return True
        named = self.naming(resource_type, name)
        if not named:
            return self._allow_everyone
        applying = [b for b in named if _applies(b, caller, host)]
        if any(_denies(b, operation) for b in applying):
            return False
        granting = implied_by(operation)
        return any(b.permission is Permission.ALLOW and b.operation in granting for b in applying)

    def authorize_any(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of ``resource_type`` exists on which :meth:`authorize` would allow
        ``operation``: Kafka's ``authorizeByResourceType`` (KIP-679, e.g. IdempotentWrite for a principal
        that may Write some topic). Pure.

        Like Kafka: super users always; a DENY on LITERAL ``*`` voids everything; an ALLOW on ``*`` counts;
        an allowed literal counts unless denied by the same literal or by a prefix of it; an allowed prefix
        counts unless a denied prefix is a prefix of it. Two differences make it exact rather than an
        approximation: ALLOWs grant through the implications :meth:`authorize` uses, and
        ``allow.everyone.if.no.acl.found`` counts only while a resource that no ACL names can exist (no
        LITERAL ``*`` ACL of the type, for anyone), where Kafka's ``AclAuthorizer`` answers true whenever it
        is set.

        Raises:
            ValueError: ``operation`` is ANY.
        """
        key = (principal, host, operation, resource_type)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        return self._remember(key, self._decide_any(principal, host, operation, resource_type))

    def _decide_any(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        if operation is Operation.ANY:
            raise ValueError("authorize_any needs an operation, not ANY")
        caller = str(principal)
        if caller in self._super_users:
            return True
        if self._allow_everyone and (resource_type, WILDCARD) not in self._literal:
            return True
        applying = [b for b in self._by_type.get(resource_type, ()) if _applies(b, caller, host)]
        denied = [b for b in applying if _denies(b, operation)]
        if any(b.pattern_type is PatternType.LITERAL and b.resource_name == WILDCARD for b in denied):
            return False
        deny_literals = {b.resource_name for b in denied if b.pattern_type is PatternType.LITERAL}
        deny_prefixes = [b.resource_name for b in denied if b.pattern_type is PatternType.PREFIXED]
        granting = implied_by(operation)
        for b in applying:
            if b.permission is not Permission.ALLOW or b.operation not in granting:
                continue
            if b.pattern_type is PatternType.LITERAL:
                if b.resource_name == WILDCARD:
                    return True
                if b.resource_name in deny_literals:
                    continue
            if not any(b.resource_name.startswith(prefix) for prefix in deny_prefixes):
                return True
        return False


def _applies(b: AclBinding, caller: str, host: str) -> bool:
    return b.principal in (caller, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD_HOST)


def _denies(b: AclBinding, operation: Operation) -> bool:
    return b.permission is Permission.DENY and b.operation in (operation, Operation.ALL)
