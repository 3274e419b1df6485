"""The security vocabulary: principals, Kafka's ACL model (resources, patterns, operations, permissions).

Pure values, shared by the authorizer (:mod:`~tierlog.service.security.acl`), the store that keeps the ACLs
and credentials (:mod:`~tierlog.service.security.security_store`), the HTTP layer and the ``tierlog acls``
command.
Names and spellings are Kafka's (``org.apache.kafka.common.acl``, ``org.apache.kafka.common.resource``), so an
ACL reads the same in ``kafka-acls`` and in ``tierlog acls``; the v3 API spells the enums in upper case
(``TOPIC``, ``PREFIXED``, ``DESCRIBE_CONFIGS``) as Confluent's v3 ACL API does; ``parse`` accepts both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self

from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "ANONYMOUS",
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_HOST",
    "AclBinding",
    "AclFilter",
    "Operation",
    "PatternType",
    "Permission",
    "Principal",
    "ResourceType",
]

#: The resource name and principal name that match every name (``*``).
WILDCARD = "*"
#: The host of an ACL that matches every host.
WILDCARD_HOST = "*"
#: The one cluster resource's name (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"


def _canonical(text: str) -> str:
    return text.strip().replace("-", "_").replace(" ", "_").upper()


class _Parsed(enum.Enum):
    """An enum whose members parse from Kafka's spelling (``DescribeConfigs``) or v3's
    (``DESCRIBE_CONFIGS``)."""

    @classmethod
    def parse(cls, text: object, what: str) -> Self:
        """The member ``text`` names, case-insensitively, with or without ``_`` (a member of this enum is
        answered as it is). Pure.

        Raises:
            InvalidRequestError: ``text`` names no member (the message lists the valid names).
        """
        if isinstance(text, cls):
            return text
        if isinstance(text, str):
            wanted = _canonical(text).replace("_", "")
            for member in cls:
                if member.name.replace("_", "") == wanted:
                    return member
        names = ", ".join(member.name for member in cls)
        raise InvalidRequestError(f"invalid {what} {text!r}: expected one of {names}")

    @property
    def kafka_name(self) -> str:
        """Kafka's CamelCase spelling (``DescribeConfigs``), used by the CLI and the docs."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_Parsed):
    """What an ACL protects. ``TRANSACTIONAL_ID`` is accepted and stored (Kafka's model) but no route needs it
    yet."""

    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"


class PatternType(_Parsed):
    """How an ACL's resource name matches: exactly (``LITERAL``; the name ``*`` matches every name) or as a
    prefix (``PREFIXED``). ``MATCH`` and ``ANY`` exist only in filters."""

    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"
    MATCH = "MATCH"
    ANY = "ANY"


class Operation(_Parsed):
    """What a request does to a resource (Kafka's ``AclOperation``). ``ALL`` in an ACL matches every
    operation; ``ANY`` exists only in filters. A granted Read, Write, Delete or Alter implies Describe; a
    granted AlterConfigs implies DescribeConfigs (Kafka's implication rules)."""

    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"
    ANY = "ANY"


class Permission(_Parsed):
    """Whether an ACL allows or denies. A matching Deny always wins over any Allow. ``ANY`` is for filters."""

    ALLOW = "ALLOW"
    DENY = "DENY"
    ANY = "ANY"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: ``User:alice``. ``User:ANONYMOUS`` when authentication is off."""

    type: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``Type:name`` (the name may itself hold ``:``). Pure.

        Raises:
            InvalidRequestError: no ``:``, or an empty type or name.
        """
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise InvalidRequestError(f"invalid principal {text!r}: expected Type:name, e.g. User:alice")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls("User", name)

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` on ``host`` may (``ALLOW``) or may not (``DENY``) do ``operation`` on the
    resources of ``resource_type`` whose name matches ``resource_name`` under ``pattern_type``.

    ``principal`` is ``Type:name`` text (``User:*`` matches every user); ``pattern_type`` is LITERAL or
    PREFIXED; ``operation`` and ``permission`` are never ``ANY``. Build from input with
    :meth:`~tierlog.service.security.acl.validate_binding`, which checks those rules.
    """

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which ACLs a list or a delete selects: every set field must match (None matches anything).

    ``pattern_type`` ``ANY`` (or None) matches LITERAL and PREFIXED ACLs of exactly ``resource_name``;
    ``MATCH`` selects every ACL that would apply to the resource named ``resource_name`` (the literal, the
    wildcard and every prefix ACL that is a prefix of it), as Kafka's ``PatternType.MATCH`` does.
    ``operation``/``permission`` ``ANY`` are the same as None.
    """

    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None
