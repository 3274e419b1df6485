"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) over the broker's ACL store, the one the v3 ACL
API manages (an ACL created through one door is enforced and listed through both).

Kafka's wire codes map to our model one to one for the resource types TOPIC, GROUP, CLUSTER and
TRANSACTIONAL_ID, the pattern types LITERAL and PREFIXED (MATCH and ANY in filters), every operation up
to IDEMPOTENT_WRITE and both permissions. What the model cannot express is refused with Kafka's error for
an invalid ACL, INVALID_REQUEST, naming it: the resource types DELEGATION_TOKEN and USER and the
operations CREATE_TOKENS and DESCRIBE_TOKENS (tierlog has no delegation tokens); a filter holding one
matches nothing. UNKNOWN codes, and filter-only values in an ACL, are INVALID_REQUEST as in Kafka.

ACLs: DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise), as Kafka's.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import groupby
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.acl import validate_binding, validate_filter
from tierlog.service.security.model import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tierlog.wire.errors import InvalidRequestError, TierlogError

__all__ = ["CREATE_ACLS_KEY", "DELETE_ACLS_KEY", "DESCRIBE_ACLS_KEY"]

DESCRIBE_ACLS_KEY = 29
CREATE_ACLS_KEY = 30
DELETE_ACLS_KEY = 31

# Kafka's codes (org.apache.kafka.common.resource.ResourceType, PatternType, acl.AclOperation,
# acl.AclPermissionType); 0 is UNKNOWN in each, 1 ANY.
_ANY = 1
_RESOURCE_TYPES = {2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER}
_RESOURCE_TYPES[5] = ResourceType.TRANSACTIONAL_ID
_UNEXPRESSED_RESOURCES = {6: "DELEGATION_TOKEN", 7: "USER"}
_PATTERN_TYPES = {1: PatternType.ANY, 2: PatternType.MATCH, 3: PatternType.LITERAL, 4: PatternType.PREFIXED}
_OPERATIONS = {
    code: op
    for code, op in enumerate(
        [
            Operation.ANY,
            Operation.ALL,
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
        ],
        start=1,
    )
}
_UNEXPRESSED_OPERATIONS = {13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
_PERMISSIONS = {1: Permission.ANY, 2: Permission.DENY, 3: Permission.ALLOW}
_CODES: dict[Any, int] = {
    **{v: k for k, v in _RESOURCE_TYPES.items()},
    **{v: k for k, v in _PATTERN_TYPES.items()},
    **{v: k for k, v in _OPERATIONS.items()},
    **{v: k for k, v in _PERMISSIONS.items()},
}


class _Unexpressed(InvalidRequestError):
    """A resource type or operation of Kafka's that tierlog's ACL model has no place for."""


def _decode(
    table: Mapping[int, Any], code: int, what: str, unexpressed: Mapping[int, str] | None = None
) -> Any:
    """Our value of Kafka's ``code``. Raises _Unexpressed / InvalidRequestError (UNKNOWN or unknown)."""
    if unexpressed is not None and code in unexpressed:
        raise _Unexpressed(f"tierlog's ACLs have no {what} {unexpressed[code]}")
    found = table.get(code)
    if found is None:
        raise InvalidRequestError(f"Invalid {what} {code}")
    return found


def _filter(wanted: Any) -> AclFilter:
    """Our filter of a DescribeAcls request or a DeleteAcls filter (the same field names). Raises as
    :func:`_decode` (and InvalidRequestError for a malformed principal)."""
    kind = wanted.resource_type_filter
    return validate_filter(
        resource_type=None
        if kind == _ANY
        else _decode(_RESOURCE_TYPES, kind, "resource type", _UNEXPRESSED_RESOURCES),
        resource_name=wanted.resource_name_filter,
        pattern_type=_decode(_PATTERN_TYPES, wanted.pattern_type_filter, "pattern type"),
        principal=wanted.principal_filter,
        host=wanted.host_filter,
        operation=_decode(_OPERATIONS, wanted.operation, "operation", _UNEXPRESSED_OPERATIONS),
        permission=_decode(_PERMISSIONS, wanted.permission_type, "permission type"),
    )


def _binding(creation: Any) -> AclBinding:
    """Our ACL of a CreateAcls creation. Raises InvalidRequestError naming what is invalid."""
    kind = _decode(_RESOURCE_TYPES, creation.resource_type, "resource type", _UNEXPRESSED_RESOURCES)
    pattern = _decode(_PATTERN_TYPES, creation.resource_pattern_type, "pattern type")
    if kind is ResourceType.CLUSTER and creation.resource_name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    return validate_binding(
        kind,
        creation.resource_name,
        pattern,
        creation.principal,
        creation.host,
        _decode(_OPERATIONS, creation.operation, "operation", _UNEXPRESSED_OPERATIONS),
        _decode(_PERMISSIONS, creation.permission_type, "permission type"),
    )


def _acl_fields(binding: AclBinding) -> dict[str, Any]:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": _CODES[binding.operation],
        "permission_type": _CODES[binding.permission],
    }


def _resource(binding: AclBinding) -> tuple[int, str, int]:
    return _CODES[binding.resource_type], binding.resource_name, _CODES[binding.pattern_type]


def _refused(request: KafkaRequest, operation: Operation) -> bool:
    return not request.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)


_CLUSTER_REFUSAL = "Not authorized to {} Cluster"
_ALTER_REFUSAL = {
    "error_code": ErrorCode.cluster_authorization_failed,
    "error_message": "Not authorized to Alter Cluster",
}


@api(DESCRIBE_ACLS_KEY, "DescribeAcls", 1, 3)
async def describe_acls(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    if _refused(request, Operation.DESCRIBE):
        message = _CLUSTER_REFUSAL.format("Describe")
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": message,
        }
    try:
        wanted = _filter(body)
    except _Unexpressed:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "resources": []}
    except InvalidRequestError as err:
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "error_message": err.message}
    found = request.security_store.acls.select(wanted)  # sorted by resource first: groupby works
    resources = [
        {
            "resource_type": kind,
            "resource_name": name,
            "pattern_type": pattern,
            "acls": [_acl_fields(b) for b in bindings],
        }
        for (kind, name, pattern), bindings in groupby(found, key=_resource)
    ]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": resources}


@api(CREATE_ACLS_KEY, "CreateAcls", 1, 3)
async def create_acls(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    if _refused(request, Operation.ALTER):
        return {"throttle_time": 0, "results": [_ALTER_REFUSAL] * len(body.creations)}
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclBinding]] = []
    for creation in body.creations:
        try:
            valid.append((len(results), _binding(creation)))
            results.append({"error_code": ErrorCode.none, "error_message": None})
        except InvalidRequestError as err:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": err.message})
    if valid:
        try:
            await request.security_store.create_acls([b for _, b in valid])
        except TierlogError as err:
            for index, _ in valid:
                results[index] = {"error_code": err.kafka_error().code, "error_message": err.message}
    return {"throttle_time": 0, "results": results}


@api(DELETE_ACLS_KEY, "DeleteAcls", 1, 3)
async def delete_acls(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    if _refused(request, Operation.ALTER):
        return {"throttle_time": 0, "filter_results": [_ALTER_REFUSAL] * len(body.filters)}
    return {"throttle_time": 0, "filter_results": [await _delete_one(request, f) for f in body.filters]}


async def _delete_one(request: KafkaRequest, wanted: Any) -> dict[str, Any]:
    try:
        selected = _filter(wanted)
    except _Unexpressed:
        return {"error_code": ErrorCode.none, "error_message": None, "matching_acls": []}
    except InvalidRequestError as err:
        return {"error_code": ErrorCode.invalid_request, "error_message": err.message, "matching_acls": []}
    try:
        deleted = await request.security_store.delete_acls(selected)
    except TierlogError as err:
        return {"error_code": err.kafka_error().code, "error_message": err.message, "matching_acls": []}
    matching = [
        {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": _CODES[b.resource_type],
            "resource_name": b.resource_name,
            "pattern_type": _CODES[b.pattern_type],
            **_acl_fields(b),
        }
        for b in deleted
    ]
    return {"error_code": ErrorCode.none, "error_message": None, "matching_acls": matching}
