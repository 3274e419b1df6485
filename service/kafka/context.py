"""What a Kafka API handler is given besides the request body: the request's header, the broker and
this listener's own address, and who is asking (the connection's :class:`Session`).

Every handler checks Kafka's ACL for its API with :meth:`KafkaRequest.allowed` (or
:meth:`~KafkaRequest.refusal` for an error to answer) once per resource the request names, before touching
it; with authentication off both allow everything. Consumer-group APIs check, as Kafka does: FindCoordinator
``Describe`` on the Group, JoinGroup/SyncGroup/Heartbeat/LeaveGroup ``Read`` on the Group, OffsetCommit
``Read`` on the Group and on each Topic, OffsetFetch ``Describe`` on the Group (and on each Topic,
unauthorized ones filtered), OffsetDelete ``Delete`` on the Group and ``Read`` on each Topic, DescribeGroups
``Describe`` on the Group, DeleteGroups ``Delete`` on the Group, ListGroups ``Describe`` on the Cluster,
else only the groups with ``Describe`` (:meth:`KafkaRequest.granted`, which counts no refusal). Refusals
answer GROUP_AUTHORIZATION_FAILED (30) / TOPIC_AUTHORIZATION_FAILED (29) per resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierlog.service import metrics as metric_names
from tierlog.service.security.model import (
    ANONYMOUS,
    CLUSTER_NAME,
    Operation,
    Principal,
    ResourceType,
)
from tierlog.service.security.security_store import SECURITY_STORE, SecurityStore
from tierlog.wire.errors import AuthorizationError, UnavailableError

if TYPE_CHECKING:
    from tierlog.service.kafka.frames import RequestHeader
    from tierlog.service.kafka.sasl import ScramExchange
    from tierlog.service.kafka.server import KafkaListener
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.broker import Broker

__all__ = ["KafkaRequest", "Session"]


@dataclass(slots=True)
class Session:
    """One connection's security state. ``principal`` is None until the connection has authenticated
    (a SASL exchange); ``host`` is the client's address as ACLs name it. ``mechanism`` is the one the
    SaslHandshake chose, ``scram`` a SCRAM exchange between its two messages. ``close_after_answer``
    ends the connection once the current answer is written (a failed authentication, as Kafka does).

    KIP-368: ``expires_at`` is the event-loop time the authenticated session ends (None: never), after
    which the connection is closed at its next request unless it re-authenticates (a SaslHandshake of
    ``authenticated_with``'s mechanism, then SaslAuthenticate, keeping ``principal``); ``reauthenticating``
    is set in between. ``raw_tokens``: a SaslHandshake v0 chose the mechanism, so SASL tokens come as bare
    frames without a request header (Kafka's clients before SaslAuthenticate).
    """

    host: str
    principal: Principal | None = ANONYMOUS
    mechanism: str | None = None
    scram: ScramExchange | None = None
    mechanism_of_scram: str | None = None  # the mechanism of ``scram``, whose throttle place it holds
    close_after_answer: bool = False
    raw_tokens: bool = False
    authenticated_with: str | None = None
    expires_at: float | None = None
    reauthenticating: bool = False
    reauthentication_began: float | None = None
    reauthentication_refusal: str | None = None  # why the re-authentication under way fails


@dataclass(slots=True)
class KafkaRequest:
    """One request on one connection. ``peer`` is the client's ``(host, port)``. ``zero_copy``: the
    answer may leave record bytes in files for the listener to ``sendfile`` (a plaintext connection)."""

    header: RequestHeader
    listener: KafkaListener
    peer: tuple[str, int]
    session: Session = field(default_factory=lambda: Session(host=""))
    zero_copy: bool = False

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def broker(self) -> Broker:
        return self.listener.broker

    @property
    def settings(self) -> Settings:
        return self.listener.settings

    @property
    def security_store(self) -> SecurityStore:
        """The broker's users and ACLs (the ones the HTTP APIs manage). Raises UnavailableError until the
        store has loaded."""
        app = self.listener.app
        store = None if app is None else app.get(SECURITY_STORE)
        if store is None or not store.loaded:
            raise UnavailableError("the security store is not loaded yet")
        return store

    @property
    def principal(self) -> Principal:
        """Who is asking (``User:ANONYMOUS`` with authentication off)."""
        return self.session.principal or ANONYMOUS

    def refusal(
        self, operation: Operation, resource_type: ResourceType, name: str
    ) -> AuthorizationError | None:
        """None when :meth:`allowed`, else the error to answer (its ``kafka_error()`` is Kafka's
        TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED for ``resource_type``), with HTTP's message."""
        if self.allowed(operation, resource_type, name):
            return None
        return AuthorizationError(
            f"Not authorized to {operation.kafka_name} {resource_type.kafka_name} '{name}'",
            resource_type=resource_type.value,
        )

    def may_create_topic(self, name: str) -> bool:
        """Kafka's rule for creating ``name`` (CreateTopics, auto-creation): CREATE on the cluster or on
        that topic. Counts one refusal at most."""
        return self.granted(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or self.allowed(
            Operation.CREATE, ResourceType.TOPIC, name
        )

    def granted_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether some ACL lets the principal do ``operation`` on some resource of ``resource_type``
        (Kafka's authorizeByResourceType); counts nothing. True with authentication off."""
        authorizer = self.listener.authorizer
        if authorizer is None or not authorizer.enabled:
            return True
        return authorizer.current().authorize_any(self.principal, self.session.host, operation, resource_type)

    def count_denied(self, resource_type: ResourceType) -> None:
        """Count one refusal in ``tierlog_authorization_denied_total`` (after :meth:`granted` checks)."""
        self.listener.metrics.inc(metric_names.AUTHORIZATION_DENIED, 1.0, resource_type=resource_type.name)

    def granted(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """:meth:`allowed` without counting a refusal (for one of several checks that may allow)."""
        authorizer = self.listener.authorizer
        if authorizer is None or not authorizer.enabled:
            return True
        return authorizer.current().authorize(
            self.principal, self.session.host, operation, resource_type, name
        )

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether this connection's principal may do ``operation`` on the resource (the ACLs, as on
        HTTP); True with authentication off. A refusal counts in ``tierlog_authorization_denied_total``
        (so call it once per resource a request names). Safe concurrently; never raises."""
        authorizer = self.listener.authorizer
        if authorizer is None or not authorizer.enabled:
            return True
        if authorizer.current().authorize(self.principal, self.session.host, operation, resource_type, name):
            return True
        self.listener.metrics.inc(metric_names.AUTHORIZATION_DENIED, 1.0, resource_type=resource_type.name)
        return False
