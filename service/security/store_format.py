"""How users and ACLs are laid out in the metadata store: keys and values (pure; no I/O).

Under the metadata store's own prefix (``docs/design/0012-security.md``)::

    security/users/<quoted name>                     -> scram.encode_user(...)  (never a password)
    security/acls/<TYPE>/<PATTERN>/<quoted name>     -> {"format": 1, "acls": [{"principal", "host",
                                                         "operation", "permission"}, ...]}

One ACL key per resource pattern, as Kafka's ``/kafka-acl/<type>/<name>`` znodes; ``<TYPE>`` and
``<PATTERN>`` are the upper-case enum names (``TOPIC``, ``PREFIXED``). Names are percent-quoted
(:func:`urllib.parse.quote`, nothing safe but letters, digits and ``_.-~@``), so a name holding ``/`` stays
one key segment; an ordinary name reads as itself. :mod:`~tierlog.service.security.security_store` reads and
writes
them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import quote, unquote

from tierlog.service.security.acl import validate_binding
from tierlog.service.security.model import AclBinding, PatternType, ResourceType
from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "ACLS_PREFIX",
    "PREFIX",
    "SECURITY_FILE",
    "USERS_PREFIX",
    "acl_key",
    "binding_order",
    "bindings_by_key",
    "check_user_name",
    "check_utf8",
    "decode_acls",
    "encode_acls",
    "parse_acl_key",
    "user_key",
    "user_name",
]

PREFIX = "security/"
USERS_PREFIX = PREFIX + "users/"
ACLS_PREFIX = PREFIX + "acls/"
#: Where an older single broker kept users and ACLs in its data directory; imported once at start-up into
#: the metadata store (see ``tierlog.service.cluster.legacy_state``).
SECURITY_FILE = "tierlog-security.json"

_FORMAT = 1
_SAFE = "_.-~@"
_MAX_NAME = 255


def check_user_name(name: str) -> str:
    """``name`` when it may name a user: 1-255 characters, no control characters, no surrounding spaces.
    Pure.

    Raises:
        InvalidRequestError: otherwise.
    """
    if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
        raise InvalidRequestError(f"a user name must be 1-{_MAX_NAME} characters")
    if name != name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidRequestError("a user name may not hold control characters or surrounding spaces")
    check_utf8(name, "user name")
    return name


def check_utf8(text: str, what: str) -> None:
    """Raises InvalidRequestError when ``text`` cannot be encoded (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(f"the {what} is not valid Unicode text") from None


def user_key(name: str) -> str:
    """The store key of user ``name``. Raises InvalidRequestError for an invalid name."""
    return USERS_PREFIX + quote(check_user_name(name), safe=_SAFE)


def acl_key(resource_type: ResourceType, pattern_type: PatternType, name: str) -> str:
    """The store key holding the ACLs of one resource pattern. Pure."""
    return f"{ACLS_PREFIX}{resource_type.name}/{pattern_type.name}/{quote(name, safe=_SAFE)}"


def parse_acl_key(key: str) -> tuple[ResourceType, PatternType, str]:
    """The resource pattern an ACL key names. Pure.

    Raises:
        ValueError: not an ACL key of this layout.
    """
    parts = key[len(ACLS_PREFIX) :].split("/") if key.startswith(ACLS_PREFIX) else []
    if len(parts) != 3 or not parts[2]:
        raise ValueError(f"{key!r} is not security/acls/<TYPE>/<PATTERN>/<name>")
    try:
        resource_type = ResourceType[parts[0]]
        pattern_type = PatternType[parts[1]]
    except KeyError as err:
        raise ValueError(f"{key!r} names an unknown resource or pattern type") from err
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"{key!r}: an ACL's pattern type is LITERAL or PREFIXED")
    return resource_type, pattern_type, unquote(parts[2], errors="strict")


def binding_order(binding: AclBinding) -> tuple[str, ...]:
    """A sort key that orders ACLs as :meth:`AclSnapshot.select` does: by resource type, pattern type, name,
    principal, host, operation and permission. Pure."""
    b = binding
    return (
        b.resource_type.name, b.pattern_type.name, b.resource_name, b.principal, b.host,
        b.operation.name, b.permission.name,
    )  # fmt: skip


def bindings_by_key(bindings: Iterable[AclBinding]) -> dict[str, set[AclBinding]]:
    """``bindings``, each checked again, grouped by the ACL key that holds it. Pure.

    Raises:
        InvalidRequestError: a binding is invalid (a filter-only pattern, operation or permission, or text
            that is not valid Unicode).
    """
    grouped: dict[str, set[AclBinding]] = {}
    for b in bindings:
        checked = validate_binding(
            b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host, b.operation, b.permission
        )
        for text, what in ((checked.resource_name, "resource name"), (checked.principal, "principal"),
                           (checked.host, "host")):  # fmt: skip
            check_utf8(text, what)
        key = acl_key(checked.resource_type, checked.pattern_type, checked.resource_name)
        grouped.setdefault(key, set()).add(checked)
    return grouped


def encode_acls(bindings: Iterable[AclBinding]) -> bytes:
    """The value of one ACL key (every binding must name that key's resource pattern). Pure; the same
    bindings always encode to the same bytes."""
    entries = [
        {
            "principal": b.principal,
            "host": b.host,
            "operation": b.operation.name,
            "permission": b.permission.name,
        }
        for b in sorted(bindings, key=binding_order)
    ]
    return json.dumps({"format": _FORMAT, "acls": entries}, sort_keys=True).encode()


def decode_acls(key: str, raw: bytes) -> frozenset[AclBinding]:
    """The bindings an ACL key holds. Pure.

    Raises:
        ValueError: the key or the value is malformed, or an entry is not a valid ACL.
    """
    resource_type, pattern_type, name = parse_acl_key(key)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("acls"), list):
        raise ValueError(f"not a format {_FORMAT} ACL list")
    found: set[AclBinding] = set()
    for entry in doc["acls"]:
        if not isinstance(entry, dict):
            raise ValueError("an ACL entry is not an object")
        fields = [entry.get(f) for f in ("principal", "host", "operation", "permission")]
        principal, host, operation, permission = (f if isinstance(f, str) else "" for f in fields)
        if not all(fields):
            raise ValueError("an ACL entry lacks principal, host, operation or permission")
        try:
            found.add(
                validate_binding(resource_type, name, pattern_type, principal, host, operation, permission)
            )
        except InvalidRequestError as err:
            raise ValueError(err.message) from None
    return frozenset(found)


def user_name(key: str) -> str:
    """The user a user key names. Raises ValueError (UnicodeDecodeError) for a malformed quoting."""
    return unquote(key[len(USERS_PREFIX) :], errors="strict")
