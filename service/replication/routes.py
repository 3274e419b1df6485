"""The replication routes a broker serves to its peers (native path, JSON errors as everywhere).

Routes (the wire contract is ``docs/native-api.md``, "Replication")::

    GET  /native/v1/replication/topics/{topic}/partitions/{partition}/batches
         ?replica_id=&offset=&leader_epoch=&max_bytes=&max_wait_ms=          a follower's replica fetch
    GET  /native/v1/replication/topics/{topic}/partitions/{partition}/epochs/{epoch}
         ?replica_id=&leader_epoch=                                           where an epoch ends
    POST /native/v1/replication/alter-partition                               an ISR change, to the controller

The first two are served by the partition's leader, whatever the cluster cache says: the partition open here
must have the role ``leader``, and the request's ``leader_epoch`` must be the one it leads in (older: 50315,
newer: 50316), so a follower acting on stale metadata is fenced (KIP-101). A replica fetch reads up to the
log end offset, not the high watermark, and reports the follower's fetch offset to the leader's ISR
bookkeeping. Its answer carries the leader's offsets in headers: ``Tierlog-High-Watermark``,
``Tierlog-Log-Start-Offset`` (the whole log, remote tier included), ``Tierlog-Local-Log-Start-Offset``,
``Tierlog-Log-End-Offset`` and ``Tierlog-Leader-Epoch``.

The third is served by the active controller (50317 elsewhere). On a broker running alone every route
answers 404 (40400): replication needs a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from tierlog.service.cluster.model import AlterPartitionRequest
from tierlog.service.native_api.routes import MAX_MAX_BYTES, MAX_WAIT_MS, send_slice
from tierlog.service.web.json_stream import dump_json
from tierlog.service.web.keys import BROKER
from tierlog.service.web.media import Offer, negotiate
from tierlog.service.web.requests import int_param, partition_index, read_body, topic_name
from tierlog.wire.errors import (
    BadRequestError,
    CorruptRecordError,
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotAcceptableError,
    NotControllerError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownPartitionError,
    UnsupportedMediaTypeError,
)
from tierlog.wire.native import (
    ALTER_PARTITION_PATH,
    BATCHES_TYPE,
    HIGH_WATERMARK,
    LEADER_EPOCH,
    LOCAL_LOG_START_OFFSET,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    REPLICA_PARTITION_ROUTE,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.node import ClusterNode
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.partition import Partition

__all__ = ["setup_routes"]

_BATCH_OFFERS = (Offer(BATCHES_TYPE, 1.0),)
_JSON_OFFERS = (Offer("application/json", 1.0),)
_MAX_EPOCH = 2**31 - 1


def setup_routes(app: web.Application) -> None:
    """Register the replication routes on ``app`` (before it starts). Not idempotent: call once per app."""
    app.router.add_get(REPLICA_PARTITION_ROUTE + "/batches", replica_fetch, allow_head=False)
    app.router.add_get(REPLICA_PARTITION_ROUTE + "/epochs/{epoch}", epoch_end_offset)
    app.router.add_post(ALTER_PARTITION_PATH, alter_partition)


async def replica_fetch(request: web.Request) -> web.StreamResponse:
    """Raw batches from ``offset`` up to the leader's log end offset, for follower ``replica_id``.

    Long-polls up to ``max_wait_ms`` for data (woken by appends); the body may be empty. Reports the fetch
    offset to the leader's ISR bookkeeping (so the high watermark may move). Idempotent but for that report.
    Raises: NoSuchRouteError (404, 40400) on a broker running alone; NotAcceptableError (406);
    BadRequestError (400); UnknownTopicError (40401); UnknownPartitionError (40402: no such partition, or
    ``replica_id`` is not one of its replicas); NotLeaderOrFollowerError / LeaderNotAvailableError
    (50310/50311); FencedLeaderEpochError (50315) / UnknownLeaderEpochError (50316); 416
    OffsetMovedToTieredStorageError (41602, the body carries ``local_log_start_offset``) when ``offset`` is
    below the local log start of a tiered partition but in its remote tier, else OffsetOutOfRangeError
    (41601) with the valid range.
    """
    if negotiate(request.headers.get("Accept"), _BATCH_OFFERS) is None:
        raise NotAcceptableError(f"this route answers {BATCHES_TYPE} only")
    broker, node = _cluster(request)
    name, index = topic_name(request), partition_index(request)
    replica_id = int_param(request, "replica_id", None, low=0)
    offset = int_param(request, "offset", None, low=0)
    leader_epoch = int_param(request, "leader_epoch", None, low=0, high=_MAX_EPOCH)
    max_bytes = int_param(
        request, "max_bytes", broker.settings.replica_fetch_max_bytes, low=1, high=MAX_MAX_BYTES
    )
    max_wait_ms = int_param(request, "max_wait_ms", 0, low=0, high=MAX_WAIT_MS)
    partition = _leading(broker, node, name, index, leader_epoch)
    _check_replica(node, name, index, replica_id)
    _check_local_range(partition, offset)
    region = await partition.read_slice(offset, max_bytes, max_wait_ms=max_wait_ms, replica_id=replica_id)
    try:
        # leadership may have moved during the long poll: answer with what the partition is now
        _check_epoch(partition, leader_epoch, node)
    except BaseException:
        region.close()
        raise
    headers = {
        HIGH_WATERMARK: str(max(region.high_watermark, partition.high_watermark)),
        LOG_START_OFFSET: str(partition.log_start_offset),
        LOCAL_LOG_START_OFFSET: str(partition.local_log_start_offset),
        LOG_END_OFFSET: str(region.log_end_offset),
        LEADER_EPOCH: str(partition.leader_epoch),
    }
    what = f"{partition.label} from {offset} by replica {replica_id}"
    return await send_slice(request, region, headers, topic=name, what=what)


async def epoch_end_offset(request: web.Request) -> web.Response:
    """``{"leader_epoch": E, "end_offset": O}``: the largest epoch the leader knows at or below ``{epoch}``
    and where it ends (the log end offset for the current epoch; ``-1, -1`` when ``{epoch}`` is older than
    every epoch the leader knows). Kafka's OffsetsForLeaderEpoch for a follower.

    Idempotent. Raises: the errors of :func:`replica_fetch` but the offset ones.
    """
    if negotiate(request.headers.get("Accept"), _JSON_OFFERS) is None:
        raise NotAcceptableError("this route answers application/json only")
    broker, node = _cluster(request)
    name, index = topic_name(request), partition_index(request)
    epoch = _epoch(request)
    replica_id = int_param(request, "replica_id", None, low=0)
    leader_epoch = int_param(request, "leader_epoch", None, low=0, high=_MAX_EPOCH)
    partition = _leading(broker, node, name, index, leader_epoch)
    _check_replica(node, name, index, replica_id)
    found_epoch, end_offset = await partition.epoch_end_offset(epoch)
    return _json({"leader_epoch": found_epoch, "end_offset": end_offset})


async def alter_partition(request: web.Request) -> web.Response:
    """Commit a leader's ISR change (an ``AlterPartitionRequest`` JSON body); answer the new
    ``PartitionState`` (``leader``, ``leader_epoch``, ``isr``, ``partition_epoch``, ``controller_epoch``).

    Not idempotent: a replay carries a stale partition epoch and fails with 40904. Raises: NoSuchRouteError
    (404, 40400) on a broker running alone; UnsupportedMediaTypeError (415); NotAcceptableError (406);
    BadRequestError (400: not an alter-partition request); NotControllerError (50317: this broker is not the
    active controller); UnknownTopicError / UnknownPartitionError; FencedLeaderEpochError (50315);
    InvalidUpdateVersionError (40904); IneligibleReplicaError (40905); MetadataStoreError / UnavailableError
    when the store cannot be reached.
    """
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaTypeError(
            f"Content-Type must be application/json, got {content_type or 'none'!r}"
        )
    if negotiate(request.headers.get("Accept"), _JSON_OFFERS) is None:
        raise NotAcceptableError("this route answers application/json only")
    _, node = _cluster(request)
    try:
        change = AlterPartitionRequest.decode(await read_body(request))
    except CorruptRecordError as err:
        raise BadRequestError(err.message) from None
    controller = node.controller
    if not controller.active:
        raise NotControllerError(
            f"broker {node.broker_id} is not the active controller (the controller is broker "
            f"{controller.controller_id})"
        )
    state = await controller.alter_partition(change)
    return web.Response(body=state.encode(), content_type="application/json")


def _json(value: object) -> web.Response:
    return web.Response(body=dump_json(value), content_type="application/json")


def _cluster(request: web.Request) -> tuple[Broker, ClusterNode]:
    """The broker and its cluster membership."""
    broker = request.app[BROKER]
    return broker, broker.cluster


def _epoch(request: web.Request) -> int:
    raw = request.match_info["epoch"]
    if not raw.isascii() or not raw.isdigit() or int(raw) > _MAX_EPOCH:
        raise BadRequestError(f"the epoch must be an integer between 0 and {_MAX_EPOCH}, got {raw!r}")
    return int(raw)


def _leading(broker: Broker, node: ClusterNode, name: str, index: int, leader_epoch: int) -> Partition:
    """The partition open here as leader in ``leader_epoch``. Pure lookup.

    Raises UnknownTopicError / UnknownPartitionError; NotLeaderOrFollowerError naming the leader the cache
    knows (or LeaderNotAvailableError) when this broker does not lead it now; FencedLeaderEpochError /
    UnknownLeaderEpochError when ``leader_epoch`` is older / newer than the partition's.
    """
    topic = broker.topic(name)
    if not 0 <= index < topic.partition_count:
        raise UnknownPartitionError(f"Partition not found. (partition {index} of topic {name})")
    local = topic.local(index)
    if local is None or local.closed or local.role != "leader":
        node.leadership(name, index, None)  # raises the error naming the leader, as for clients
        raise LeaderNotAvailableError(f"partition {name}-{index} is not led here yet")
    _check_epoch(local, leader_epoch, node)
    return local


def _check_epoch(partition: Partition, leader_epoch: int, node: ClusterNode) -> None:
    if partition.closed or partition.role != "leader":
        raise NotLeaderOrFollowerError(
            f"broker {node.broker_id} stopped leading {partition.label}", leader_epoch=partition.leader_epoch
        )
    current = partition.leader_epoch
    if leader_epoch < current:
        raise FencedLeaderEpochError(
            f"leader epoch {leader_epoch} of the request is older than {current}, the epoch broker "
            f"{node.broker_id} leads {partition.label} in"
        )
    if leader_epoch > current:
        raise UnknownLeaderEpochError(
            f"leader epoch {leader_epoch} of the request is newer than {current}, the epoch broker "
            f"{node.broker_id} leads {partition.label} in (its metadata is behind)"
        )


def _check_replica(node: ClusterNode, name: str, index: int, replica_id: int) -> None:
    """Raises UnknownPartitionError (40402) unless ``replica_id`` is an assigned replica other than this
    broker (by the metadata cache)."""
    assignment = node.cache.topic(name)
    replicas = assignment.replicas[index] if assignment is not None and index < assignment.partitions else ()
    if replica_id == node.broker_id or replica_id not in replicas:
        raise UnknownPartitionError(
            f"Partition not found. (broker {replica_id} is not a follower of {name}-{index}; replicas: "
            f"{list(replicas)})"
        )


def _check_local_range(partition: Partition, offset: int) -> None:
    """Refuse an offset below the local log: 41602 when the remote tier holds it (the follower builds
    from there), else 41601."""
    local_start = partition.local_log_start_offset
    if offset >= local_start:
        return
    start, end = partition.log_start_offset, partition.log_end_offset
    if partition.remote is not None and start <= offset:
        raise OffsetMovedToTieredStorageError(
            f"offset {offset} of {partition.label} is in the remote tier, below the leader's local log start "
            f"{local_start}",
            log_start_offset=start,
            log_end_offset=end,
            local_log_start_offset=local_start,
        )
    raise OffsetOutOfRangeError(
        f"offset {offset} is outside [{start}, {end}] of {partition.label}",
        log_start_offset=start,
        log_end_offset=end,
    )
