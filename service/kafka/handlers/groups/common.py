"""What the group handlers share: finding the shard that coordinates a group on this broker (or the
Kafka error saying why not), and timeouts in milliseconds."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from tierlog.service.groups.access import GROUP_ACCESS, GroupAccess
from tierlog.service.groups.classic import GroupError
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.wire.errors import TierlogError, UnavailableError

if TYPE_CHECKING:
    from tierlog.service.groups.shards import CoordinatorShards, Shard
    from tierlog.service.kafka.context import KafkaRequest

__all__ = ["Operation", "Refused", "access_of", "code_of", "coordinating_shard", "millis", "shards_of"]


class Refused(Exception):
    """A group request answered with Kafka error ``code`` (no shard here, or not ready)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def access_of(request: KafkaRequest) -> GroupAccess:
    """The group machinery of this broker. Raises Refused COORDINATOR_NOT_AVAILABLE until groups are
    ready."""
    app = request.listener.app
    access = app.get(GROUP_ACCESS) if app is not None else None
    if access is None or not access.ready.is_set():
        raise Refused(ErrorCode.coordinator_not_available.value)
    return access


def shards_of(request: KafkaRequest) -> CoordinatorShards:
    """This broker's coordinator shards. Raises Refused COORDINATOR_NOT_AVAILABLE until groups are ready."""
    return access_of(request).shards


async def coordinating_shard(request: KafkaRequest, group_id: str, operation: Operation) -> Shard:
    """The shard coordinating ``group_id`` here, once the principal may do ``operation`` on the group
    (Kafka's ACL for the API: Read to join, sync, heartbeat, leave and commit; Describe to fetch offsets
    and describe; Delete to delete groups and offsets).

    Raises:
        Refused: GROUP_AUTHORIZATION_FAILED when the ACLs refuse; INVALID_GROUP_ID for an empty id;
            COORDINATOR_NOT_AVAILABLE while groups are not ready;
            COORDINATOR_LOAD_IN_PROGRESS while this broker loads the group's partition; NOT_COORDINATOR
            when another broker leads it.
    """
    if not group_id:
        raise Refused(ErrorCode.invalid_group_id.value)
    if not request.allowed(operation, ResourceType.GROUP, group_id):
        raise Refused(ErrorCode.group_authorization_failed.value)
    access = access_of(request)
    shards = access.shards
    try:
        return shards.shard(group_id)
    except UnavailableError:
        pass
    broker = request.broker
    parts = broker.cluster_view().partitions.get(OFFSETS_TOPIC, ())
    try:
        index = shards.partition_for(group_id)
    except UnavailableError:  # the offsets topic does not exist yet: FindCoordinator creates it
        raise Refused(ErrorCode.coordinator_not_available.value) from None
    if index >= len(parts) or parts[index].leader != broker.broker_id:
        raise Refused(ErrorCode.not_coordinator.value)
    try:
        await access.loader.ensure_loaded(index)
        return shards.shard(group_id)
    except UnavailableError:
        raise Refused(ErrorCode.coordinator_load_in_progress.value) from None


def code_of(err: Exception) -> int:
    """The Kafka error code of a refusal, a group protocol error or a tierlog error."""
    if isinstance(err, Refused | GroupError):
        return err.code
    if isinstance(err, TierlogError):
        return err.kafka_error().code
    raise err


def millis(value: Any, default: int = -1) -> int:
    """A kio timedelta (or int) field in milliseconds; ``default`` when absent."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
