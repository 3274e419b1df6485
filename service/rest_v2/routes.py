"""Confluent REST Proxy v2 compatible routes: topic metadata, produce, and Pandaproxy's records fetch.

Routes (see ``docs/rest-v2.md`` for bodies and error codes)::

    GET  /brokers
    GET  /topics
    GET  /topics/{topic}
    POST /topics/{topic}                                   produce, partition chosen per record
    GET  /topics/{topic}/partitions
    GET  /topics/{topic}/partitions/{partition}
    POST /topics/{topic}/partitions/{partition}            produce to one partition
    GET  /topics/{topic}/partitions/{partition}/offsets
    GET  /topics/{topic}/partitions/{partition}/records    ?offset=&timeout=&max_bytes=  (long poll)
    GET  /topics/{topic}/partitions/{partition}/messages   ?offset=&count=   (the v1 API's partition read)

A produce request is converted and validated whole (JSON, base64, partitions, batch sizes) before
anything is appended; then one v2 batch per partition is appended, all partitions concurrently.

Any broker of a cluster answers every route, as a REST proxy in front of a cluster does: metadata comes
from the broker's cluster view, and each partition's reads and appends go to its leader
(:func:`tierlog.service.cluster.proxy.routed_partition`: the local partition, or the same operation on the
leader's native API).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tierlog.service.cluster.proxy import RoutedPartition, routed_partition, setup_proxy
from tierlog.service.rest_v2.convert import (
    ProduceColumns,
    assign_partitions,
    conversion_estimate,
    dump_json,
    parse_produce_rows,
    produce_answer,
    records_body,
    records_to_json,
    renders_in_c,
)
from tierlog.service.rest_v2.openapi import OPENAPI_PATHS
from tierlog.service.security import authz
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.web.budget import CONVERSION_BUDGET, ByteBudget
from tierlog.service.web.keys import BROKER, SETTINGS
from tierlog.service.web.media import (
    MESSAGES_V1_OFFERS,
    RECORDS_OFFERS,
    EmbeddedFormat,
    Offer,
    negotiate,
    produce_format,
    response_offers,
)
from tierlog.service.web.requests import (
    count,
    describe_metrics,
    int_param,
    offload,
    partition_index,
    producible_topic_name,
    read_body,
    send_body,
    topic_name,
)
from tierlog.tiering.codec.batch import build_batch_columns
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import HEADER_SIZE
from tierlog.tiering.codec.partitioner import StickyPartitioner
from tierlog.tiering.codec.records import MIN_RECORD_SIZE
from tierlog.tiering.log.types import ReadResult
from tierlog.wire.errors import (
    NotAcceptableError,
    RecordTooLargeError,
    TierlogError,
    UnavailableError,
    UnknownPartitionError,
    UnsupportedMediaTypeError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.view import PartitionView
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.topic import Topic
    from tierlog.tiering.log import LogConfig

__all__ = ["OPENAPI_PATHS", "STICKY", "setup_routes"]

STICKY: web.AppKey[StickyPartitioner] = web.AppKey("tierlog.rest_v2.sticky", StickyPartitioner)

# A produce body up to this size has its conversion estimate counted on the event loop (one vectorized
# pass in the compiled core, some 0.1 ms for 2 MiB here; 0.7 ms in pure Python): a worker thread's round
# trip costs more than that (about 140 us of latency per hop here).
ESTIMATE_INLINE_BYTES = 2 * 2**20
# A produce answer for one partition's run of at most this many records is written on the event loop (one
# formatting call, about 0.13 ms for 512 records); records spread over partitions cost a few us each, so
# those answers stay in a worker thread past OFFLOAD_BYTES of body.
ANSWER_INLINE_RECORDS = 1024
DEFAULT_FETCH_TIMEOUT_MS = 1000
MAX_FETCH_TIMEOUT_MS = 300_000
# A records fetch is rendered in the log I/O thread that read it (Partition.read_then) up to this much
# data: about a millisecond of work with the compiled core (the _SLOW bound for the json format and the
# pure codec, some ten times slower per byte). A larger read is rendered in the default executor, so a
# large fetch never holds one of the log.io.threads long.
RENDER_IN_READ_BYTES = 2 * 2**20
RENDER_IN_READ_BYTES_SLOW = 256 * 1024
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
MAX_FETCH_MAX_BYTES = 64 * 1024 * 1024


def setup_routes(app: web.Application) -> None:
    """Register the v2 routes on ``app`` (before it starts). Not idempotent: call once per app."""
    app[STICKY] = StickyPartitioner()
    limit = app[SETTINGS].rest_produce_conversion_max_bytes
    app[CONVERSION_BUDGET] = ByteBudget("rest.produce.conversion.max.bytes", limit)
    describe_metrics(app)
    setup_proxy(app)
    app.router.add_get("/brokers", list_brokers)
    app.router.add_get("/topics", list_topics)
    app.router.add_get("/topics/{topic}", get_topic)
    app.router.add_post("/topics/{topic}", produce_to_topic)
    app.router.add_get("/topics/{topic}/partitions", list_partitions)
    app.router.add_get("/topics/{topic}/partitions/{partition}", get_partition)
    app.router.add_post("/topics/{topic}/partitions/{partition}", produce_to_partition)
    app.router.add_get("/topics/{topic}/partitions/{partition}/offsets", get_offsets)
    app.router.add_get("/topics/{topic}/partitions/{partition}/records", fetch_records)
    app.router.add_get("/topics/{topic}/partitions/{partition}/messages", fetch_messages_v1)


def _broker(request: web.Request) -> Broker:
    return request.app[BROKER]


def _metadata_type(request: web.Request) -> str:
    offer = negotiate(request.headers.get("Accept"), response_offers(request.headers.get("Content-Type")))
    if offer is None:
        raise NotAcceptableError(
            f"HTTP 406 Not Acceptable: cannot answer with any of Accept: {request.headers.get('Accept')}; "
            "use application/vnd.kafka.v2+json, application/vnd.kafka+json or application/json"
        )
    return offer.response_type


def _json(value: Any, content_type: str, *, status: int = 200) -> web.Response:
    return web.Response(body=dump_json(value), status=status, content_type=content_type)


def _partition_json(view: PartitionView) -> dict[str, Any]:
    replicas = [{"broker": b, "leader": b == view.leader, "in_sync": b in view.isr} for b in view.replicas]
    return {"partition": view.partition, "leader": view.leader, "replicas": replicas}


def _partition_views(broker: Broker, name: str) -> tuple[PartitionView, ...]:
    """The partitions of topic ``name`` as the cluster view shows them. Raises UnknownTopicError (40401)."""
    broker.topic(name)
    return tuple(broker.cluster_view().partitions.get(name, ()))


async def list_brokers(request: web.Request) -> web.Response:
    """``{"brokers": [id...]}``: the live brokers of the cluster. Raises NotAcceptableError (406)."""
    content_type = _metadata_type(request)
    brokers = [b.broker_id for b in _broker(request).cluster_view().brokers]
    return _json({"brokers": brokers}, content_type)


async def list_topics(request: web.Request) -> web.Response:
    """The names of the non-internal topics the principal may Describe, as Kafka's admin client lists
    them. Raises 406."""
    content_type = _metadata_type(request)
    names = [t.name for t in _broker(request).topics() if not t.is_internal]
    return _json(authz.filter_allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, names), content_type)


async def get_topic(request: web.Request) -> web.Response:
    """Name, configs and partitions of one topic. Raises UnknownTopicError (40401), 406, 400.

    With authentication on, ``configs`` is empty unless the principal may DescribeConfigs the topic (the
    route itself needs Describe; Kafka answers configs only with DescribeConfigs)."""
    content_type = _metadata_type(request)
    broker = _broker(request)
    topic = broker.topic(topic_name(request))
    partitions = [_partition_json(p) for p in _partition_views(broker, topic.name)]
    configs = (
        topic.configs()
        if authz.allowed(request, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name)
        else {}
    )
    return _json({"name": topic.name, "configs": configs, "partitions": partitions}, content_type)


async def list_partitions(request: web.Request) -> web.Response:
    """The partitions of one topic. Raises UnknownTopicError (40401), 406, 400."""
    content_type = _metadata_type(request)
    views = _partition_views(_broker(request), topic_name(request))
    return _json([_partition_json(p) for p in views], content_type)


async def get_partition(request: web.Request) -> web.Response:
    """One partition. Raises UnknownTopicError (40401), UnknownPartitionError (40402), 406, 400."""
    content_type = _metadata_type(request)
    name, index = topic_name(request), partition_index(request)
    views = _partition_views(_broker(request), name)
    if index >= len(views):
        raise UnknownPartitionError(f"Partition not found. (partition {index} of topic {name})")
    return _json(_partition_json(views[index]), content_type)


def _routed(request: web.Request) -> RoutedPartition:
    """The partition in the path, local or on its leader. Raises as
    :func:`~tierlog.service.cluster.proxy.routed_partition`, and BadRequestError (40001)."""
    return routed_partition(request.app, topic_name(request), partition_index(request))


async def get_offsets(request: web.Request) -> web.Response:
    """Beginning offset and end offset (the high watermark) of one partition, asked of its leader.

    Raises as get_partition, and LeaderNotAvailableError (50311) / UnavailableError (50301), retriable,
    when the leader cannot answer."""
    content_type = _metadata_type(request)
    offsets = await _routed(request).offsets()
    body = {"beginning_offset": offsets.log_start_offset, "end_offset": offsets.high_watermark}
    return _json(body, content_type)


async def produce_to_topic(request: web.Request) -> web.Response:
    """Produce records, each to its explicit, keyed or sticky partition. See :func:`_produce`."""
    return await _produce(request, fixed=None)


async def produce_to_partition(request: web.Request) -> web.Response:
    """Produce records to the partition in the path. See :func:`_produce`."""
    return await _produce(request, fixed=partition_index(request))


def _compression(config: LogConfig) -> Compression:
    """The codec of the batches this route builds: the topic's ``compression.type`` (``producer`` means
    the records arrive uncompressed, so none)."""
    name = config.compression_type
    return Compression.NONE if name == "producer" else Compression.from_name(name)


def _groups(partitions: Sequence[int]) -> dict[int, list[int]]:
    """The request positions of each partition's records, in order."""
    if partitions and partitions.count(partitions[0]) == len(partitions):
        return {partitions[0]: list(range(len(partitions)))}  # one partition: no loop per record
    groups: dict[int, list[int]] = {}
    for position, partition in enumerate(partitions):
        groups.setdefault(partition, []).append(position)
    return groups


def _columns(records: ProduceColumns, positions: list[int]) -> tuple[list[bytes | None], list[bytes | None]]:
    """The keys and values at ``positions`` (all of them without a copy when that is every record)."""
    if len(positions) == len(records):
        return records.keys, records.values
    keys, values = records.keys, records.values
    return [keys[i] for i in positions], [values[i] for i in positions]


def _build_batches(
    records: ProduceColumns, partitions: Sequence[int], compression: Compression, max_bytes: int
) -> dict[int, tuple[list[int], bytes]]:
    built: dict[int, tuple[list[int], bytes]] = {}
    for partition, positions in _groups(partitions).items():
        batch = build_batch_columns(*_columns(records, positions), compression=compression)
        if len(batch) > max_bytes:
            raise RecordTooLargeError(
                f"the batch of {len(positions)} records for partition {partition} is {len(batch)} bytes, "
                f"over max.message.bytes={max_bytes}"
            )
        built[partition] = (positions, batch)
    return built


def _check_fit(
    records: ProduceColumns, partitions: Sequence[int], compression: Compression, max_bytes: int
) -> None:
    """Refuse before building when an uncompressed batch could not fit: each record takes at least
    ``MIN_RECORD_SIZE`` bytes plus its key and value, each batch ``HEADER_SIZE``."""
    if compression != Compression.NONE:
        return
    for partition, positions in _groups(partitions).items():
        keys, values = _columns(records, positions)
        size = HEADER_SIZE + MIN_RECORD_SIZE * len(positions)
        size += sum(map(len, filter(None, keys))) + sum(map(len, filter(None, values)))
        if size > max_bytes:
            raise RecordTooLargeError(
                f"the records for partition {partition} need at least {size} bytes as a batch, "
                f"over max.message.bytes={max_bytes}"
            )


def _produce_type(request: web.Request) -> EmbeddedFormat:
    fmt = produce_format(request.headers.get("Content-Type"))
    if fmt is None:
        raise UnsupportedMediaTypeError(
            f"HTTP 415 Unsupported Media Type: {request.headers.get('Content-Type')!r}; use "
            "application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        )
    return fmt


async def _append(
    app: web.Application, name: str, batches: dict[int, bytes]
) -> dict[int, int | TierlogError]:
    """Append each partition's batch through its leader, all at once: the base offset each got, or the
    error its append raised. Raises LeaderNotAvailableError (50311) before appending anything when a
    partition has no live leader, and any error that is not a TierlogError (a bug)."""
    routes = {p: routed_partition(app, name, p) for p in batches}
    order = list(batches)
    results = await asyncio.gather(*(routes[p].append(batches[p]) for p in order), return_exceptions=True)
    outcomes: dict[int, int | TierlogError] = {}
    for partition, result in zip(order, results, strict=True):
        if isinstance(result, BaseException) and not isinstance(result, TierlogError):
            raise result
        outcomes[partition] = result if isinstance(result, TierlogError) else result.base_offset
    return outcomes


async def _produce(request: web.Request, *, fixed: int | None) -> web.Response:
    """Validate the whole request, then append one batch per partition and report per-record offsets.

    Not idempotent (a retry appends again). Raises UnsupportedMediaTypeError (415), NotAcceptableError
    (406), BadRequestError (400), InvalidRequestError / InvalidValueError (42201/42202),
    UnknownTopicError / UnknownPartitionError (40401/40402), RecordTooLargeError (413),
    InvalidBodyError (422: more than ``rest.produce.max.records``), UnavailableError (503/50301, retriable:
    ``rest.produce.conversion.max.bytes`` is full), LeaderNotAvailableError (503/50311, retriable: a
    partition of the request has no live leader; nothing is appended), InsufficientStorageError (507/50701:
    the disk is full while the topic is auto-created). Each partition's batch is appended by its leader
    (locally or through the proxy).

    Memory is bounded by the conversion budget from before the body is read to the answer: the request
    holds its declared ``Content-Length`` (refused at once when the budget is full), then
    :func:`~tierlog.service.rest_v2.convert.conversion_estimate` of the body. Parsing, partitioning, batch
    building and the answer run in a worker thread that gives the GIL up between records (the estimate of
    a body up to :data:`ESTIMATE_INLINE_BYTES` and the answer of one partition's run of up to
    :data:`ANSWER_INLINE_RECORDS` records, both short, on the event loop): for a topic that exists, the
    parse and the conversion in one hand-over; otherwise the body is parsed before the topic is looked up
    or auto-created (a bad body is refused first, creating nothing), and converted after; the count and a
    lower bound of each batch's size are checked before any batch is built. Append failures after
    validation are reported per record with error_code 50002 (50003 when retriable, 50701 for a full
    disk), as Confluent's proxy does.
    """
    fmt = _produce_type(request)
    content_type = _metadata_type(request)
    name = producible_topic_name(request)
    max_records = request.app[SETTINGS].rest_produce_max_records
    with request.app[CONVERSION_BUDGET].hold(0) as held:
        body = await read_body(request, held)
        size = len(body)
        if size <= ESTIMATE_INLINE_BYTES:
            held.resize(conversion_estimate(body, max_records))
        else:
            held.resize(await offload(size, lambda: conversion_estimate(body, max_records)))
        existing = _existing_topic(request, name)
        if existing is None:  # parsed before the topic is looked up or auto-created: a bad body is 422 first
            rows = await offload(size, lambda: parse_produce_rows(body, fmt, max_records=max_records))
            body = b""
            topic = await authz.ensure_topic(request, name)
            convert = _converter(request, topic, fixed)
            partitions, built = await offload(size, lambda: convert(rows))
        else:  # the topic exists: parsed and converted in one hand-over to a worker
            convert = _converter(request, existing, fixed)
            unparsed = [body]  # the worker takes the body out, so it is freed once parsed
            body = b""

            def parse_and_convert() -> tuple[list[int], dict[int, tuple[list[int], bytes]]]:
                parsed = parse_produce_rows(unparsed.pop(), fmt, max_records=max_records)
                return convert(parsed)

            partitions, built = await offload(size, parse_and_convert)
        outcomes = await _append(request.app, name, {p: batch for p, (_, batch) in built.items()})
        inline = len(built) == 1 and len(partitions) <= ANSWER_INLINE_RECORDS
        built.clear()
        if inline:
            answer = produce_answer(partitions, outcomes)
        else:
            answer = await offload(size, lambda: produce_answer(partitions, outcomes))
    count(request, "tierlog_http_body_bytes_total", size, api="rest", direction="in", topic=name)
    return web.Response(body=answer, content_type=content_type)


def _existing_topic(request: web.Request, name: str) -> Topic | None:
    """Topic ``name`` when it exists now, as :func:`authz.ensure_topic` would answer it at once (no
    auto-creation, no authorization to create, no error); else None."""
    broker = _broker(request)
    found = broker.local_topics.get(name) if broker.ready else None
    if found is None or name not in broker.cluster_view().partitions:
        return None
    return found


def _converter(
    request: web.Request, topic: Topic, fixed: int | None
) -> Callable[[ProduceColumns], tuple[list[int], dict[int, tuple[list[int], bytes]]]]:
    """The produce conversion for ``topic``: parsed rows to each record's partition and each partition's
    batch (the partition count read now, on the event loop). Runs off the loop; clears the rows a slice
    at a time as it goes."""
    name = topic.name
    partition_count = len(_partition_views(_broker(request), name))
    if partition_count == 0:  # created, but this broker's view of the cluster does not show it yet
        raise UnavailableError(f"Topic {name} is committed but this broker has not seen it yet; retry.")
    sticky = request.app[STICKY]
    config = topic.config
    max_bytes, compression = config.max_message_bytes, _compression(config)

    def convert(records: ProduceColumns) -> tuple[list[int], dict[int, tuple[list[int], bytes]]]:
        try:
            partitions = assign_partitions(records, partition_count, topic=name, sticky=sticky, fixed=fixed)
            _check_fit(records, partitions, compression, max_bytes)
            return partitions, _build_batches(records, partitions, compression, max_bytes)
        finally:
            records.clear()  # a slice at a time, here, not on the event loop

    return convert


async def _rendered(
    partition: RoutedPartition,
    offset: int,
    max_bytes: int,
    wait_ms: int,
    convert: Callable[[ReadResult], tuple[int, bytes | bytearray]],
    in_read: int,
) -> tuple[int, bytes | bytearray]:
    """A records fetch's read and its rendering, answering the rendering only (the raw bytes are freed
    before the answer is written)."""
    result, rendered = await partition.read_then(
        offset, max_bytes, convert, then_up_to=in_read, max_wait_ms=wait_ms, min_bytes=1
    )
    if rendered is not None:
        return rendered
    return await offload(len(result.data), lambda: convert(result))


def _records_offer(request: web.Request) -> Offer:
    offer = negotiate(request.headers.get("Accept"), RECORDS_OFFERS)
    if offer is None or offer.embedded is None:
        raise NotAcceptableError(
            f"cannot serve records as any of Accept: {request.headers.get('Accept')}; use "
            "application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json"
        )
    return offer


async def fetch_records(request: web.Request) -> web.StreamResponse:
    """Records from ``offset`` as the v2 JSON array, long-polling up to ``timeout`` ms for new data.

    Idempotent. Raises NotAcceptableError (406), BadRequestError (400), UnknownTopicError /
    UnknownPartitionError (40401/40402), OffsetOutOfRangeError (416, with the valid range),
    InvalidRequestError / InvalidValueError (42201/42202, a key or value that is not valid JSON when JSON
    was asked for), CorruptRecordError (500), LeaderNotAvailableError (50311) / UnavailableError (50301),
    retriable, when the partition's leader cannot answer.
    """
    offer = _records_offer(request)
    fmt = offer.embedded
    assert fmt is not None
    name = topic_name(request)
    partition = _routed(request)
    offset = int_param(request, "offset", None, low=0)
    timeout = int_param(request, "timeout", DEFAULT_FETCH_TIMEOUT_MS, low=0, high=MAX_FETCH_TIMEOUT_MS)
    max_bytes = int_param(request, "max_bytes", DEFAULT_FETCH_MAX_BYTES, low=1, high=MAX_FETCH_MAX_BYTES)

    def convert(result: ReadResult) -> tuple[int, bytes | bytearray]:
        return records_body(
            result.data,
            topic=name,
            partition=partition.index,
            start_offset=offset,
            high_watermark=result.high_watermark,
            fmt=fmt,
        )

    # rendered in the log I/O thread that read the bytes where the read is local and small (one hand-over)
    in_read = RENDER_IN_READ_BYTES if renders_in_c(fmt) else RENDER_IN_READ_BYTES_SLOW
    delivered, body = await _rendered(partition, offset, max_bytes, timeout, convert, in_read)
    count(request, "tierlog_records_out_total", delivered, topic=name, api="rest")
    count(request, "tierlog_http_body_bytes_total", len(body), api="rest", direction="out", topic=name)
    return await send_body(request, body, offer.response_type, what=f"a records fetch of {name}")


DEFAULT_MESSAGES_COUNT = 1
MAX_MESSAGES_COUNT = 100_000


async def fetch_messages_v1(request: web.Request) -> web.Response:
    """The v1 API's partition read: up to ``count`` (default 1) records from ``offset``, without waiting.

    Each record is ``{"topic", "key", "value", "partition", "offset"}`` (v1 clients read ``key``, ``value``,
    ``partition`` and ``offset``). Idempotent. Raises as :func:`fetch_records`.
    """
    offer = negotiate(request.headers.get("Accept"), MESSAGES_V1_OFFERS)
    if offer is None or offer.embedded is None:
        raise NotAcceptableError(
            f"HTTP 406 Not Acceptable: {request.headers.get('Accept')!r}; use "
            "application/vnd.kafka.binary.v1+json or application/vnd.kafka.json.v1+json"
        )
    fmt = offer.embedded
    name = topic_name(request)
    partition = _routed(request)
    offset = int_param(request, "offset", None, low=0)
    wanted = int_param(request, "count", DEFAULT_MESSAGES_COUNT, low=1, high=MAX_MESSAGES_COUNT)
    result = await partition.read(offset, DEFAULT_FETCH_MAX_BYTES, max_wait_ms=0, min_bytes=1)

    def convert() -> list[dict[str, Any]]:
        found = records_to_json(
            result.data,
            topic=name,
            partition=partition.index,
            start_offset=offset,
            high_watermark=result.high_watermark,
            fmt=fmt,
        )
        return found[:wanted]

    records = await offload(len(result.data), convert)
    count(request, "tierlog_records_out_total", len(records), topic=name, api="rest")
    return _json(records, offer.response_type)
