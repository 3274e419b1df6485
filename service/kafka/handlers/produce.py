"""Produce (key 0) and InitProducerId (key 22): records in through Kafka's protocol, stored by the same
partition append as the native HTTP path (``POST /native/v1/.../batches``), byte for byte.

Produce is served from v3 (record batches v2 only) to v12 (v13 addresses topics by id, which tierlog does
not assign). Each partition's record batches are validated as the native path validates them (CRC, codec,
producer attributes, every record, ``max.message.bytes`` before and after decompression) and appended with
:meth:`Partition.append`; the partitions of one request are appended concurrently and each answers its own
error code, from the one error table (:mod:`tierlog.wire.errors`). Idempotent producers are checked by the
log's producer state: a retried batch appends nothing and answers the offsets it got the first time (Kafka's
DUPLICATE_SEQUENCE_NUMBER, answered as success; a retry older than the producer's last five batches
answers DUPLICATE_SEQUENCE_NUMBER itself). ``acks=0`` is appended before the next request of the
connection is read and gets no answer; when it fails the connection is closed, as Kafka does, so the
producer learns of it.

InitProducerId hands an idempotent producer an id (or bumps its epoch, KIP-360) from the broker's
producer-id manager, as ``POST /native/v1/producers`` does. Transactions are not served: a transactional
id in either API is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error for Kafka's clients
(they stop instead of retrying).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierlog.service.kafka.apis import CloseConnection, api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.metadata import brokers_of
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType
from tierlog.tiering.codec.validate import validate_batch
from tierlog.wire.errors import (
    AuthorizationError,
    CorruptBatchError,
    NotLeaderOrFollowerError,
    TierlogError,
)

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker
    from tierlog.tiering.log.types import AppendInfo

__all__ = ["PRODUCE_KEY", "INIT_PRODUCER_ID_KEY", "check_batches", "partition_answer"]

PRODUCE_KEY = 0
INIT_PRODUCER_ID_KEY = 22
_ACKS = (0, 1, -1)
_NO_TIMESTAMP = -1
_MS = datetime.timedelta(milliseconds=1)
_MAGIC_AT = 16  # base offset (8), batch length (4), partition leader epoch (4), then magic
_MAGIC_V2 = 2


def check_batches(records: bytes, *, max_size: int) -> int:
    """Validate every record batch of ``records`` and every record in it as the native produce path does;
    return how many batches there are. Pure; safe to call concurrently.

    Raises:
        CorruptBatchError: no batch at all.
        CorruptRecordError: a batch or record fails validation (the message names the batch).
        RecordTooLargeError: a batch over ``max_size`` (``max.message.bytes``).
    """
    if not records:
        raise CorruptBatchError("the request holds no record batch for the partition")
    batches = pos = 0
    while pos < len(records):
        header = validate_batch(records, pos, max_size=max_size)
        batches += 1
        pos += header.size
    return batches


def partition_answer(
    index: int,
    *,
    info: AppendInfo | None = None,
    log_start_offset: int = -1,
    error: TierlogError | None = None,
    error_code: ErrorCode | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """One partition's Produce answer: the stored offsets of ``info``, or the error (``error``, or
    ``error_code`` with ``message``). Pure."""
    answer: dict[str, Any] = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    if info is not None:
        answer["base_offset"] = info.base_offset
        if info.log_append_time != _NO_TIMESTAMP:
            answer["log_append_time"] = datetime.datetime.fromtimestamp(
                info.log_append_time / 1000, tz=datetime.UTC
            )
    if error is not None:
        answer["error_code"] = error.kafka_error().code
        answer["error_message"] = error.message
        if isinstance(error, NotLeaderOrFollowerError):
            answer["current_leader"] = {"leader_id": error.leader_id, "leader_epoch": error.leader_epoch}
    elif error_code is not None:
        answer["error_code"] = error_code
        answer["error_message"] = message
    return answer


async def _append(
    broker: Broker, topic: str, index: int, records: bytes | None, *, acks: int, timeout_ms: int
) -> dict[str, Any]:
    """Append one partition's batches; its answer. Raises only what is not a TierlogError."""
    if topic.startswith("__"):  # internal topics (offsets, ...) are written by the broker only, as in Kafka
        return partition_answer(
            index,
            error_code=ErrorCode.invalid_topic_exception,
            message=f"{topic} is an internal topic: clients cannot produce to it",
        )
    try:
        partition = (await broker.ensure_topic(topic)).partition(index)
        config = partition.config
        data = records or b""
        if len(data) > _MAGIC_AT and data[_MAGIC_AT] != _MAGIC_V2:
            return partition_answer(
                index,
                error_code=ErrorCode.invalid_record,
                message=f"record batches of magic {data[_MAGIC_AT]}; Produce v3+ takes magic 2 only",
            )
        if len(data) > config.segment_bytes:  # Kafka: a request's batches must fit in one segment
            return partition_answer(
                index,
                error_code=ErrorCode.record_list_too_large,
                message=f"{len(data)} bytes of batches exceed segment.bytes {config.segment_bytes}",
            )
        info = await partition.append(
            data,
            acks=acks,
            timeout_ms=timeout_ms,
            check=lambda: check_batches(data, max_size=config.max_message_bytes),
        )
    except TierlogError as err:
        return partition_answer(index, error=err)
    return partition_answer(index, info=info, log_start_offset=partition.log_start_offset)


def _write_refusal(request: KafkaRequest, topic: str) -> AuthorizationError | None:
    """Why ``topic`` may not be written: no WRITE on it, or (auto-created on produce) no CREATE."""
    refusal = request.refusal(Operation.WRITE, ResourceType.TOPIC, topic)
    broker = request.broker
    if (
        refusal is None
        and broker.settings.auto_create_topics_enable
        and broker.ready
        and topic not in broker.cluster_view().partitions
        and not request.may_create_topic(topic)
    ):
        return AuthorizationError(f"Not authorized to Create Topic '{topic}'", resource_type="TOPIC")
    return refusal


async def _refused(index: int, refusal: AuthorizationError) -> dict[str, Any]:
    return partition_answer(index, error=refusal)


def _refuse_all(body: Any, code: ErrorCode) -> list[dict[str, Any]]:
    return [
        {
            "name": topic.name,
            "partition_responses": [partition_answer(p.index, error_code=code) for p in topic.partition_data],
        }
        for topic in body.topic_data
    ]


def _leader_endpoints(request: KafkaRequest, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Produce v10+'s ``node_endpoints``: the brokers named as current leader in NOT_LEADER_OR_FOLLOWER
    answers (KIP-951), so the client re-routes without a Metadata round trip."""
    leaders = {
        p["current_leader"]["leader_id"]
        for t in topics
        for p in t["partition_responses"]
        if "current_leader" in p and p["current_leader"]["leader_id"] >= 0
    }
    if not leaders:
        return []
    return [b for b in brokers_of(request, request.broker.cluster_view()) if b["node_id"] in leaders]


@api(PRODUCE_KEY, "Produce", 3, 12)
async def handle_produce(request: KafkaRequest, body: Any) -> Mapping[str, Any] | None:
    """Append every partition's batches concurrently; answer each partition's offsets or error (none for
    ``acks=0``). Safe concurrently. For an ``acks=0`` request a partition failed, raises (naming the first
    failure), which closes the connection as Kafka does."""
    acks = int(body.acks)
    if body.transactional_id is not None:
        topics = _refuse_all(body, ErrorCode.transactional_id_authorization_failed)
    elif acks not in _ACKS:
        topics = _refuse_all(body, ErrorCode.invalid_required_acks)
    else:
        timeout_ms = max(0, int(body.timeout / _MS))
        broker = request.broker
        refused = {t.name: _write_refusal(request, t.name) for t in body.topic_data}
        appends = [
            _append(broker, topic.name, p.index, p.records, acks=acks or 1, timeout_ms=timeout_ms)
            if (refusal := refused[topic.name]) is None
            else _refused(p.index, refusal)
            for topic in body.topic_data
            for p in topic.partition_data
        ]
        answers = iter(await asyncio.gather(*appends))
        topics = [
            {"name": topic.name, "partition_responses": [next(answers) for _ in topic.partition_data]}
            for topic in body.topic_data
        ]
    if acks == 0:
        for topic in topics:
            for answer in topic["partition_responses"]:
                if answer["error_code"] != ErrorCode.none:
                    raise _Acks0Failed(topic["name"], answer)
        return None
    return {"responses": topics, "throttle_time": 0, "node_endpoints": _leader_endpoints(request, topics)}


class _Acks0Failed(CloseConnection):
    """An ``acks=0`` produce failed: the listener closes the connection (Kafka's answer to it)."""

    reason = "acks0_failed"

    def __init__(self, topic: str, answer: Mapping[str, Any]) -> None:
        name = ErrorCode(answer["error_code"]).name.upper()
        detail = answer["error_message"] or ""
        super().__init__(f"acks=0 produce to {topic}-{answer['index']} failed: {name} {detail}")


@api(INIT_PRODUCER_ID_KEY, "InitProducerId", 0, 6)
async def handle_init_producer_id(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    """A new producer id at epoch 0, or (v3+, KIP-360) the epoch bump of the producer id and epoch the
    client sends. Not idempotent (every call hands out a new id or epoch)."""
    answer: dict[str, Any] = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is not None:
        answer["error_code"] = ErrorCode.transactional_id_authorization_failed
        return answer
    if not request.granted(
        Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not request.granted_any(Operation.WRITE, ResourceType.TOPIC):
        request.count_denied(ResourceType.CLUSTER)
        answer["error_code"] = ErrorCode.cluster_authorization_failed
        return answer
    producer_id = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    broker = request.broker
    try:
        broker.check_ready()
        if producer_id >= 0 and epoch >= 0:
            producer_id, epoch = await broker.producer_ids.bump(producer_id, epoch)
        else:
            producer_id, epoch = await broker.producer_ids.new_id()
    except TierlogError as err:
        answer["error_code"] = err.kafka_error().code
        return answer
    answer.update(error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=epoch)
    return answer
