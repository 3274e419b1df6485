"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) over the users of the broker's
security store, the ones SASL SCRAM and HTTP Basic check and the users API manages.

Describe answers each user's mechanisms and iteration counts, never a salt or key: every user with a
credential when the request names none, RESOURCE_NOT_FOUND for an unknown one and DUPLICATE_RESOURCE for
one named twice. Alter applies each user's deletions and upsertions in one commit, keeping the mechanisms
it does not name (an upsertion carries the client's salt and salted password; the broker derives the
stored and server keys from them, as Kafka's does). A user whose part of the request is invalid is
answered its first error and left unchanged, with Kafka's codes: DUPLICATE_RESOURCE for a (user,
mechanism) altered twice, UNSUPPORTED_SASL_MECHANISM for an unknown mechanism, UNACCEPTABLE_CREDENTIAL
for an invalid user name, iterations outside 4096..16384 or an empty salt, RESOURCE_NOT_FOUND for the
deletion of a credential that does not exist. Describe needs DESCRIBE, alter ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise), as in Kafka.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType
from tierlog.service.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)
from tierlog.service.security.security_store import check_user_name
from tierlog.wire.errors import InvalidRequestError, TierlogError

__all__ = ["ALTER_USER_SCRAM_CREDENTIALS_KEY", "DESCRIBE_USER_SCRAM_CREDENTIALS_KEY"]

DESCRIBE_USER_SCRAM_CREDENTIALS_KEY = 50
ALTER_USER_SCRAM_CREDENTIALS_KEY = 51

#: Kafka's ``ScramMechanism`` codes (0 is UNKNOWN).
_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_CODES = {name: code for code, name in _MECHANISMS.items()}

_Error = tuple[ErrorCode, str]


def _result(user: str, error: _Error | None = None) -> dict[str, Any]:
    code, message = error if error is not None else (ErrorCode.none, None)
    return {"user": user, "error_code": code, "error_message": message}


@api(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, "DescribeUserScramCredentials", 0, 0)
async def describe(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    if not request.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": "Not authorized to Describe Cluster",
        }
    store = request.security_store
    named = [u.name for u in body.users or ()]
    counts = Counter(named)
    results = []
    for name in dict.fromkeys(named) if named else store.user_names():
        credentials = store.user(name)
        if counts[name] > 1:
            message = f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
            results.append(_result(name, (ErrorCode.duplicate_resource, message)))
        elif not credentials:
            message = f"Attempt to describe a user credential that does not exist: {name}"
            results.append(_result(name, (ErrorCode.resource_not_found, message)))
        else:
            infos = [
                {"mechanism": _CODES[m], "iterations": credentials[m].iterations} for m in sorted(credentials)
            ]
            results.append({**_result(name), "credential_infos": infos})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results}


def _mechanism(code: int) -> str:
    """Raises _Refused (UNSUPPORTED_SASL_MECHANISM) for a code that is no SCRAM mechanism."""
    found = _MECHANISMS.get(code)
    if found is None:
        raise _Refused(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return found


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error: _Error = (code, message)


def _upsertion(upsertion: Any) -> ScramCredential:
    """The credential an upsertion sets. Raises _Refused with Kafka's code."""
    mechanism = _mechanism(upsertion.mechanism)
    if upsertion.iterations < MIN_ITERATIONS:
        raise _Refused(ErrorCode.unacceptable_credential, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        raise _Refused(ErrorCode.unacceptable_credential, "Too many iterations")
    try:
        return credential_from_salted(
            mechanism, upsertion.salt, upsertion.iterations, upsertion.salted_password
        )
    except InvalidRequestError as err:
        raise _Refused(ErrorCode.unacceptable_credential, err.message) from None


def _check_name(name: str) -> None:
    try:
        check_user_name(name)
    except InvalidRequestError as err:
        message = "Username must not be empty" if not name else err.message
        raise _Refused(ErrorCode.unacceptable_credential, message) from None


def _plan(
    deletions: Sequence[Any], upsertions: Sequence[Any]
) -> tuple[dict[str, _Error], dict[str, tuple[list[ScramCredential], list[str]]]]:
    """Each user's first error, and the changes of the users without one."""
    errors: dict[str, _Error] = {}
    changes: dict[str, tuple[list[ScramCredential], list[str]]] = {}
    twice = Counter((a.name, a.mechanism) for a in (*deletions, *upsertions))
    for alteration in (*deletions, *upsertions):
        name = alteration.name
        if name in errors:
            continue
        try:
            if twice[(name, alteration.mechanism)] > 1:
                message = "A user credential cannot be altered twice in the same request"
                raise _Refused(ErrorCode.duplicate_resource, message)
            _check_name(name)
            upserts, removed = changes.setdefault(name, ([], []))
            if hasattr(alteration, "salted_password"):
                upserts.append(_upsertion(alteration))
            else:
                removed.append(_mechanism(alteration.mechanism))
        except _Refused as refused:
            errors[name] = refused.error
            changes.pop(name, None)
    return errors, changes


@api(ALTER_USER_SCRAM_CREDENTIALS_KEY, "AlterUserScramCredentials", 0, 0)
async def alter(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    names = list(dict.fromkeys(a.name for a in (*body.deletions, *body.upsertions)))
    if not request.allowed(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refusal = (ErrorCode.cluster_authorization_failed, "Not authorized to Alter Cluster")
        return {"throttle_time": 0, "results": [_result(name, refusal) for name in names]}
    errors, changes = _plan(body.deletions, body.upsertions)
    store = request.security_store
    for name, (upserts, removed) in changes.items():
        try:
            await store.alter_user(name, upserts, removed)
        except TierlogError as err:
            errors[name] = (ErrorCode(err.kafka_error().code), err.message)
    return {"throttle_time": 0, "results": [_result(name, errors.get(name)) for name in names]}
