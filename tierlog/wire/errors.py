"""The one table of tierlog's error codes, shared by the broker, the storage engine and the client.

Every error code that crosses the wire is defined here exactly once, as a class. A few public *kinds*
(``InvalidRequestError``, ``NotFoundError``, ``ConflictError``, ``UnavailableError``,
``CorruptRecordError``, ``UnauthorizedError``, ``InternalError``) carry a stable ``code`` and a
``retriable`` flag; the specific errors are subclasses of one kind, so callers match on the kind, the class
or the code, never on a message string.

Codes follow the Confluent REST proxy where one exists: the first three digits of a five-digit code are
its HTTP status family (40401 is a 404, 50301 a 503), and Confluent's v3 admin API also answers plain
three-digit codes (404). :func:`http_status` is that derivation; the broker's web layer
(:mod:`tierlog.service.web.errors`) answers with it.

Each class also declares its Kafka error (``kafka``, a :class:`KafkaError`: the numeric code and name of
Kafka's ``Errors`` enum), so a Kafka-protocol listener answers the same condition with the code a Kafka client
expects. Where Kafka has no exact equivalent the class names the nearest one and says so (``exact=False``),
or Kafka's ``UNKNOWN_SERVER_ERROR`` (-1) when nothing comes close (the client-only errors never travel).
:meth:`TierlogError.kafka_error` is the one for an instance (an :class:`AuthorizationError` answers the
topic, group or cluster code of the resource it was refused).

The code-to-class registry is built from the classes: every subclass of :class:`TierlogError` that declares
``code`` in its own body registers it when the class is created (client-only errors in
:mod:`tierlog.client.errors` too), and a second class claiming a registered code is a ``TypeError`` at import.
:func:`error_for_code` turns a code received from a broker back into its class, so the broker and the client
cannot drift apart (the pattern of Kafka's ``Errors`` and aiokafka's ``errors.py``).

The whole table (code, HTTP status, kind, retriable, Kafka code and name, class, meaning) is generated from
the classes into ``docs/errors.md`` (:mod:`tierlog.wire.errors_doc`; a test keeps the file current).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "KafkaError",
    "UNKNOWN_SERVER_ERROR",
    "NO_KAFKA_EQUIVALENT",
    "http_status",
    "TierlogError",
    "InvalidRequestError",
    "NotFoundError",
    "ConflictError",
    "UnavailableError",
    "InsufficientStorageError",
    "ResourceLimitError",
    "storage_error",
    "CorruptRecordError",
    "UnauthorizedError",
    "AuthorizationError",
    "ThrottledError",
    "InternalError",
    "BadRequestError",
    "InvalidConfigError",
    "CorruptBatchError",
    "NotAcceptableError",
    "UnsupportedMediaTypeError",
    "RecordTooLargeError",
    "OffsetOutOfRangeError",
    "InvalidValueError",
    "InvalidConsumerConfigError",
    "InvalidBodyError",
    "SchemaRegistryRequiredError",
    "MethodNotAllowedError",
    "NoSuchRouteError",
    "UnknownTopicError",
    "UnknownPartitionError",
    "ConsumerInstanceNotFoundError",
    "UnknownMemberError",
    "UnknownGroupError",
    "ConsumerInstanceExistsError",
    "IllegalStateError",
    "RebalanceInProgressError",
    "IllegalGenerationError",
    "InvalidUpdateVersionError",
    "IneligibleReplicaError",
    "OffsetMovedToTieredStorageError",
    "UnknownProducerIdError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "DuplicateSequenceError",
    "NotLeaderOrFollowerError",
    "NotCoordinatorError",
    "LeaderNotAvailableError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "NotControllerError",
    "ProduceTimedOutError",
    "error_for_code",
    "error_from_answer",
    "registered_errors",
]

_REGISTRY: dict[int, type[TierlogError]] = {}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class KafkaError:
    """An entry of Kafka's ``Errors`` enum (its numeric code and name), as one of our classes maps to it.

    ``exact`` is False when Kafka has no error for the same condition and ``code`` is the nearest one (or
    :data:`UNKNOWN_SERVER_ERROR` when nothing comes close).
    """

    code: int
    name: str
    exact: bool = True


UNKNOWN_SERVER_ERROR = KafkaError(-1, "UNKNOWN_SERVER_ERROR")
# What a class declares when Kafka has nothing close to it (client-only errors, lost compare-and-set races).
NO_KAFKA_EQUIVALENT = KafkaError(-1, "UNKNOWN_SERVER_ERROR", exact=False)
_INVALID_REQUEST_NEAREST = KafkaError(42, "INVALID_REQUEST", exact=False)


def http_status(code: int) -> int:
    """The HTTP status an error code answers with. Pure.

    Confluent's five-digit codes start with their status (40401 is a 404, 50301 a 503); its v3 admin API
    also answers plain three-digit codes, which are the status itself.
    """
    return code if code < 1000 else code // 100


class TierlogError(Exception):
    """Base of every error tierlog raises on purpose.

    ``code`` is the stable numeric code of the class; only :func:`error_for_code` sets a different one on
    an instance (the number a broker sent that no class has). The base itself registers no code: a bare
    ``TierlogError`` is answered as an internal error.
    """

    code: int = 50001
    retriable: ClassVar[bool] = False
    # The public kind the class rolls up into, as docs/errors.md names it; declared on each kind.
    kind: ClassVar[str] = "internal"
    kafka: ClassVar[KafkaError] = UNKNOWN_SERVER_ERROR
    # What a broker puts before the message on the wire: the start of the peer proxies' message that
    # clients match on ("Illegal state: "). The message itself stays as raised, so a round trip keeps it.
    PREFIX: ClassVar[str] = ""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __init_subclass__(cls, **kwargs: object) -> None:
        """Register ``cls`` under the ``code`` its own body declares.

        Raises:
            TypeError: another class already holds that code.
        """
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            return
        holder = _REGISTRY.get(cls.code)
        if holder is not None and _name(holder) != _name(cls):
            raise TypeError(f"error code {cls.code} of {_name(cls)} is already held by {_name(holder)}")
        _REGISTRY[cls.code] = cls  # the same class again is a module reload

    def __str__(self) -> str:
        return self.message

    def kafka_error(self) -> KafkaError:
        """The Kafka error this instance answers with on a Kafka-protocol listener: the class's ``kafka``.
        Pure."""
        return self.kafka


# --- the kinds ---------------------------------------------------------------------------------------------


class InvalidRequestError(TierlogError):
    """The request is malformed or names an invalid value. Never retried. Also Confluent's "key error"."""

    code = 42201
    kind = "invalid request"
    kafka = KafkaError(42, "INVALID_REQUEST")


class NotFoundError(TierlogError):
    """Something does not exist (a cluster, broker, config, object). Never retried.

    404 is the plain code Confluent's v3 admin API answers; the specific not-found errors have their own.
    """

    code = 404
    kind = "not found"
    kafka = KafkaError(91, "RESOURCE_NOT_FOUND")


class ConflictError(TierlogError):
    """The request conflicts with the current state (already exists, fenced, stale generation)."""

    code = 40901
    kind = "conflict"
    kafka = NO_KAFKA_EQUIVALENT  # lost compare-and-set races, a directory already open


class UnavailableError(TierlogError):
    """A dependency is temporarily unavailable (object store down, disk budget full). Retriable."""

    code = 50301
    kind = "unavailable"
    kafka = KafkaError(56, "KAFKA_STORAGE_ERROR", exact=False)  # retriable, as ours
    retriable = True


class CorruptRecordError(TierlogError):
    """Bytes failed validation: bad CRC, impossible length, truncated batch. Never served as data."""

    code = 50002
    kind = "corrupt data"
    kafka = KafkaError(2, "CORRUPT_MESSAGE")


class UnauthorizedError(TierlogError):
    """The caller is not allowed to do this. As a broker answer: authentication failed (401, with a
    ``WWW-Authenticate`` challenge): no credentials, or credentials that do not verify."""

    code = 40101
    kind = "unauthorized"
    kafka = KafkaError(58, "SASL_AUTHENTICATION_FAILED")


class AuthorizationError(UnauthorizedError):
    """The caller is authenticated but no ACL allows the operation (403; Confluent's 40301). Never retried.
    ``docs/security.md`` lists the ACL each action needs.

    ``resource_type`` names what was refused (an ACL resource type: ``TOPIC``, ``GROUP``, ``CLUSTER``,
    ``TRANSACTIONAL_ID``; empty when the request matched no access rule at all); it picks the Kafka error
    (:meth:`kafka_error`) and is not sent on the HTTP wire.
    """

    code = 40301
    kafka = KafkaError(31, "CLUSTER_AUTHORIZATION_FAILED", exact=False)  # no resource named
    KAFKA_BY_RESOURCE: ClassVar[Mapping[str, KafkaError]] = {
        "TOPIC": KafkaError(29, "TOPIC_AUTHORIZATION_FAILED"),
        "GROUP": KafkaError(30, "GROUP_AUTHORIZATION_FAILED"),
        "CLUSTER": KafkaError(31, "CLUSTER_AUTHORIZATION_FAILED"),
        "TRANSACTIONAL_ID": KafkaError(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
    }

    def __init__(self, message: str, *, resource_type: str = "") -> None:
        super().__init__(message)
        self.resource_type = resource_type

    def kafka_error(self) -> KafkaError:
        """Kafka's authorization error for the refused resource type (the class's ``kafka`` when none is
        named). Pure."""
        return self.KAFKA_BY_RESOURCE.get(self.resource_type, self.kafka)


class ThrottledError(TierlogError):
    """Too many failed authentication attempts from one source (429, ``Retry-After``). Retriable after the
    delay the answer names."""

    code = 42901
    kind = "throttled"
    kafka = KafkaError(58, "SASL_AUTHENTICATION_FAILED", exact=False)  # Kafka delays it
    retriable = True


class InternalError(TierlogError):
    """A bug or an unexpected failure inside tierlog.

    Retriable with backoff (docs/native-api.md): the next attempt may well succeed, and a produce retry is
    no less safe than after a lost connection.
    """

    code = 50001
    kind = "internal"
    kafka = UNKNOWN_SERVER_ERROR
    retriable = True


# --- invalid requests --------------------------------------------------------------------------------------


class BadRequestError(InvalidRequestError):
    """The body is not valid JSON or base64, or a parameter or required field is malformed."""

    code = 40001
    kafka = KafkaError(42, "INVALID_REQUEST")


class InvalidConfigError(InvalidRequestError):
    """The v3 admin API refused a topic change: an invalid name, config or partition count, or the topic
    exists. Confluent answers all of these (Kafka's ``TopicExistsException`` included) with 40002."""

    code = 40002
    kafka = KafkaError(40, "INVALID_CONFIG")


class ResourceLimitError(InvalidRequestError):
    """A topic create or partition growth needs more of a broker resource than is free (file descriptors
    under ``RLIMIT_NOFILE``, inodes): refused before anything is written, naming the limit. Kafka has no
    error for it; a create policy's refusal is the nearest."""

    code = 40010
    kafka = KafkaError(44, "POLICY_VIOLATION", exact=False)


class CorruptBatchError(InvalidRequestError):
    """A produced batch failed validation (CRC, framing, magic, control bit); nothing was appended."""

    code = 40003
    kafka = KafkaError(2, "CORRUPT_MESSAGE")


class NotAcceptableError(InvalidRequestError):
    """No representation matches the ``Accept`` header."""

    code = 40601
    kafka = _INVALID_REQUEST_NEAREST  # HTTP content negotiation


class UnsupportedMediaTypeError(InvalidRequestError):
    """The ``Content-Type`` of the body is not one this route accepts."""

    code = 41501
    kafka = _INVALID_REQUEST_NEAREST  # HTTP content negotiation


class RecordTooLargeError(InvalidRequestError):
    """A batch is larger than ``max.message.bytes``, or a request body larger than ``max.request.size``."""

    code = 41301
    kafka = KafkaError(10, "MESSAGE_TOO_LARGE")


class OffsetOutOfRangeError(InvalidRequestError):
    """A fetch asked for an offset outside ``[log_start_offset, log_end_offset]``.

    Carries the valid range so a client can reset its position without another round trip (-1 when unknown).
    """

    code = 41601
    kafka = KafkaError(1, "OFFSET_OUT_OF_RANGE")

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OffsetMovedToTieredStorageError(OffsetOutOfRangeError):
    """Kafka's OFFSET_MOVED_TO_TIERED_STORAGE, answered to a follower's replica fetch only: the offset is
    below the leader's local log start but still in the remote tier. The follower builds its state from the
    remote tier and fetches from ``local_log_start_offset`` (KIP-405). The range fields are the whole log's.
    """

    code = 41602
    kafka = KafkaError(109, "OFFSET_MOVED_TO_TIERED_STORAGE")

    def __init__(
        self, message: str, *, log_start_offset: int, log_end_offset: int, local_log_start_offset: int = -1
    ) -> None:
        super().__init__(message, log_start_offset=log_start_offset, log_end_offset=log_end_offset)
        self.local_log_start_offset = local_log_start_offset


class InvalidValueError(InvalidRequestError):
    """Confluent's "value error": a produced value without the schema it needs, or a stored value that is
    not valid JSON when JSON was asked for."""

    code = 42202
    kafka = KafkaError(87, "INVALID_RECORD", exact=False)


class InvalidConsumerConfigError(InvalidRequestError):
    """A REST consumer instance's config, name, subscription or offsets are invalid.

    On the wire the message starts with Confluent's "Invalid consumer configuration: " (``PREFIX``).
    """

    code = 42204
    kafka = KafkaError(40, "INVALID_CONFIG", exact=False)
    PREFIX = "Invalid consumer configuration: "


class InvalidBodyError(InvalidRequestError):
    """A well-formed JSON body that does not have the documented shape: ``records`` missing or empty, a
    record with a field the API does not define (a misspelled ``valur``), an empty body where one is needed.
    Confluent's REST Proxy and Karapace answer these with the plain code 422; so does tierlog."""

    code = 422
    kafka = _INVALID_REQUEST_NEAREST


class SchemaRegistryRequiredError(InvalidRequestError):
    """Produce with a schema-based embedded format (avro, protobuf, jsonschema) on a broker without a schema
    registry. Confluent's REST Proxy answers this case with the same code and message prefix ("Payload
    error.")."""

    code = 42206
    kafka = _INVALID_REQUEST_NEAREST


class MethodNotAllowedError(InvalidRequestError):
    """The path exists but not with this HTTP method (405)."""

    code = 40501
    kafka = _INVALID_REQUEST_NEAREST  # HTTP only


# --- not found ---------------------------------------------------------------------------------------------


class NoSuchRouteError(NotFoundError):
    """No route has this path (404): a typo in the URL, or an API tierlog does not serve."""

    code = 40400
    kafka = KafkaError(35, "UNSUPPORTED_VERSION", exact=False)  # an API not served


class UnknownTopicError(NotFoundError):
    """The topic does not exist (or was deleted)."""

    code = 40401
    kafka = KafkaError(3, "UNKNOWN_TOPIC_OR_PARTITION")


class UnknownPartitionError(NotFoundError):
    """The partition does not exist."""

    code = 40402
    kafka = KafkaError(3, "UNKNOWN_TOPIC_OR_PARTITION")


class ConsumerInstanceNotFoundError(NotFoundError):
    """No such REST consumer instance (never created, deleted, or expired)."""

    code = 40403
    kafka = KafkaError(25, "UNKNOWN_MEMBER_ID", exact=False)  # an instance is a member


class UnknownMemberError(NotFoundError):
    """The member id is not (or no longer) in its consumer group: it was evicted or never joined. Rejoin
    with an empty member id."""

    code = 40410
    kafka = KafkaError(25, "UNKNOWN_MEMBER_ID")


class UnknownProducerIdError(NotFoundError):
    """Kafka's UNKNOWN_PRODUCER_ID: an epoch bump names a producer id this cluster never issued. The client
    asks for a new id."""

    code = 40404
    kafka = KafkaError(59, "UNKNOWN_PRODUCER_ID")


class UnknownGroupError(NotFoundError):
    """No such consumer group."""

    code = 40411
    kafka = KafkaError(69, "GROUP_ID_NOT_FOUND")


# --- conflicts ---------------------------------------------------------------------------------------------


class ConsumerInstanceExistsError(ConflictError):
    """A REST consumer instance with that name already exists in the group."""

    code = 40902
    kafka = KafkaError(111, "UNRELEASED_INSTANCE_ID", exact=False)  # the name is taken


class IllegalStateError(ConflictError):
    """The call does not fit the consumer's state (subscribe and assign mixed, seek on an unassigned
    partition, a blocking call from a client callback).

    On the wire the message starts with Confluent's "Illegal state: " (``PREFIX``).
    """

    code = 40903
    kafka = _INVALID_REQUEST_NEAREST
    PREFIX = "Illegal state: "


class RebalanceInProgressError(ConflictError):
    """The group is rebalancing: the member must join again to get its new assignment."""

    code = 40910
    kafka = KafkaError(27, "REBALANCE_IN_PROGRESS")
    retriable = True


class IllegalGenerationError(ConflictError):
    """A group request carries a generation that is not the group's current one: the member is fenced."""

    code = 40911
    kafka = KafkaError(22, "ILLEGAL_GENERATION")


class InconsistentGroupProtocolError(ConflictError):
    """The group is used through another protocol: a Kafka-protocol member joining a group that HTTP
    consumers use, or the reverse (a group is used through one protocol at a time)."""

    code = 40914
    kafka = KafkaError(23, "INCONSISTENT_GROUP_PROTOCOL")


class InvalidUpdateVersionError(ConflictError):
    """Kafka's INVALID_UPDATE_VERSION: an ISR change (AlterPartition) was based on a partition epoch that is
    no longer current; the leader re-reads the partition state and decides again."""

    code = 40904
    kafka = KafkaError(95, "INVALID_UPDATE_VERSION")


class IneligibleReplicaError(ConflictError):
    """Kafka's INELIGIBLE_REPLICA (KIP-841): an ISR change would add a replica that is not a live broker or
    not a replica of the partition."""

    code = 40905
    kafka = KafkaError(107, "INELIGIBLE_REPLICA")


class OutOfOrderSequenceError(ConflictError):
    """Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER: an idempotent producer's batch does not carry the next sequence
    number of its producer id and epoch on this partition (a gap, or a new epoch not starting at 0). Nothing
    was appended. The producer bumps its epoch and starts its sequences again (design note 0011)."""

    code = 40906
    kafka = KafkaError(45, "OUT_OF_ORDER_SEQUENCE_NUMBER")


class ProducerFencedError(ConflictError):
    """Kafka's INVALID_PRODUCER_EPOCH: the batch's producer epoch is older than the one this partition has
    seen for its producer id; a newer instance of the producer took over. Nothing was appended; the old
    instance must stop. (A Kafka partition leader answers a produce so; PRODUCER_FENCED, 90, is the
    transaction coordinator's answer, which tierlog has no equivalent of.)"""

    code = 40907
    kafka = KafkaError(47, "INVALID_PRODUCER_EPOCH")


class DuplicateSequenceError(ConflictError):
    """Kafka's DUPLICATE_SEQUENCE_NUMBER: the batch was appended before (its sequence numbers are below the
    last ones this partition stored for the producer id and epoch) but is older than the five batches whose
    offsets the partition remembers. Nothing was appended again; clients treat it as delivered, offsets
    unknown."""

    code = 40908
    kafka = KafkaError(46, "DUPLICATE_SEQUENCE_NUMBER")


# --- unavailable --------------------------------------------------------------------------------------------


class NotLeaderOrFollowerError(UnavailableError):
    """Kafka's NOT_LEADER_OR_FOLLOWER: this broker does not lead the partition. Retriable: the answer names
    the current leader (``leader_id`` -1 and ``leader_url`` empty when the broker does not know one), so a
    client refreshes its metadata or goes straight to the leader."""

    code = 50310
    kafka = KafkaError(6, "NOT_LEADER_OR_FOLLOWER")

    def __init__(
        self, message: str, *, leader_id: int = -1, leader_url: str = "", leader_epoch: int = -1
    ) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_url = leader_url
        self.leader_epoch = leader_epoch


class NotCoordinatorError(NotLeaderOrFollowerError):
    """Kafka's NOT_COORDINATOR: this broker is not the coordinator of the group (the leader of the group's
    ``__consumer_offsets`` partition). Retriable; the answer names the coordinator as ``leader_*``."""

    code = 50312
    kafka = KafkaError(16, "NOT_COORDINATOR")


class LeaderNotAvailableError(UnavailableError):
    """Kafka's LEADER_NOT_AVAILABLE: the partition has no live leader right now (its leader's broker is gone
    and no in-sync replica can take over, or an election is in progress). Retriable."""

    code = 50311
    kafka = KafkaError(5, "LEADER_NOT_AVAILABLE")


class NotEnoughReplicasError(UnavailableError):
    """Kafka's NOT_ENOUGH_REPLICAS: an ``acks=all`` produce was refused before anything was appended, because
    the partition's ISR is smaller than ``min.insync.replicas``. Retriable: the ISR grows back as followers
    catch up."""

    code = 50313
    kafka = KafkaError(19, "NOT_ENOUGH_REPLICAS")


class NotEnoughReplicasAfterAppendError(UnavailableError):
    """Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND: an ``acks=all`` produce was appended on the leader and
    reached every in-sync replica, but the ISR had shrunk below ``min.insync.replicas`` meanwhile. The records
    are stored; a retry stores them again unless the producer is idempotent. Retriable."""

    code = 50314
    kafka = KafkaError(20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND")


class FencedLeaderEpochError(UnavailableError):
    """Kafka's FENCED_LEADER_EPOCH: the request carries a leader epoch older than the partition's current one
    (a follower or a deposed leader acting on stale metadata). Retriable after a metadata refresh."""

    code = 50315
    kafka = KafkaError(74, "FENCED_LEADER_EPOCH")


class UnknownLeaderEpochError(UnavailableError):
    """Kafka's UNKNOWN_LEADER_EPOCH: the request carries a leader epoch newer than the one this broker knows
    (its metadata is behind). Retriable."""

    code = 50316
    kafka = KafkaError(75, "UNKNOWN_LEADER_EPOCH")


class NotControllerError(UnavailableError):
    """Kafka's NOT_CONTROLLER: the request needs the active controller and this broker is not it (any more).
    Retriable: the answer names the controller when it is known (``controller_id``)."""

    code = 50317
    kafka = KafkaError(41, "NOT_CONTROLLER")


class ProduceTimedOutError(UnavailableError):
    """Kafka's REQUEST_TIMED_OUT for ``acks=all``: the batch was appended on the leader but not every in-sync
    replica had it within the request's ``timeout_ms``. It may still become committed; a retry may store it
    twice unless the producer is idempotent. Retriable."""

    code = 50318
    kafka = KafkaError(7, "REQUEST_TIMED_OUT")


class InsufficientStorageError(UnavailableError):
    """The disk is full (ENOSPC) or over its quota (EDQUOT): nothing was written. HTTP 507. Retriable once
    space is freed."""

    code = 50701
    kafka = KafkaError(56, "KAFKA_STORAGE_ERROR")


_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_error(what: str, err: OSError) -> UnavailableError:
    """The public error for a failed local disk operation: :class:`InsufficientStorageError` when the disk
    is full, else :class:`UnavailableError`; the message names the operation, the reason and the errno.
    Raise it ``from err``. Pure."""
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    reason = f"{err.strerror or err} ({name})"
    if err.errno in _DISK_FULL:
        return InsufficientStorageError(f"disk full while {what}: {reason}; free space on the data disk")
    return UnavailableError(f"I/O error while {what}: {reason}")


# --- the registry ------------------------------------------------------------------------------------------

_FAMILIES: dict[int, type[TierlogError]] = {
    401: UnauthorizedError,
    403: AuthorizationError,
    429: ThrottledError,
    404: NotFoundError,
    409: ConflictError,
    503: UnavailableError,
}


def error_from_answer(status: int, payload: bytes) -> TierlogError:
    """The typed error a broker's error answer (HTTP ``status``, JSON body ``payload``) carries.

    The body's ``error_code`` picks the class through :func:`error_for_code` (an unknown code falls back on
    its status family and keeps its number); without a usable code the status itself is the code. An
    out-of-range answer carries the valid range from the body, a not-leader answer the leader it names.
    The client reads every broker answer with it, and a broker reads its peers' answers with it. Pure,
    idempotent and safe to call from any thread.
    """
    body: dict[str, object] = {}
    try:
        decoded = json.loads(payload) if payload else {}
        if isinstance(decoded, dict):
            body = decoded
    except (ValueError, UnicodeDecodeError):
        pass
    code = _int_field(body, "error_code")
    if code < 0:
        code = status
    message = body.get("message")
    if not isinstance(message, str) or not message:
        message = payload[:200].decode("utf-8", "replace") or f"HTTP {status}"
    if code == OffsetMovedToTieredStorageError.code:
        return OffsetMovedToTieredStorageError(
            message,
            log_start_offset=_int_field(body, "log_start_offset"),
            log_end_offset=_int_field(body, "log_end_offset"),
            local_log_start_offset=_int_field(body, "local_log_start_offset"),
        )
    if code == OffsetOutOfRangeError.code or status == 416:
        return OffsetOutOfRangeError(
            message,
            log_start_offset=_int_field(body, "log_start_offset"),
            log_end_offset=_int_field(body, "log_end_offset"),
        )
    kind = _REGISTRY.get(code)
    if kind is not None and issubclass(kind, NotLeaderOrFollowerError):
        url = body.get("leader_url")
        return kind(
            message,
            leader_id=_int_field(body, "leader_id"),
            leader_url=url if isinstance(url, str) else "",
            leader_epoch=_int_field(body, "leader_epoch"),
        )
    return error_for_code(code, message)


def _int_field(body: dict[str, object], name: str) -> int:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def registered_errors() -> dict[int, type[TierlogError]]:
    """A copy of the code-to-class registry (the classes defined so far). Safe to call from any thread."""
    return dict(_REGISTRY)


def error_for_code(code: int, message: str) -> TierlogError:
    """The error a broker meant by ``code``: an instance of the class registered for it.

    An unregistered code falls back on the kind of its HTTP family (the first three digits of a five-digit
    code, or a plain three-digit code itself): 401/403 unauthorized, 404 not found, 409 conflict, 503
    unavailable, any other 4xx invalid request, anything else internal. The instance then keeps the number it
    was given, for diagnostics. An :class:`OffsetOutOfRangeError` built here has an unknown range (-1).
    The wire prefix of the class (``PREFIX``) is taken off the message, so it reads as it was raised.
    Pure and safe to call from any thread.
    """
    kind = _REGISTRY.get(code)
    if kind is not None and kind.PREFIX and message.startswith(kind.PREFIX):
        message = message[len(kind.PREFIX) :]  # the broker added it on the wire (see TierlogError.PREFIX)
    if kind is not None and issubclass(kind, OffsetOutOfRangeError):
        return kind(message, log_start_offset=-1, log_end_offset=-1)
    if kind is not None and issubclass(kind, NotLeaderOrFollowerError):
        return kind(message)
    if kind is not None:
        return kind(message)
    family = http_status(code)
    fallback = _FAMILIES.get(family) or (InvalidRequestError if 400 <= family < 500 else InternalError)
    err = fallback(message)
    err.code = code
    return err
