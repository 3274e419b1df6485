"""The v3 ACL API (Confluent's shapes) and the users API (ours), over the broker's :class:`SecurityStore`.

    GET    /v3/clusters/{cluster_id}/acls?resource_type=&resource_name=&pattern_type=&principal=&host=
                                          &operation=&permission=      -> 200 KafkaAclList
    POST   /v3/clusters/{cluster_id}/acls          one ACL              -> 201
    POST   /v3/clusters/{cluster_id}/acls:batch    {"data": [ACL, ...]} -> 201 (all or nothing)
    DELETE /v3/clusters/{cluster_id}/acls?<filter>                      -> 200 {"data": [deleted KafkaAcl]}
    GET    /v3/clusters/{cluster_id}/users                              -> 200 KafkaUserList
    PUT    /v3/clusters/{cluster_id}/users/{name}  {"password", "mechanism", "iterations"} -> 201 new / 200
                                          (replaces the user's password: its one credential)
    DELETE /v3/clusters/{cluster_id}/users/{name}                       -> 204, 404 unknown user

ACL enums are answered in upper case (``TOPIC``, ``PREFIXED``, ``DESCRIBE_CONFIGS``) and accepted in any
spelling :meth:`~tierlog.service.security.model.Operation.parse` knows. A list or delete filter's missing
fields match anything; a delete must name ``resource_type``, ``pattern_type``, ``operation`` and
``permission`` (``ANY`` is fine), as Confluent's does, so an empty query never deletes every ACL by accident.
Passwords are hashed in a worker thread and are never echoed, logged or stored: only the SCRAM credential is.

Errors: unknown cluster 404, malformed body or query 400 (40001), an invalid ACL, user name, mechanism or
iteration count 422 (42201), unknown user 404, the store unreachable 503. Authorization (Describe / Alter on
the Cluster) is the authorization middleware's, not these handlers'. OpenAPI: :mod:`.openapi`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from tierlog.service.admin_v3.routes import _body, _broker, _field, _Urls
from tierlog.service.security.acl import validate_binding, validate_filter
from tierlog.service.security.model import AclBinding, AclFilter
from tierlog.service.security.scram import DEFAULT_ITERATIONS, ScramCredential, make_credential
from tierlog.service.security.security_store import SECURITY_STORE, SecurityStore, check_user_name
from tierlog.service.topics.broker import Broker
from tierlog.wire.errors import BadRequestError, InvalidRequestError, UnavailableError

__all__ = ["ACL_FIELDS", "ROUTES", "acl_json", "setup_routes", "user_json"]

DEFAULT_MECHANISM = "SCRAM-SHA-256"
ACL_FIELDS = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission",
)
_DELETE_REQUIRED = ("resource_type", "pattern_type", "operation", "permission")

_CLUSTER = "/v3/clusters/{cluster_id}"
#: (method, route path) of every route registered here, for the authorizer's route table.
ROUTES = (
    ("GET", _CLUSTER + "/acls"),
    ("POST", _CLUSTER + "/acls"),
    ("POST", _CLUSTER + "/acls:batch"),
    ("DELETE", _CLUSTER + "/acls"),
    ("GET", _CLUSTER + "/users"),
    ("PUT", _CLUSTER + "/users/{name}"),
    ("DELETE", _CLUSTER + "/users/{name}"),
)


def _security(request: web.Request) -> tuple[Broker, SecurityStore]:
    """The broker (after checking the cluster id) and its security store. Raises NotFoundError (404),
    UnavailableError (503: opening, or no store loaded)."""
    broker = _broker(request)
    store = request.app.get(SECURITY_STORE)
    if store is None or not store.loaded:
        raise UnavailableError("the security store is not loaded yet")
    return broker, store


def acl_json(broker: Broker, binding: AclBinding) -> dict[str, Any]:
    """A ``KafkaAcl`` resource. Pure."""
    fields = {
        "resource_type": binding.resource_type.name,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type.name,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation.name,
        "permission": binding.permission.name,
    }
    self_url = f"{_Urls(broker).root}/acls?{urlencode(fields)}"
    return {"kind": "KafkaAcl", "metadata": {"self": self_url}, "cluster_id": broker.cluster_id, **fields}


def user_json(broker: Broker, name: str, credentials: dict[str, ScramCredential]) -> dict[str, Any]:
    """A ``KafkaUser`` resource: the name and each mechanism's iteration count, never a secret. Pure."""
    return {
        "kind": "KafkaUser",
        "metadata": {"self": f"{_Urls(broker).root}/users/{quote(name, safe='')}"},
        "cluster_id": broker.cluster_id,
        "name": name,
        "mechanisms": [
            {"mechanism": mechanism, "iterations": credentials[mechanism].iterations}
            for mechanism in sorted(credentials)
        ],
    }


def _list(broker: Broker, kind: str, path: str, data: list[dict[str, Any]]) -> web.Response:
    meta = {"self": _Urls(broker).root + path, "next": None}
    return web.json_response({"kind": kind, "metadata": meta, "data": data})


def _filter(request: web.Request, *, required: tuple[str, ...] = ()) -> AclFilter:
    """The ACL filter of the query string. Raises BadRequestError (a required field is missing),
    InvalidRequestError (an invalid value)."""
    query = request.query
    for name in required:
        if name not in query:
            raise BadRequestError(f"Query parameter {name} is required (ANY matches every value)")
    values = {name: query.get(name) for name in ACL_FIELDS}
    return validate_filter(**values)


def _binding(doc: Any) -> AclBinding:
    """One ACL of a request body. Raises BadRequestError (not an object, a field missing or not a string),
    InvalidRequestError (an invalid value)."""
    if not isinstance(doc, dict):
        raise BadRequestError("Each ACL must be a JSON object")
    values = [_field(doc, name, str, required=True) for name in ACL_FIELDS]
    return validate_binding(*values)


# ---- handlers --------------------------------------------------------------------------------------------


async def list_acls(request: web.Request) -> web.Response:
    """``GET .../acls``: the ACLs the query's filter matches, sorted. Read-only."""
    broker, store = _security(request)
    found = store.acls.select(_filter(request))
    return _list(broker, "KafkaAclList", "/acls", [acl_json(broker, b) for b in found])


async def create_acl(request: web.Request) -> web.Response:
    """``POST .../acls``: 201. Idempotent (an existing ACL is no error)."""
    _, store = _security(request)
    await store.create_acls([_binding(await _body(request))])
    return web.Response(status=201)


async def create_acls_batch(request: web.Request) -> web.Response:
    """``POST .../acls:batch``: 201; every ACL is checked before any is written, and all are written in one
    commit. Idempotent."""
    _, store = _security(request)
    data = _field(await _body(request), "data", list, required=True)
    await store.create_acls([_binding(entry) for entry in data])
    return web.Response(status=201)


async def delete_acls(request: web.Request) -> web.Response:
    """``DELETE .../acls?<filter>``: 200 with the ACLs deleted (none is no error)."""
    broker, store = _security(request)
    deleted = await store.delete_acls(_filter(request, required=_DELETE_REQUIRED))
    return web.json_response({"data": [acl_json(broker, b) for b in deleted]})


async def list_users(request: web.Request) -> web.Response:
    """``GET .../users``: every user and its mechanisms, sorted by name. Read-only."""
    broker, store = _security(request)
    data = []
    for name in store.user_names():
        credentials = store.user(name)
        if credentials is not None:
            data.append(user_json(broker, name, credentials))
    return _list(broker, "KafkaUserList", "/users", data)


async def put_user(request: web.Request) -> web.Response:
    """``PUT .../users/{name}``: replace the user's password: its credential becomes the one of
    ``mechanism`` (a credential of another mechanism is dropped, so an older password stops working); 201
    for a new user, else 200. Idempotent in effect (a new salt each time)."""
    broker, store = _security(request)
    name = check_user_name(request.match_info["name"])
    doc = await _body(request)
    password = _field(doc, "password", str, required=True)
    mechanism = _field(doc, "mechanism", str) or DEFAULT_MECHANISM
    iterations = _field(doc, "iterations", int)
    if not password:
        raise InvalidRequestError("the password may not be empty")
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError("the password is not valid Unicode text") from None
    credential = await asyncio.to_thread(
        make_credential, password, mechanism, DEFAULT_ITERATIONS if iterations is None else iterations
    )
    del password, doc
    created = await store.put_user(name, credential)
    answer = {credential.mechanism: credential}
    return web.json_response(user_json(broker, name, answer), status=201 if created else 200)


async def delete_user(request: web.Request) -> web.Response:
    """``DELETE .../users/{name}``: 204; 404 when there is no such user."""
    _, store = _security(request)
    await store.remove_user(check_user_name(request.match_info["name"]))
    return web.Response(status=204)


def setup_routes(app: web.Application) -> None:
    """Register the ACL and user routes (the app must hold a started store under SECURITY_STORE by the
    time requests come; until then they answer 503)."""
    router = app.router
    router.add_get(_CLUSTER + "/acls", list_acls, allow_head=False)
    router.add_post(_CLUSTER + "/acls", create_acl)
    router.add_post(_CLUSTER + "/acls:batch", create_acls_batch)
    router.add_delete(_CLUSTER + "/acls", delete_acls)
    router.add_get(_CLUSTER + "/users", list_users, allow_head=False)
    router.add_put(_CLUSTER + "/users/{name}", put_user)
    router.add_delete(_CLUSTER + "/users/{name}", delete_user)
