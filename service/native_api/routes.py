"""The native binary path: raw v2 record batches in and out, no JSON or base64 per record.

Routes (the wire contract is ``docs/native-api.md``)::

    POST /native/v1/topics/{topic}/partitions/{partition}/batches?acks=1    produce raw batches
    GET  /native/v1/topics/{topic}/partitions/{partition}/batches           fetch raw batches (sendfile)
         ?offset=&max_bytes=&max_wait_ms=&min_bytes=
    GET  /native/v1/topics/{topic}/partitions/{partition}/offsets?timestamp=
    GET  /native/v1/topics/{topic}                                           partition count and watermarks
    GET  /native/v1/metadata?topic=&topic=                                   the cluster: brokers, leaders
    POST /native/v1/producers                                                a producer id, or a new epoch

The OpenAPI description of these routes is :mod:`tierlog.service.native_api.openapi`.

Produce bodies and fetch answers are ``application/vnd.tierlog.batches``: whole Kafka v2 record
batches, concatenated. The broker validates each produced batch and every record in it (CRC, codec,
attributes, lengths, offset deltas, timestamps, ``max.message.bytes`` before and after decompression)
and only rewrites base offsets; a fetch sends bytes straight from the segment file with
``loop.sendfile`` (``pread`` + write when the transport cannot), never decoding them.

In a cluster, a produce, fetch or offsets request for a partition this broker does not lead is refused
before anything is read from or appended to a log: 503 with error_code 50310 and the leader
(``leader_id``, ``leader_url``, ``leader_epoch``), or 50311 when it has no live leader. Any broker answers
``/native/v1/metadata`` for the whole cluster, which is how a client finds each partition's leader, and
``/native/v1/producers`` (:mod:`tierlog.service.native_api.producers`).

A batch whose header carries a producer id (``producer_id >= 0``) is deduplicated by the leader (design
note 0011): a retry of one of the producer's last five batches appends nothing and answers the offsets it
got the first time, with ``"duplicate": true``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tierlog.service.native_api.producers import setup_routes as setup_producer_routes
from tierlog.service.security import authz
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.topics.data_dir import topic_name_problem
from tierlog.service.topics.send_region import sendfile_region
from tierlog.service.web.body_buffers import BODY_BUFFERS, BodyBuffers
from tierlog.service.web.budget import ACKS0_BUDGET, ByteBudget
from tierlog.service.web.errors import json_error
from tierlog.service.web.json_stream import dump_json
from tierlog.service.web.keys import BROKER, SETTINGS
from tierlog.service.web.media import Offer, negotiate
from tierlog.service.web.requests import (
    check_body_size,
    count,
    describe_metrics,
    int_param,
    offload,
    partition_index,
    producible_topic_name,
    read_body,
    topic_name,
)
from tierlog.tiering.codec.validate import validate_batch
from tierlog.wire.errors import (
    AuthorizationError,
    BadRequestError,
    CorruptBatchError,
    CorruptRecordError,
    NotAcceptableError,
    OffsetOutOfRangeError,
    UnknownTopicError,
    UnsupportedMediaTypeError,
)
from tierlog.wire.native import (
    BATCHES_TYPE,
    EARLIEST,
    HIGH_WATERMARK,
    LATEST,
    LEADER_EPOCH,
    LOCAL_LOG_START_OFFSET,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    METADATA_PATH,
    PARTITION_ROUTE,
    TOPIC_ROUTE,
)

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker, Partition
    from tierlog.tiering.log.types import FileSlice

__all__ = [
    "BATCHES_TYPE",
    "HIGH_WATERMARK",
    "LEADER_EPOCH",
    "LOCAL_LOG_START_OFFSET",
    "LOG_END_OFFSET",
    "LOG_START_OFFSET",
    "range_headers",
    "send_slice",
    "setup_routes",
]

log = logging.getLogger("tierlog.native")

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 256 * 1024 * 1024
MAX_WAIT_MS = 300_000
DEFAULT_PRODUCE_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms
MAX_PRODUCE_TIMEOUT_MS = 2**31 - 1
# Bytes read per worker call when sendfile cannot serve a fetch (TLS): one read and one write per fetch of
# up to 4 MiB (fewer thread hand-overs and drains; the TLS record layer splits it anyway).
CHUNK = 4 * 1024 * 1024
# Produce bodies from this size on are read into a reused buffer (service/web/body_buffers.py); smaller ones
# cost little to read either way.
POOLED_BODY_BYTES = 64 * 1024
_ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
_BATCH_OFFERS = (Offer(BATCHES_TYPE, 1.0),)
_JSON_OFFERS = (Offer("application/json", 1.0),)


def setup_routes(app: web.Application) -> None:
    """Register the native routes on ``app`` (before it starts). Not idempotent: call once per app."""
    describe_metrics(app)
    app[ACKS0_BUDGET] = ByteBudget("queued.max.request.bytes", app[SETTINGS].queued_max_request_bytes)
    app[BODY_BUFFERS] = BodyBuffers()
    app.router.add_post(PARTITION_ROUTE + "/batches", produce_batches)
    app.router.add_get(PARTITION_ROUTE + "/batches", fetch_batches, allow_head=False)
    app.router.add_get(PARTITION_ROUTE + "/offsets", list_offset)
    app.router.add_get(TOPIC_ROUTE, topic_metadata)
    app.router.add_get(METADATA_PATH, cluster_metadata)
    setup_producer_routes(app)


def _broker(request: web.Request) -> Broker:
    return request.app[BROKER]


def _json(value: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=dump_json(value), status=status, content_type="application/json")


def _accept_json(request: web.Request) -> None:
    if negotiate(request.headers.get("Accept"), _JSON_OFFERS) is None:
        raise NotAcceptableError("this route answers application/json only")


def _acks(request: web.Request) -> int:
    raw = request.query.get("acks", "1").strip().lower()
    if raw not in _ACKS:
        raise BadRequestError(f"acks must be 0, 1, -1 or all, got {raw!r}")
    return _ACKS[raw]


def _scan(body: bytes | memoryview, *, max_size: int) -> tuple[int, int]:
    """Validate every batch of ``body`` and every record in it; return ``(batch_count, record_count)``.

    Each batch must pass :func:`~tierlog.tiering.codec.validate.validate_batch` (CRC, codec, producer
    attributes, record count, every record's lengths, offset deltas and timestamps, decompressed size
    within ``max_size``); the first failure rejects the whole body. Pure; safe to call concurrently.

    Raises:
        CorruptBatchError: (40003) no batch, or a batch failed; the message names the batch by its index
            in the body and its base offset, and gives the reason.
        RecordTooLargeError: (41301) a batch over ``max_size``.
    """
    if not body:
        raise CorruptBatchError("the body holds no record batch")
    batches = records = pos = 0
    while pos < len(body):
        try:
            header = validate_batch(body, pos, max_size=max_size)
        except CorruptRecordError as err:
            raise CorruptBatchError(
                f"batch {batches} (base offset {_base_offset(body, pos)}, byte {pos}) rejected, "
                f"nothing appended: {err.message}"
            ) from None
        batches += 1
        records += header.records_count
        pos += header.size
    return batches, records


def _base_offset(body: bytes | memoryview, pos: int) -> int | str:
    if len(body) - pos < 8:
        return "unknown"
    return int.from_bytes(body[pos : pos + 8], "big", signed=True)


async def produce_batches(request: web.Request) -> web.Response:
    """Validate and append raw batches; answer the assigned offsets (acks 1/all) or 202 at once (acks 0).

    Every batch and record is validated here, off the event loop for bodies over 64 KiB, before anything
    is appended (the log's append checks CRCs again). Batches with a producer id are idempotent (design
    0011): when every batch of the body is one of its producer's last five, nothing is appended and the
    answer carries the offsets stored the first time with ``"duplicate": true`` (``acks=all`` still waits
    for them to be committed). Batches without a producer id are not: a retried request appends again.
    Raises UnsupportedMediaTypeError (415), NotAcceptableError (406), BadRequestError (400),
    CorruptBatchError (400, 40003), UnknownTopicError / UnknownPartitionError (40401/40402),
    RecordTooLargeError (413), NotLeaderOrFollowerError / LeaderNotAvailableError (50310/50311),
    InvalidRequestError (42201: a transactional batch, a bad producer identity, duplicates mixed with new
    batches), OutOfOrderSequenceError (409, 40906), ProducerFencedError (409, 40907),
    DuplicateSequenceError (409, 40908: stored already, offsets unknown); nothing is appended then.
    ``acks=all`` waits up to ``timeout_ms`` for every in-sync replica and raises NotEnoughReplicasError
    (50313, nothing appended), NotEnoughReplicasAfterAppendError (50314) or ProduceTimedOutError (50318,
    appended, maybe not committed). The answer names the ``leader_epoch`` the batches were stamped with and
    the ``broker_id`` that led.
    """
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type != BATCHES_TYPE:
        raise UnsupportedMediaTypeError(
            f"Content-Type must be {BATCHES_TYPE}, got {content_type or 'none'!r}"
        )
    _accept_json(request)
    acks = _acks(request)
    timeout_ms = int_param(
        request, "timeout_ms", DEFAULT_PRODUCE_TIMEOUT_MS, low=0, high=MAX_PRODUCE_TIMEOUT_MS
    )
    name = producible_topic_name(request)
    index = partition_index(request)
    declared = request.content_length
    encoded = request.headers.get("Content-Encoding", "identity").strip().lower() != "identity"
    lease = None
    if acks != 0 and declared is not None and declared >= POOLED_BODY_BYTES and not encoded:
        check_body_size(request, declared)
        lease = await request.app[BODY_BUFFERS].read(request, declared)
    if lease is None:
        return await _produce(request, await read_body(request), name, index, acks, timeout_ms)
    try:
        return await _produce(request, lease.view, name, index, acks, timeout_ms, lease.close)
    except BaseException as err:
        if not isinstance(err, Exception):  # cancelled: the append's worker may still read the buffer
            lease.abandon()
        raise
    finally:
        lease.close()  # the append's worker call has ended (or never started)


async def _produce(
    request: web.Request,
    body: bytes | memoryview,
    name: str,
    index: int,
    acks: int,
    timeout_ms: int,
    written: Callable[[], None] | None = None,
) -> web.Response:
    topic = await authz.ensure_topic(request, name)
    partition = topic.partition(index)
    max_size = partition.config.max_message_bytes
    count(request, "tierlog_http_body_bytes_total", len(body), api="native", direction="in", topic=name)
    if acks == 0:
        assert isinstance(body, bytes)  # acks=0 bodies outlive the request: never a pooled buffer
        batches, records = await offload(len(body), lambda: _scan(body, max_size=max_size))
        _append_in_background(request.app[ACKS0_BUDGET], partition, body)
        return _json(_produced(name, index, batches, records, acks=0), status=202)
    scanned: list[tuple[int, int]] = []
    try:
        # validated in the append's own worker thread: one hand-over per request, not two
        info = await partition.append(
            body,
            acks=acks,
            timeout_ms=timeout_ms,
            check=lambda: scanned.append(_scan(body, max_size=max_size)),
            written=written,
        )
    except CorruptRecordError as err:
        raise CorruptBatchError(f"rejected, nothing appended: {err.message}") from None
    answer = _produced(name, index, *scanned[0])
    answer.update(
        base_offset=info.base_offset,
        last_offset=info.last_offset,
        record_count=info.record_count,
        batch_base_offsets=list(info.batch_base_offsets),
        log_append_time=info.log_append_time,
        duplicate=info.duplicate,
        acks=acks,
        # the epoch stamped into the batches (a duplicate appends nothing: the partition's epoch)
        leader_epoch=info.leader_epoch if info.leader_epoch >= 0 else partition.leader_epoch,
        broker_id=_broker(request).broker_id,
    )
    return _json(answer)


def _produced(topic: str, partition: int, batches: int, records: int, **extra: Any) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "batch_count": batches, "record_count": records, **extra}


def _append_in_background(budget: ByteBudget, partition: Partition, body: bytes) -> None:
    """Queue an acks=0 append holding ``len(body)`` bytes of ``queued.max.request.bytes`` until it ends.

    Raises:
        UnavailableError: (503, 50301, retriable) the budget is full; nothing is queued.
        UnknownTopicError: the topic is gone.
    """
    size = len(body)
    budget.acquire(size)
    try:
        partition.append_in_background(body, lambda: budget.release(size))
    except BaseException:
        budget.release(size)
        raise


def range_headers(high_watermark: int, log_start: int, log_end: int) -> dict[str, str]:
    return {
        HIGH_WATERMARK: str(high_watermark),
        LOG_START_OFFSET: str(log_start),
        LOG_END_OFFSET: str(log_end),
    }


def _out_of_range(err: OffsetOutOfRangeError) -> web.Response:
    response = json_error(err)
    response.headers[LOG_START_OFFSET] = str(err.log_start_offset)
    response.headers[LOG_END_OFFSET] = str(err.log_end_offset)
    return response


async def fetch_batches(request: web.Request) -> web.StreamResponse:
    """Raw batches from the one holding ``offset``, long-polling up to ``max_wait_ms`` for ``min_bytes``.

    The body may begin with a batch whose base offset is below ``offset`` (skip those records) and may be
    empty when the wait expires. Idempotent. Raises NotAcceptableError (406), BadRequestError (400),
    UnknownTopicError / UnknownPartitionError (40401/40402); answers 416 (41601) with the valid range for
    an out-of-range offset.
    """
    if negotiate(request.headers.get("Accept"), _BATCH_OFFERS) is None:
        raise NotAcceptableError(f"this route answers {BATCHES_TYPE} only")
    name = topic_name(request)
    partition = _broker(request).topic(name).partition(partition_index(request))
    offset = int_param(request, "offset", None, low=0)
    max_bytes = int_param(request, "max_bytes", DEFAULT_MAX_BYTES, low=1, high=MAX_MAX_BYTES)
    max_wait_ms = int_param(request, "max_wait_ms", 0, low=0, high=MAX_WAIT_MS)
    min_bytes = int_param(request, "min_bytes", 1, low=0, high=MAX_MAX_BYTES)
    try:
        region = await partition.read_slice(offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes)
    except OffsetOutOfRangeError as err:
        return _out_of_range(err)
    headers = range_headers(region.high_watermark, region.log_start_offset, region.log_end_offset)
    return await send_slice(request, region, headers, topic=name, what=f"{partition.label} from {offset}")


async def send_slice(
    request: web.Request, region: FileSlice, headers: dict[str, str], *, topic: str, what: str
) -> web.StreamResponse:
    """Answer ``request`` with ``region``'s bytes as ``application/vnd.tierlog.batches`` (``sendfile`` when
    the transport allows it, else ``pread`` in a worker thread), with ``headers``; close the slice.

    Counts the bytes sent in ``tierlog_http_body_bytes_total`` for ``topic``. A client that leaves midway
    is logged at debug level (``what`` names the read) and answered no further. Raises CorruptRecordError
    if the segment file is shorter than the slice.
    """
    with region:
        response = web.StreamResponse(headers=headers)
        response.content_type = BATCHES_TYPE
        response.content_length = region.size
        await response.prepare(request)
        try:
            if region.size:
                await _send_region(request, response, region)
            await response.write_eof()
        except ConnectionError:
            log.debug("client left during a fetch of %s", what)
            return response
    count(request, "tierlog_http_body_bytes_total", region.size, api="native", direction="out", topic=topic)
    return response


async def _send_region(request: web.Request, response: web.StreamResponse, region: FileSlice) -> None:
    if not await sendfile_region(request.transport, region):
        await _send_with_pread(response, region)


async def _send_with_pread(response: web.StreamResponse, region: FileSlice) -> None:
    position, remaining = region.position, region.size
    while remaining > 0:
        chunk = await asyncio.to_thread(os.pread, region.fd, min(CHUNK, remaining), position)
        if not chunk:
            raise CorruptRecordError(f"segment file ended {remaining} bytes before the slice did")
        await response.write(chunk)
        position += len(chunk)
        remaining -= len(chunk)


async def list_offset(request: web.Request) -> web.Response:
    """``{"offset", "timestamp"}`` for ``timestamp`` -2 (earliest), -1 (latest: the high watermark) or a
    time in ms.

    For a time past every committed batch (at or past the high watermark), offset and timestamp are -1.
    Idempotent. Raises NotAcceptableError (406), BadRequestError (400), UnknownTopicError /
    UnknownPartitionError (40401/40402).
    """
    _accept_json(request)
    name = topic_name(request)
    partition = _broker(request).topic(name).partition(partition_index(request))
    timestamp = int_param(request, "timestamp", LATEST, low=EARLIEST)
    if timestamp == EARLIEST:
        found: tuple[int, int] | None = (partition.log_start_offset, -1)
    elif timestamp == LATEST:
        found = (partition.high_watermark, -1)
    else:
        found = await partition.offset_for_timestamp(timestamp)
        if found is not None and found[0] >= partition.high_watermark:
            found = None  # not committed yet: consumers cannot read it (Kafka's read_uncommitted)
    offset, at = found if found is not None else (-1, -1)
    return _json({"topic": name, "partition": partition.index, "offset": offset, "timestamp": at})


async def topic_metadata(request: web.Request) -> web.Response:
    """Partition count and the offsets of every partition of one topic this broker leads (every partition
    on a single broker; ask each leader in a larger cluster: a follower's copy is not listed). The high
    watermark is the offset consumers read up to. Idempotent.

    Raises NotAcceptableError (406), BadRequestError (400), UnknownTopicError (40401).
    """
    _accept_json(request)
    name = topic_name(request)
    topic = _broker(request).topic(name)
    partitions = [
        {
            "partition": p.index,
            "log_start_offset": p.log_start_offset,
            "high_watermark": p.high_watermark,
            "log_end_offset": p.log_end_offset,
        }
        for p in topic.partitions
        if p.role == "leader"
    ]
    return _json({"topic": name, "partition_count": topic.partition_count, "partitions": partitions})


async def cluster_metadata(request: web.Request) -> web.Response:
    """The cluster as this broker sees it: id, controller, live brokers, and every partition's leader,
    leader epoch, replicas and ISR, for the ``topic`` parameters (repeatable) or every topic.

    A requested topic that does not exist is listed as ``{"topic": t, "error_code": 40401}`` without
    partitions, as Kafka's metadata answer does. With authentication on, only topics the principal may
    Describe are listed; a requested one it may not is ``{"topic": t, "error_code": 40301}`` whether it exists
    or not (Kafka's TOPIC_AUTHORIZATION_FAILED). Idempotent; never creates a topic. Raises
    NotAcceptableError (406), BadRequestError (40001: an illegal topic name), UnavailableError (50301)
    while the broker is opening.
    """
    _accept_json(request)
    wanted = list(dict.fromkeys(request.query.getall("topic", [])))
    for name in wanted:
        problem = topic_name_problem(name)
        if problem is not None:
            raise BadRequestError(problem)
    broker = _broker(request)
    broker.check_ready()
    view = broker.cluster_view()
    topics: list[dict[str, Any]] = []
    secured = authz.is_enabled(request)
    for name in wanted or sorted(view.partitions):
        if secured and not authz.allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, name):
            if wanted:
                topics.append({"topic": name, "error_code": AuthorizationError.code})
            continue
        partitions = view.partitions.get(name)
        if partitions is None:
            topics.append({"topic": name, "error_code": UnknownTopicError.code})
            continue
        described = [
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
            }
            for p in partitions
        ]
        topics.append({"topic": name, "partitions": described})
    brokers = [{"broker_id": b.broker_id, "url": b.url, "rack": b.rack} for b in view.brokers]
    return _json(
        {
            "cluster_id": view.cluster_id,
            "controller_id": view.controller_id,
            "controller_epoch": view.controller_epoch,
            "brokers": brokers,
            "topics": topics,
        }
    )
