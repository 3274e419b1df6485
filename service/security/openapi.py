"""OpenAPI description of the v3 ACL and user routes (:mod:`tierlog.service.security.admin_routes`)."""

from __future__ import annotations

from typing import Any

from tierlog.service.security.model import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from tierlog.service.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

__all__ = ["OPENAPI_COMPONENTS", "OPENAPI_PATHS"]

_MECHANISMS = list(MECHANISMS)
_REF_ERROR = {"$ref": "#/components/schemas/Error"}
_STR = {"type": "string"}
_SELF = {"type": "object", "properties": {"self": {"type": "string", "format": "uri"}}}
_LIST_META = {
    "type": "object",
    "properties": {"self": {"type": "string", "format": "uri"}, "next": {"type": "string", "nullable": True}},
}


_NOT_BLANK = r"\S"  # surrounding spaces are trimmed; something must remain


def _enum(members: list[str], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": members, "description": description}


def _names(kind: type[ResourceType | PatternType | Operation | Permission], *, filters: bool) -> list[str]:
    names = [m.name for m in kind if filters or m.name not in ("ANY", "MATCH")]
    return [*names, "ANY"] if filters and "ANY" not in names else names


def _acl_fields(*, filters: bool) -> dict[str, Any]:
    return {
        "resource_type": _enum(
            _names(ResourceType, filters=filters), "TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID"
        ),
        "resource_name": {
            "type": "string",
            "minLength": 1,
            "pattern": _NOT_BLANK,
            "description": "the name, a prefix (PREFIXED), or * (every name); kafka-cluster for CLUSTER",
        },
        "pattern_type": _enum(
            _names(PatternType, filters=filters),
            "LITERAL or PREFIXED" + ("; filters also ANY and MATCH" if filters else ""),
        ),
        "principal": {
            "type": "string",
            "pattern": r"^\s*[^:\s][^:]*:[\s\S]*\S",
            "description": "Type:name, e.g. User:alice, or User:* (every user)",
        },
        "host": {
            "type": "string",
            "minLength": 1,
            "pattern": _NOT_BLANK,
            "description": "a client address, or * (any host)",
        },
        "operation": _enum(_names(Operation, filters=filters), "Kafka's operation, upper case"),
        "permission": _enum(_names(Permission, filters=filters), "ALLOW or DENY; Deny wins"),
    }


_ACL_REQUEST = {
    "type": "object",
    "required": list(_acl_fields(filters=False)),
    "properties": _acl_fields(filters=False),
    # the cluster resource has one name
    "anyOf": [
        {"properties": {"resource_type": {"enum": ["CLUSTER"]}, "resource_name": {"enum": [CLUSTER_NAME]}}},
        {
            "properties": {
                "resource_type": {"enum": [n for n in _names(ResourceType, filters=False) if n != "CLUSTER"]}
            }
        },
    ],
}

OPENAPI_COMPONENTS: dict[str, Any] = {
    "schemas": {
        "KafkaAcl": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["KafkaAcl"]},
                "metadata": _SELF,
                "cluster_id": _STR,
                **_acl_fields(filters=False),
            },
        },
        "KafkaAclList": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["KafkaAclList"]},
                "metadata": _LIST_META,
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/KafkaAcl"}},
            },
        },
        "DeleteAclsResponse": {
            "type": "object",
            "properties": {"data": {"type": "array", "items": {"$ref": "#/components/schemas/KafkaAcl"}}},
        },
        "CreateAclRequest": _ACL_REQUEST,
        "CreateAclBatchRequest": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/CreateAclRequest"}}
            },
        },
        "KafkaUser": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["KafkaUser"]},
                "metadata": _SELF,
                "cluster_id": _STR,
                "name": _STR,
                "mechanisms": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "mechanism": {"type": "string", "enum": _MECHANISMS},
                            "iterations": {"type": "integer"},
                        },
                    },
                },
            },
        },
        "KafkaUserList": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": ["KafkaUserList"]},
                "metadata": _LIST_META,
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/KafkaUser"}},
            },
        },
        "PutUserRequest": {
            "type": "object",
            "required": ["password"],
            "properties": {
                "password": {
                    "type": "string",
                    "minLength": 1,
                    "description": "stored only as a salted SCRAM credential; never echoed or logged",
                },
                "mechanism": {
                    "type": "string",
                    "enum": [*_MECHANISMS, None],
                    "default": "SCRAM-SHA-256",
                    "nullable": True,
                    "description": "null: the default",
                },
                "iterations": {
                    "type": "integer",
                    "minimum": MIN_ITERATIONS,
                    "maximum": MAX_ITERATIONS,
                    "default": DEFAULT_ITERATIONS,
                    "nullable": True,
                    "description": "null: the default",
                },
            },
        },
    }
}

_SCHEMA_DESCRIPTIONS = {
    "KafkaAcl": "One ACL binding: a principal allowed or denied an operation on resources from a host",
    "KafkaAclList": "The ACLs a filter matched",
    "DeleteAclsResponse": "The ACLs the filter matched, which are deleted",
    "CreateAclRequest": "An ACL binding to create (Kafka's model; no ANY or MATCH values)",
    "CreateAclBatchRequest": "Several ACL bindings to create together",
    "KafkaUser": "A user and the SCRAM mechanisms it has a credential for (never the credential)",
    "KafkaUserList": "The users of the cluster",
    "PutUserRequest": "A user's password and how to store it",
}
for _name, _text in _SCHEMA_DESCRIPTIONS.items():
    OPENAPI_COMPONENTS["schemas"][_name]["description"] = _text

_ACL_EXAMPLE = {
    "resource_type": "TOPIC",
    "resource_name": "orders",
    "pattern_type": "LITERAL",
    "principal": "User:alice",
    "host": "*",
    "operation": "READ",
    "permission": "ALLOW",
}
_BODIES = {
    "CreateAclRequest": ("The ACL binding", _ACL_EXAMPLE),
    "CreateAclBatchRequest": (
        "The ACL bindings",
        {"data": [_ACL_EXAMPLE, {**_ACL_EXAMPLE, "operation": "DESCRIBE"}]},
    ),
    "PutUserRequest": (
        "The password (only its salted SCRAM credential is stored)",
        {"password": "correct horse battery staple", "mechanism": "SCRAM-SHA-256"},
    ),
}
_DESCRIPTIONS = {
    "listAcls": "The ACL bindings matching a filter: a missing field matches anything, ANY matches any "
    "value, and MATCH pattern type matches the bindings that would apply to the named resource.",
    "createAcl": "Adds an ACL binding. Creating one that exists already changes nothing and answers 201.",
    "deleteAcls": "Deletes every ACL binding the filter matches and answers them; resource_type, "
    "pattern_type, operation and permission are required so a bare request cannot delete every ACL.",
    "createAcls": "Adds several ACL bindings in one write: all of them, or none when one is invalid.",
    "listUsers": "Every SCRAM user and its mechanisms and iteration counts; credentials are never shown.",
    "putUser": "Creates a user or replaces its credential.",
    "deleteUser": "Deletes the user and its credentials; its ACLs stay (as in Kafka).",
}

_ERRORS = {
    "400": "Malformed body or query, or a required field missing (40001)",
    "404": "Unknown cluster (404) or user (404)",
    "409": "The store kept changing under the write (40901): try again",
    "415": "Body is not JSON (41501)",
    "422": "An invalid ACL, filter, user name, mechanism or iteration count (42201)",
    "503": "The broker is still opening, or the metadata store is unreachable (50301)",
}


def _op(
    op_id: str,
    summary: str,
    ok: str,
    schema: str | None = None,
    *,
    body: str | None = None,
    errors: tuple[str, ...],
    query: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if schema is None:
        responses[ok] = {"description": summary}
    else:
        content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
        responses[ok] = {"description": summary, "content": content}
    for status, text in (extra or {}).items():
        responses[status] = {"description": text, "content": responses[ok].get("content", {})}
    for status in errors:
        responses[status] = {
            "description": _ERRORS[status],
            "content": {"application/json": {"schema": _REF_ERROR}},
        }
    operation: dict[str, Any] = {
        "tags": ["Security (v3)"],
        "operationId": op_id,
        "summary": summary,
        "description": _DESCRIPTIONS[op_id],
    }
    if query is not None:
        operation["parameters"] = [
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": schema_["description"],
                "schema": {key: value for key, value in schema_.items() if key != "description"},
            }
            for name, schema_ in query.items()
        ]
    operation["responses"] = responses
    if body is not None:
        text, example = _BODIES[body]
        operation["requestBody"] = {
            "required": True,
            "description": text,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}, "example": example}
            },
        }
    return operation


_C = "/v3/clusters/{cluster_id}"
_READ = ("400", "404", "422", "503")
_WRITE = ("400", "404", "409", "415", "422", "503")
_DELETE_REQUIRED = ("resource_type", "pattern_type", "operation", "permission")
_USER_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The user name (the principal `User:<name>`): 1-255 characters, no control characters, "
    "no leading or trailing space",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$",
    },
}

OPENAPI_PATHS: dict[str, Any] = {
    _C + "/acls": {
        "get": _op(
            "listAcls",
            "List the ACLs a filter matches (a missing field matches anything)",
            "200",
            "KafkaAclList",
            errors=_READ,
            query=_acl_fields(filters=True),
        ),
        "post": _op("createAcl", "Create an ACL (idempotent)", "201", body="CreateAclRequest", errors=_WRITE),
        "delete": _op(
            "deleteAcls",
            "Delete the ACLs a filter matches; answers them",
            "200",
            "DeleteAclsResponse",
            errors=("400", "404", "409", "422", "503"),
            query=_acl_fields(filters=True),
            required=_DELETE_REQUIRED,
        ),
    },
    _C + "/acls:batch": {
        "post": _op(
            "createAcls",
            "Create several ACLs at once (all or nothing; idempotent)",
            "201",
            body="CreateAclBatchRequest",
            errors=_WRITE,
        ),
    },
    _C + "/users": {
        "get": _op(
            "listUsers",
            "List users and their SCRAM mechanisms",
            "200",
            "KafkaUserList",
            errors=("404", "503"),
        )
    },
    _C + "/users/{name}": {
        "put": {
            **_op(
                "putUser",
                "Create a user, or replace its password and mechanism",
                "200",
                "KafkaUser",
                body="PutUserRequest",
                errors=_WRITE,
                extra={"201": "The user is new"},
            ),
            "description": "Creates a user or replaces its credential. HTTP Basic has one password: the "
            "user's credential becomes the one of `password` and `mechanism`, and a credential of another "
            "mechanism is dropped, so the old password stops working whatever mechanism held it.",
            "parameters": [_USER_NAME],
        },
        "delete": {
            **_op(
                "deleteUser",
                "Delete a user and all its credentials",
                "204",
                errors=("404", "409", "422", "503"),
            ),
            "parameters": [_USER_NAME],
        },
    },
}
