"""FindCoordinator (key 10): the broker coordinating a group is the leader of the group's
``__consumer_offsets`` partition (Kafka's rule, :mod:`tierlog.service.groups.hashing`). v4+ batch keys.
Transaction coordinators (key type 1) are not served yet: they answer UNSUPPORTED_VERSION."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.groups.hashing import coordinator_partition
from tierlog.service.groups.offsets import OFFSETS_TOPIC
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.groups.common import Refused, access_of
from tierlog.service.kafka.handlers.metadata import split_endpoint
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.wire.errors import TierlogError

__all__: list[str] = []

FIND_COORDINATOR_KEY = 10
GROUP_KEY_TYPE = 0


async def find(request: KafkaRequest, key: str, key_type: int) -> dict[str, Any]:
    """One coordinator entry: ``key``, ``node_id``, ``host``, ``port``, ``error_code``, ``error_message``."""
    if key_type != GROUP_KEY_TYPE:
        return _error(key, ErrorCode.unsupported_version, "only group coordinators are served")
    if not key:
        return _error(key, ErrorCode.invalid_group_id, "an empty group id")
    if not request.allowed(Operation.DESCRIBE, ResourceType.GROUP, key):
        return _error(key, ErrorCode.group_authorization_failed, f"Not authorized to Describe Group '{key}'")
    try:
        leader = await coordinator_of(request, key)
    except Refused as err:
        return _error(key, ErrorCode(err.code), "consumer groups are not ready")
    except TierlogError as err:
        return _error(key, ErrorCode.coordinator_not_available, str(err))
    broker = request.broker
    if leader == broker.broker_id:
        host, port = request.listener.advertised
    else:
        registration = broker.cluster_view().broker(leader) if leader >= 0 else None
        found = split_endpoint(registration.kafka or "") if registration is not None else None
        if found is None:
            return _error(key, ErrorCode.coordinator_not_available, "the coordinator is not available now")
        host, port = found
    return {"key": key, "node_id": leader, "host": host, "port": port, "error_code": ErrorCode.none}


async def coordinator_of(request: KafkaRequest, group_id: str) -> int:
    """The id of the broker coordinating ``group_id`` (-1: none live now). Creates ``__consumer_offsets``
    on a cluster's first lookup, as Kafka does.

    Raises:
        Refused: groups are not ready here.
        TierlogError: the offsets topic cannot be created now.
    """
    access = access_of(request)
    broker = request.broker
    parts = broker.cluster_view().partitions.get(OFFSETS_TOPIC)
    if not parts:
        await access.loader.ensure_topic()
        parts = broker.cluster_view().partitions.get(OFFSETS_TOPIC)
        if not parts:
            return -1
    return parts[coordinator_partition(group_id, len(parts))].leader


def _error(key: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


@api(FIND_COORDINATOR_KEY, "FindCoordinator", 0, 6)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
    keys = getattr(body, "coordinator_keys", None)
    if keys is not None and request.version >= 4:
        return {"throttle_time": 0, "coordinators": [await find(request, k, key_type) for k in keys]}
    found = await find(request, body.key, key_type)
    return {"throttle_time": 0, **found}
