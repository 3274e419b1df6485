"""Authorization: Kafka's ACLs on every route (``docs/design/0012-security.md``, ``docs/security.md``).

Two layers. :data:`ROUTE_ACTIONS` gives every route the application registers (method and canonical path) the
operation and the resource its path names, or a marker: :data:`OPEN` (no credentials), :data:`AUTHENTICATED`
(any principal; the answer filters itself), :data:`HANDLER` (the handler checks, because the resource is in
the body or the answer is a filtered listing). :func:`authz_middleware` enforces the row before the handler
runs and refuses a route that has none (403: fail closed). Handlers then call :func:`authorize` for what
their body names, and :func:`allowed` to filter listings, always before any side effect.

A request forwarded by another broker carries the client's principal (``Tierlog-Forwarded-Principal``); the
middleware acts as that principal only when the forwarding caller is a broker, that is a super user
(``super.users``), as Kafka's forwarding envelope (KIP-590) does; otherwise the headers are ignored. Neither
``allow.everyone.if.no.acl.found`` nor an ALLOW ClusterAction ACL makes a caller a broker: either would let an
ordinary user act as anyone, a super user included.

With authentication off, :func:`authorize` and :func:`allowed` are no-ops and no middleware is installed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tierlog.service.metrics import AUTHORIZATION_DENIED, describe_security_metrics
from tierlog.service.security.acl import AclAuthorizer, AclSnapshot, canonical_host
from tierlog.service.security.authn import CLIENT_HOST, FORWARDED_HOST, FORWARDED_PRINCIPAL, PRINCIPAL
from tierlog.service.security.model import CLUSTER_NAME, Operation, Principal, ResourceType
from tierlog.service.web.keys import BROKER, METRICS
from tierlog.wire import native
from tierlog.wire.errors import AuthorizationError, InvalidRequestError

if TYPE_CHECKING:
    from tierlog.service.security.security_store import SecurityStore
    from tierlog.service.security.settings import SecuritySettings
    from tierlog.service.topics.broker import Topic

__all__ = [
    "AUTHENTICATED",
    "AUTHORIZER",
    "HANDLER",
    "OPEN",
    "ROUTE_ACTIONS",
    "Authorizer",
    "Marker",
    "Need",
    "allowed",
    "allowed_any",
    "authorize",
    "authorize_create",
    "authz_middleware",
    "ensure_topic",
    "is_enabled",
    "filter_allowed",
]


class Marker(enum.Enum):
    """A route whose row names no resource."""

    OPEN = "open"  # no credentials (health, readiness, the OpenAPI document)
    AUTHENTICATED = "authenticated"  # any authenticated principal
    HANDLER = "handler"  # the handler checks (body-named resources, filtered listings)


OPEN = Marker.OPEN
AUTHENTICATED = Marker.AUTHENTICATED
HANDLER = Marker.HANDLER


@dataclass(frozen=True, slots=True)
class Need:
    """``operation`` on the resource of ``resource_type`` whose name is the path parameter ``key`` (the
    Cluster when ``key`` is None)."""

    operation: Operation
    resource_type: ResourceType
    key: str | None = None

    def name(self, match_info: Mapping[str, str]) -> str:
        """The resource's name, read from the path parameters of the route the request reaches."""
        return CLUSTER_NAME if self.key is None else match_info[self.key]


Row = Marker | tuple[Need, ...]


class Authorizer:
    """The application's ACL decision: an :class:`AclAuthorizer` over the store's current snapshot, rebuilt
    only when the snapshot object changes. Used from the event loop; reads are lock-free."""

    def __init__(self, security: SecuritySettings, store: SecurityStore) -> None:
        self.enabled = security.enabled
        self._store = store
        self._super_users = security.super_users
        self._allow_everyone = security.allow_everyone_if_no_acl_found
        self._snapshot: AclSnapshot | None = None
        self._decider: AclAuthorizer | None = None

    def current(self) -> AclAuthorizer:
        """The decider for the store's current ACLs. Pure apart from the one-entry cache."""
        snapshot = self._store.acls
        if snapshot is not self._snapshot or self._decider is None:
            self._decider = AclAuthorizer(
                snapshot, super_users=self._super_users, allow_everyone_if_no_acl_found=self._allow_everyone
            )
            self._snapshot = snapshot
        return self._decider

    def is_broker(self, principal: Principal) -> bool:
        """Whether ``principal`` may speak for others (forwarded principals): a super user. Pure."""
        return str(principal) in self._super_users


AUTHORIZER: web.AppKey[Authorizer] = web.AppKey("tierlog.authorizer", Authorizer)


def _refusal(operation: Operation, resource_type: ResourceType, name: str) -> AuthorizationError:
    message = f"Not authorized to {operation.kafka_name} {resource_type.kafka_name} '{name}'"
    return AuthorizationError(message, resource_type=resource_type.value)


def allowed(request: web.Request, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may do ``operation`` on the resource. True with security off.
    Safe concurrently; never raises."""
    authorizer = request.app[AUTHORIZER]
    if not authorizer.enabled:
        return True
    return authorizer.current().authorize(
        request[PRINCIPAL], request[CLIENT_HOST], operation, resource_type, name
    )


def allowed_any(request: web.Request, operation: Operation, resource_type: ResourceType) -> bool:
    """Whether some ACL lets the principal do ``operation`` on some resource of ``resource_type`` (Kafka's
    authorizeByResourceType). True with security off. Never raises."""
    authorizer = request.app[AUTHORIZER]
    if not authorizer.enabled:
        return True
    return authorizer.current().authorize_any(
        request[PRINCIPAL], request[CLIENT_HOST], operation, resource_type
    )


def authorize(request: web.Request, operation: Operation, resource_type: ResourceType, name: str) -> None:
    """Refuse the request unless its principal may do ``operation`` on the resource. A no-op with security
    off. The message names the operation and the resource the caller asked for, never whether it exists.

    Raises:
        AuthorizationError: (40301) no ACL allows it, or a Deny ACL refuses it.
    """
    if not allowed(request, operation, resource_type, name):
        request.app[METRICS].inc(AUTHORIZATION_DENIED, 1.0, resource_type=resource_type.name)
        raise _refusal(operation, resource_type, name)


def is_enabled(request: web.Request) -> bool:
    """Whether ACLs are enforced for ``request``'s application (authentication on)."""
    return request.app[AUTHORIZER].enabled


async def ensure_topic(request: web.Request, name: str) -> Topic:
    """The topic ``name``, auto-created (``auto.create.topics.enable``) only when the principal may create
    it (:func:`authorize_create`), checked before anything is created. Safe concurrently.

    Raises:
        AuthorizationError: (40301) the topic does not exist and the principal may not create it.
        UnknownTopicError, InvalidConfigError: as :meth:`Broker.ensure_topic`.
    """
    broker = request.app[BROKER]
    if (
        request.app[AUTHORIZER].enabled
        and broker.settings.auto_create_topics_enable
        and broker.ready
        and name not in broker.cluster_view().partitions
    ):
        authorize_create(request, name)
    return await broker.ensure_topic(name)


def authorize_create(request: web.Request, topic: str) -> None:
    """Refuse creating ``topic`` (v3 create, auto-create on produce or metadata) unless the principal may
    Create on the Cluster or on that Topic (Kafka's rule). A no-op with security off.

    Raises:
        AuthorizationError: (40301) neither is allowed.
    """
    if allowed(request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
        return
    authorize(request, Operation.CREATE, ResourceType.TOPIC, topic)


def filter_allowed(
    request: web.Request, operation: Operation, resource_type: ResourceType, names: Iterable[str]
) -> list[str]:
    """The ``names`` the principal may do ``operation`` on, in their order (all with security off)."""
    if not request.app[AUTHORIZER].enabled:
        return list(names)
    return [name for name in names if allowed(request, operation, resource_type, name)]


def _needs(*needs: tuple[Operation, ResourceType, str | None]) -> tuple[Need, ...]:
    return tuple(Need(op, kind, key) for op, kind, key in needs)


_READ, _WRITE, _DESCRIBE = Operation.READ, Operation.WRITE, Operation.DESCRIBE
_TOPIC, _GROUP, _CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
_READ_TOPIC = _needs((_READ, _TOPIC, "topic"))
_DESCRIBE_TOPIC = _needs((_DESCRIBE, _TOPIC, "topic"))
_DESCRIBE_TOPIC_V3 = _needs((_DESCRIBE, _TOPIC, "topic_name"))
_READ_GROUP = _needs((_READ, _GROUP, "group"))
_DESCRIBE_GROUP = _needs((_DESCRIBE, _GROUP, "group"))
_DESCRIBE_CLUSTER = _needs((_DESCRIBE, _CLUSTER, None))
_ALTER_CLUSTER = _needs((Operation.ALTER, _CLUSTER, None))
_CLUSTER_ACTION = _needs((Operation.CLUSTER_ACTION, _CLUSTER, None))

_V3 = "/v3/clusters/{cluster_id}"
_V3_TOPIC = _V3 + "/topics/{topic_name}"
_V3_GROUP = _V3 + "/consumer-groups/{group}"
_INSTANCE = "/consumers/{group}/instances/{instance}"
_NATIVE_GROUP = native.GROUPS_PREFIX + "/{group}"

# GET rows also cover HEAD (added below).
_ROWS: dict[tuple[str, str], Row] = {
    ("GET", "/health"): OPEN,
    ("GET", "/ready"): OPEN,
    ("GET", "/openapi.json"): OPEN,
    ("GET", "/metrics"): HANDLER,  # Describe Cluster unless metrics.public
    # v3 admin
    ("GET", "/v3/clusters"): _DESCRIBE_CLUSTER,
    ("GET", _V3): _DESCRIBE_CLUSTER,
    ("GET", _V3 + "/brokers"): _DESCRIBE_CLUSTER,
    ("GET", _V3 + "/brokers/{broker_id}"): _DESCRIBE_CLUSTER,
    ("GET", _V3 + "/topics"): HANDLER,  # filtered to Describe
    ("POST", _V3 + "/topics"): HANDLER,  # Create on the Cluster or the Topic the body names
    ("GET", _V3_TOPIC): _DESCRIBE_TOPIC_V3,
    ("PATCH", _V3_TOPIC): _needs((Operation.ALTER, _TOPIC, "topic_name")),
    ("DELETE", _V3_TOPIC): _needs((Operation.DELETE, _TOPIC, "topic_name")),
    ("GET", _V3_TOPIC + "/configs"): _needs((Operation.DESCRIBE_CONFIGS, _TOPIC, "topic_name")),
    ("POST", _V3_TOPIC + "/configs:alter"): _needs((Operation.ALTER_CONFIGS, _TOPIC, "topic_name")),
    ("GET", _V3_TOPIC + "/configs/{name}"): _needs((Operation.DESCRIBE_CONFIGS, _TOPIC, "topic_name")),
    ("PUT", _V3_TOPIC + "/configs/{name}"): _needs((Operation.ALTER_CONFIGS, _TOPIC, "topic_name")),
    ("DELETE", _V3_TOPIC + "/configs/{name}"): _needs((Operation.ALTER_CONFIGS, _TOPIC, "topic_name")),
    ("GET", _V3_TOPIC + "/partitions"): _DESCRIBE_TOPIC_V3,
    ("GET", _V3_TOPIC + "/partitions/{partition_id}"): _DESCRIBE_TOPIC_V3,
    ("GET", _V3_TOPIC + "/partitions/{partition_id}/replicas"): _DESCRIBE_TOPIC_V3,
    ("GET", _V3_TOPIC + "/partitions/{partition_id}/replicas/{broker_id}"): _DESCRIBE_TOPIC_V3,
    ("GET", _V3 + "/consumer-groups"): HANDLER,  # filtered to Describe
    ("GET", _V3_GROUP): _DESCRIBE_GROUP,
    ("GET", _V3_GROUP + "/consumers"): _DESCRIBE_GROUP,
    ("GET", _V3_GROUP + "/lags"): _DESCRIBE_GROUP,  # and its topics filtered to Describe
    ("GET", _V3_GROUP + "/lag-summary"): _DESCRIBE_GROUP,
    ("GET", _V3 + "/acls"): _DESCRIBE_CLUSTER,
    ("POST", _V3 + "/acls"): _ALTER_CLUSTER,
    ("DELETE", _V3 + "/acls"): _ALTER_CLUSTER,
    ("POST", _V3 + "/acls:batch"): _ALTER_CLUSTER,
    ("GET", _V3 + "/users"): _DESCRIBE_CLUSTER,
    ("PUT", _V3 + "/users/{name}"): _ALTER_CLUSTER,
    ("DELETE", _V3 + "/users/{name}"): _ALTER_CLUSTER,
    # REST v2
    ("GET", "/brokers"): AUTHENTICATED,
    ("GET", "/topics"): HANDLER,  # filtered to Describe
    ("GET", "/topics/{topic}"): _DESCRIBE_TOPIC,
    ("POST", "/topics/{topic}"): _needs((_WRITE, _TOPIC, "topic")),
    ("GET", "/topics/{topic}/partitions"): _DESCRIBE_TOPIC,
    ("GET", "/topics/{topic}/partitions/{partition}"): _DESCRIBE_TOPIC,
    ("POST", "/topics/{topic}/partitions/{partition}"): _needs((_WRITE, _TOPIC, "topic")),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): _DESCRIBE_TOPIC,
    ("GET", "/topics/{topic}/partitions/{partition}/records"): _READ_TOPIC,
    ("GET", "/topics/{topic}/partitions/{partition}/messages"): _READ_TOPIC,
    # native
    ("POST", native.PARTITION_ROUTE + "/batches"): _needs((_WRITE, _TOPIC, "topic")),
    ("GET", native.PARTITION_ROUTE + "/batches"): _READ_TOPIC,
    ("GET", native.PARTITION_ROUTE + "/offsets"): _DESCRIBE_TOPIC,
    ("GET", native.TOPIC_ROUTE): _DESCRIBE_TOPIC,
    ("GET", native.METADATA_PATH): AUTHENTICATED,  # topics filtered to Describe
    ("POST", native.PRODUCERS_PATH): HANDLER,  # IdempotentWrite on the Cluster or Write on any topic
    ("GET", native.REPLICA_PARTITION_ROUTE + "/batches"): _CLUSTER_ACTION,
    ("GET", native.REPLICA_PARTITION_ROUTE + "/epochs/{epoch}"): _CLUSTER_ACTION,
    ("POST", native.ALTER_PARTITION_PATH): _CLUSTER_ACTION,
    # REST v2 consumer instances
    ("POST", "/consumers/{group}"): _READ_GROUP,
    ("DELETE", _INSTANCE): _READ_GROUP,
    ("POST", _INSTANCE + "/subscription"): _READ_GROUP,  # and Read on each topic (handler)
    ("GET", _INSTANCE + "/subscription"): _READ_GROUP,
    ("DELETE", _INSTANCE + "/subscription"): _READ_GROUP,
    ("POST", _INSTANCE + "/assignments"): _READ_GROUP,  # and Read on each topic (handler)
    ("GET", _INSTANCE + "/assignments"): _READ_GROUP,
    ("POST", _INSTANCE + "/positions"): _READ_GROUP,
    ("POST", _INSTANCE + "/positions/beginning"): _READ_GROUP,
    ("POST", _INSTANCE + "/positions/end"): _READ_GROUP,
    ("GET", _INSTANCE + "/records"): _READ_GROUP,  # and Read on each topic it returns (handler)
    ("POST", _INSTANCE + "/offsets"): _READ_GROUP,  # and Read on each topic (handler)
    ("GET", _INSTANCE + "/offsets"): _needs((_DESCRIBE, _GROUP, "group")),  # and Describe on each topic
    ("GET", _INSTANCE + "/topics/{topic}"): _needs((_READ, _GROUP, "group"), (_READ, _TOPIC, "topic")),
    # native groups
    ("GET", native.GROUPS_PREFIX): HANDLER,  # filtered to Describe
    ("GET", _NATIVE_GROUP): _DESCRIBE_GROUP,
    ("POST", _NATIVE_GROUP + "/join"): _READ_GROUP,
    ("POST", _NATIVE_GROUP + "/sync"): _READ_GROUP,
    ("POST", _NATIVE_GROUP + "/heartbeat"): _READ_GROUP,
    ("POST", _NATIVE_GROUP + "/leave"): _READ_GROUP,
    ("POST", _NATIVE_GROUP + "/offsets/commit"): _READ_GROUP,  # and Read on each topic (handler)
    ("POST", _NATIVE_GROUP + "/offsets/fetch"): _DESCRIBE_GROUP,  # and Describe on each topic (handler)
}

#: (method, canonical route path) -> what the route needs. Every route the application registers has a row.
ROUTE_ACTIONS: dict[tuple[str, str], Row] = {
    **_ROWS,
    **{("HEAD", path): row for (method, path), row in _ROWS.items() if method == "GET"},
}


def _forwarded(request: web.Request) -> None:
    forwarded = request.headers.get(FORWARDED_PRINCIPAL)
    if forwarded is None or not request.app[AUTHORIZER].is_broker(request[PRINCIPAL]):
        return
    try:
        request[PRINCIPAL] = Principal.parse(forwarded)
    except InvalidRequestError:
        return
    request[CLIENT_HOST] = canonical_host(request.headers.get(FORWARDED_HOST, request[CLIENT_HOST]))


async def _route(request: web.Request) -> tuple[str, Mapping[str, str]] | None:
    """The canonical path and the path parameters of the route ``request`` reaches, None for none.
    ``/path/`` without a route of its own reaches ``/path``'s, re-resolved as
    :func:`~tierlog.service.web.routing.trailing_slash_middleware` does: the parameters are the stripped
    path's
    (the request's own match is the 404's, with none)."""
    match_info = request.match_info
    if match_info.http_exception is None:
        resource = match_info.route.resource
        return None if resource is None else (resource.canonical, match_info)
    path = request.rel_url.path
    if len(path) < 2 or not path.endswith("/"):
        return None
    stripped = await request.app.router.resolve(
        request.clone(rel_url=request.rel_url.with_path(path.rstrip("/") or "/"))
    )
    if stripped.http_exception is not None or stripped.route.resource is None:
        return None
    return stripped.route.resource.canonical, stripped


def authz_middleware(security: SecuritySettings) -> Middleware | None:
    """The authorization middleware, placed right after the authentication one; None with security off.

    Raises:
        AuthorizationError: (40301) the route has no row in :data:`ROUTE_ACTIONS`, or the principal lacks
            what its row needs.
    """
    if not security.enabled:
        return None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = await _route(request)
        if route is None:
            return await handler(request)  # no route: the 404 or 405 answer
        path, match_info = route
        row = ROUTE_ACTIONS.get((request.method, path))
        if isinstance(row, Marker):
            if row is not OPEN:
                _forwarded(request)
            return await handler(request)
        if row is None:
            request.app[METRICS].inc(AUTHORIZATION_DENIED, 1.0, resource_type="ROUTE")
            raise AuthorizationError(f"Not authorized: {request.method} {path} has no access rule")
        _forwarded(request)
        for need in row:
            authorize(request, need.operation, need.resource_type, need.name(match_info))
        return await handler(request)

    return middleware


def setup_authorizer(app: web.Application, security: SecuritySettings, store: SecurityStore) -> None:
    """Put the application's :class:`Authorizer` under :data:`AUTHORIZER`."""
    describe_security_metrics(app[METRICS])
    app[AUTHORIZER] = Authorizer(security, store)
