"""OpenAPI 3 ``paths`` entries for the native binary routes (:mod:`tierlog.service.native_api.routes`),
merged into the
broker's document by :mod:`tierlog.service.openapi`."""

from __future__ import annotations

from typing import Any

from tierlog.service.native_api.routes import (
    DEFAULT_MAX_BYTES,
    DEFAULT_PRODUCE_TIMEOUT_MS,
    MAX_MAX_BYTES,
    MAX_PRODUCE_TIMEOUT_MS,
    MAX_WAIT_MS,
)
from tierlog.service.topics.data_dir import MAX_TOPIC_NAME, TOPIC_NAME_PATTERN
from tierlog.service.topics.producer_ids import MAX_EPOCH, MAX_PRODUCER_ID
from tierlog.wire.native import (
    BATCHES_TYPE,
    EARLIEST,
    HIGH_WATERMARK,
    LATEST,
    LEADER_EPOCH,
    LOCAL_LOG_START_OFFSET,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    PRODUCERS_PATH,
)

__all__ = ["OPENAPI_PATHS", "REPLICATION_PATHS"]

_TAG = "Native binary path"
_ERR = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_TOPIC = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 249}}
_PART = {"name": "partition", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}
_RANGE = {h: {"schema": {"type": "integer"}} for h in (HIGH_WATERMARK, LOG_START_OFFSET, LOG_END_OFFSET)}
_REPLICA_HEADERS = {**_RANGE, LOCAL_LOG_START_OFFSET: {"schema": {"type": "integer"}}}
_REPLICA_HEADERS[LEADER_EPOCH] = {"schema": {"type": "integer"}}


def _query(
    name: str,
    description: str,
    *,
    required: bool = False,
    default: Any = None,
    low: int = 0,
    high: int = 2**63 - 1,
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": low, "maximum": high}
    if default is not None:
        schema["default"] = default
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


_TOPIC_NAME = {"type": "string", "pattern": TOPIC_NAME_PATTERN, "maxLength": MAX_TOPIC_NAME}
_NOT_LEADER = "Retriable: not the partition's leader (50310, the body names it) or no live leader (50311)"
_INTS = {"type": "array", "items": {"type": "integer"}}
_METADATA = {
    "type": "object",
    "required": ["cluster_id", "controller_id", "controller_epoch", "brokers", "topics"],
    "properties": {
        "cluster_id": {"type": "string"},
        "controller_id": {"type": "integer", "description": "-1 when there is none"},
        "controller_epoch": {"type": "integer"},
        "brokers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["broker_id", "url", "rack"],
                "properties": {
                    "broker_id": {"type": "integer"},
                    "url": {"type": "string"},
                    "rack": {"type": "string", "nullable": True},
                },
            },
        },
        "topics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["topic"],
                "properties": {
                    "topic": {"type": "string"},
                    "error_code": {"type": "integer", "description": "40401: a requested topic is unknown"},
                    "partitions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["partition", "leader", "leader_epoch", "replicas", "isr"],
                            "properties": {
                                "partition": {"type": "integer"},
                                "leader": {"type": "integer", "description": "-1 when there is none"},
                                "leader_epoch": {"type": "integer"},
                                "replicas": _INTS,
                                "isr": _INTS,
                            },
                        },
                    },
                },
            },
        },
    },
}

_PRODUCER_FIELDS = {
    "producer_id": {"type": "integer", "minimum": 0, "maximum": MAX_PRODUCER_ID},
    "producer_epoch": {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH},
}
_PRODUCER = {"type": "object", "required": list(_PRODUCER_FIELDS), "properties": _PRODUCER_FIELDS}
_PRODUCER_BODY = {
    "oneOf": [
        {"type": "object", "additionalProperties": False, "maxProperties": 0},
        {**_PRODUCER, "additionalProperties": False},
    ]
}


def _errors(**statuses: str) -> dict[str, Any]:
    return {status[1:]: {"description": text, **_ERR} for status, text in statuses.items()}


_REPL_TAG = "Replication (between brokers)"
_REPLICA_ID = _query("replica_id", "the broker id of the follower asking", required=True)
_LEADER_EPOCH = _query("leader_epoch", "the leader epoch the follower follows", required=True, high=2**31 - 1)
_FENCING = (
    "Retriable: this broker does not lead the partition (50310, the body names the leader; 50311), or "
    "leader_epoch is older (50315) or newer (50316) than the one it leads in"
)
_PARTITION_STATE = {
    "type": "object",
    "required": ["leader", "leader_epoch", "isr", "partition_epoch", "controller_epoch"],
    "properties": {
        "leader": {"type": "integer"},
        "leader_epoch": {"type": "integer"},
        "isr": _INTS,
        "partition_epoch": {"type": "integer"},
        "controller_epoch": {"type": "integer"},
    },
}
_ALTER_PARTITION = {
    "type": "object",
    "required": ["topic", "partition", "broker_id", "leader_epoch", "partition_epoch", "new_isr"],
    "properties": {
        "topic": _TOPIC_NAME,
        "partition": {"type": "integer", "minimum": 0},
        "broker_id": {"type": "integer"},
        "leader_epoch": {"type": "integer"},
        "partition_epoch": {"type": "integer"},
        "new_isr": _INTS,
    },
}

REPLICATION_PATHS: dict[str, Any] = {
    "/native/v1/replication/topics/{topic}/partitions/{partition}/batches": {
        "get": {
            "tags": [_REPL_TAG],
            "operationId": "replicaFetchBatches",
            "summary": "A follower's fetch: raw batches up to the leader's log end offset (cluster only)",
            "parameters": [
                _TOPIC,
                _PART,
                _REPLICA_ID,
                _query("offset", "the follower's log end offset", required=True),
                _LEADER_EPOCH,
                _query(
                    "max_bytes", "bound on the bytes returned (at least one batch)", low=1, high=MAX_MAX_BYTES
                ),
                _query(
                    "max_wait_ms", "long-poll time when no batch is past offset", default=0, high=MAX_WAIT_MS
                ),
            ],
            "responses": {
                "200": {
                    "description": "Whole batches, possibly none; the leader's offsets and epoch in headers",
                    "headers": _REPLICA_HEADERS,
                    "content": {BATCHES_TYPE: {"schema": {"type": "string", "format": "binary"}}},
                },
                **_errors(
                    s400="Malformed parameter (40001)",
                    s404="Not a cluster member (40400), topic (40401) or partition not found, or replica_id "
                    "is not one of its followers (40402)",
                    s406=f"Accept does not allow {BATCHES_TYPE} (40601)",
                    s416="Offset below the leader's local log start of a tiered partition (41602, the body "
                    "carries local_log_start_offset), or out of range (41601, the body carries the range)",
                    s503=_FENCING,
                ),
            },
        },
    },
    "/native/v1/replication/topics/{topic}/partitions/{partition}/epochs/{epoch}": {
        "get": {
            "tags": [_REPL_TAG],
            "operationId": "replicaEpochEndOffset",
            "summary": "Where a leader epoch ends on the leader (OffsetsForLeaderEpoch; cluster only)",
            "parameters": [
                _TOPIC,
                _PART,
                {
                    "name": "epoch",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                },
                _REPLICA_ID,
                _LEADER_EPOCH,
            ],
            "responses": {
                "200": {
                    "description": "The largest epoch the leader knows at or below {epoch} and its end "
                    "offset (-1, -1 when {epoch} is older than every epoch it knows)",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["leader_epoch", "end_offset"],
                                "properties": {
                                    "leader_epoch": {"type": "integer"},
                                    "end_offset": {"type": "integer"},
                                },
                            }
                        }
                    },
                },
                **_errors(
                    s400="Malformed parameter (40001)",
                    s404="Not a cluster member (40400), topic (40401) or partition not found, or replica_id "
                    "is not one of its followers (40402)",
                    s406="Accept does not allow application/json (40601)",
                    s503=_FENCING,
                ),
            },
        },
    },
    "/native/v1/replication/alter-partition": {
        "post": {
            "tags": [_REPL_TAG],
            "operationId": "replicaAlterPartition",
            "summary": "A leader's ISR change, committed by the active controller (KIP-497; cluster only)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ALTER_PARTITION}},
            },
            "responses": {
                "200": {
                    "description": "The partition state the controller committed",
                    "content": {"application/json": {"schema": _PARTITION_STATE}},
                },
                **_errors(
                    s400="Not an alter-partition request (40001)",
                    s404="Not a cluster member (40400), topic (40401) or partition (40402) not found",
                    s406="Accept does not allow application/json (40601)",
                    s409="Stale partition epoch (40904), or a new ISR member not assigned or not live "
                    "(40905)",
                    s415="Content-Type is not application/json (41501)",
                    s503="Retriable: not the active controller (50317), leader or leader epoch not current "
                    "(50315), or the metadata store cannot be reached",
                ),
            },
        },
    },
}


OPENAPI_PATHS: dict[str, Any] = {
    "/native/v1/topics/{topic}/partitions/{partition}/batches": {
        "post": {
            "tags": [_TAG],
            "operationId": "nativeProduceBatches",
            "summary": "Append raw v2 record batches (offsets assigned by the broker)",
            "parameters": [
                _TOPIC,
                _PART,
                {
                    "name": "acks",
                    "in": "query",
                    "description": "0: answer 202 once validated, append in the background; 1 (default): "
                    "after the leader's append; -1 or all: after every in-sync replica has the batches",
                    "schema": {"type": "string", "enum": ["0", "1", "-1", "all"], "default": "1"},
                },
                _query(
                    "timeout_ms",
                    "acks=all: how long to wait for every in-sync replica (Kafka's request timeout)",
                    default=DEFAULT_PRODUCE_TIMEOUT_MS,
                    high=MAX_PRODUCE_TIMEOUT_MS,
                ),
            ],
            "requestBody": {
                "required": True,
                "content": {BATCHES_TYPE: {"schema": {"type": "string", "format": "binary"}}},
            },
            "responses": {
                "200": {
                    "description": "Appended (acks 1/all): base_offset, last_offset, batch_base_offsets, "
                    "and the leader_epoch and broker_id of the leader that appended them; duplicate: true "
                    "when every batch (with a producer id) was already stored: nothing appended, the "
                    "offsets are the ones stored the first time"
                },
                "202": {"description": "Validated and queued (acks 0)"},
                **_errors(
                    s400="Malformed parameter (40001) or corrupt batch (40003)",
                    s404="Topic (40401) or partition (40402) not found",
                    s409="Refused by the producer's sequence, nothing appended: out of order (40906), "
                    "fenced by a newer epoch (40907), or stored already with offsets unknown (40908)",
                    s413="Batch over max.message.bytes or body over max.request.size (41301)",
                    s415=f"Content-Type is not {BATCHES_TYPE} (41501)",
                    s422="A transactional batch, a bad producer identity, or duplicates mixed with new "
                    "batches (42201); nothing appended",
                    s503="Retriable: this broker does not lead the partition (50310, the body names the "
                    "leader), it has no live leader (50311), acks=0 and queued.max.request.bytes is full "
                    "(50301); acks=all: the ISR is below min.insync.replicas (50313, nothing appended), it "
                    "shrank below it during the wait (50314, appended), or not every in-sync replica had the "
                    "batches within timeout_ms (50318, appended)",
                    s507="Retriable once space is freed: the data disk is full (50701); nothing was appended",
                ),
            },
        },
        "get": {
            "tags": [_TAG],
            "operationId": "nativeFetchBatches",
            "summary": "Raw v2 record batches from an offset, long-polling up to max_wait_ms",
            "parameters": [
                _TOPIC,
                _PART,
                _query("offset", "first offset wanted", required=True),
                _query(
                    "max_bytes",
                    "bound on the bytes returned (at least one batch)",
                    default=DEFAULT_MAX_BYTES,
                    low=1,
                    high=MAX_MAX_BYTES,
                ),
                _query(
                    "max_wait_ms",
                    "long-poll time when fewer than min_bytes are available",
                    default=0,
                    high=MAX_WAIT_MS,
                ),
                _query("min_bytes", "bytes to wait for", default=1, high=MAX_MAX_BYTES),
            ],
            "responses": {
                "200": {
                    "description": "Whole batches, possibly none",
                    "headers": _RANGE,
                    "content": {BATCHES_TYPE: {"schema": {"type": "string", "format": "binary"}}},
                },
                **_errors(
                    s400="Malformed parameter (40001)",
                    s404="Topic (40401) or partition (40402) not found",
                    s406=f"Accept does not allow {BATCHES_TYPE} (40601)",
                    s416="Offset out of range (41601); body and headers carry the valid range",
                    s503=_NOT_LEADER,
                ),
            },
        },
    },
    "/native/v1/topics/{topic}/partitions/{partition}/offsets": {
        "get": {
            "tags": [_TAG],
            "operationId": "nativeListOffset",
            "summary": "Offset for a timestamp: -2 earliest, -1 latest (high watermark), or epoch ms",
            "parameters": [
                _TOPIC,
                _PART,
                _query("timestamp", "-2, -1 or a time in ms", default=LATEST, low=EARLIEST),
            ],
            "responses": {
                "200": {"description": "offset and timestamp (-1, -1 when none)"},
                **_errors(s404="Not found", s503=_NOT_LEADER),
            },
        },
    },
    "/native/v1/topics/{topic}": {
        "get": {
            "tags": [_TAG],
            "operationId": "nativeTopicMetadata",
            "summary": "Partition count, and each partition's log start, high watermark and log end",
            "parameters": [_TOPIC],
            "responses": {
                "200": {"description": "Topic metadata"},
                **_errors(s404="Topic not found (40401)"),
            },
        },
    },
    "/native/v1/metadata": {
        "get": {
            "tags": [_TAG],
            "operationId": "nativeClusterMetadata",
            "summary": "The cluster: brokers, controller, and each partition's leader, replicas and ISR",
            "parameters": [
                {
                    "name": "topic",
                    "in": "query",
                    "description": "a topic to describe (repeatable); every topic when absent",
                    "schema": {"type": "array", "items": _TOPIC_NAME},
                    "style": "form",
                    "explode": True,
                }
            ],
            "responses": {
                "200": {
                    "description": "Cluster metadata",
                    "content": {"application/json": {"schema": _METADATA}},
                },
                **_errors(
                    s400="An illegal topic name (40001)",
                    s406="Accept does not allow application/json (40601)",
                    s503="The broker is still opening (50301)",
                ),
            },
        },
    },
    PRODUCERS_PATH: {
        "post": {
            "tags": [_TAG],
            "operationId": "nativeInitProducerId",
            "summary": "A new producer id at epoch 0, or the epoch of an issued one bumped (KIP-360)",
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": _PRODUCER_BODY}},
            },
            "responses": {
                "200": {
                    "description": "The producer id and epoch to stamp into batches",
                    "content": {"application/json": {"schema": _PRODUCER}},
                },
                **_errors(
                    s400="Not a JSON object, an unknown field, only one of the two fields, or not integers "
                    "(40001)",
                    s404="producer_id was never issued by this cluster (40404)",
                    s406="Accept does not allow application/json (40601)",
                    s413="Body over max.request.size (41301)",
                    s415="Content-Type is not application/json (41501)",
                    s422="producer_id or producer_epoch out of range (42202)",
                    s503="Retriable: the broker is still opening, or its state or the metadata store "
                    "cannot be written (50301)",
                    s507="Retriable once space is freed: the data disk is full (50701)",
                ),
            },
        },
    },
}
OPENAPI_PATHS.update(REPLICATION_PATHS)

_DESCRIPTIONS = {
    "nativeProduceBatches": "Appends the body's Kafka v2 record batches, stored byte for byte: each is "
    "checked (CRC, sizes, codec, producer sequence) and refused whole when one is bad; only the base offsets "
    "(and LogAppendTime when configured) are assigned.",
    "nativeFetchBatches": "Whole record batches from the one holding `offset`, as stored (local segments or "
    "the archive); the log's start, high watermark and end in headers. Waits up to `max_wait_ms` for "
    "`min_bytes`.",
    "nativeListOffset": "Kafka's ListOffsets: the earliest offset (-2), the high watermark (-1), or the "
    "first offset whose timestamp is at or after a time, with that timestamp.",
    "nativeTopicMetadata": "The topic's partition count and each partition's log start offset, high "
    "watermark and log end offset, as this broker sees them.",
    "nativeClusterMetadata": "The cluster's brokers with their URLs, the controller, and each partition's "
    "leader, replicas and ISR: what a client routes requests by. Any broker answers.",
    "nativeInitProducerId": "No body (or {}): a new id. With both fields: producer_epoch + 1, or a new id at "
    "epoch 0 when producer_epoch is 32767; the new epoch fences older instances of the producer. Any broker "
    "answers. Not idempotent (design note 0011).",
    "replicaFetchBatches": "A follower's fetch from its leader: whole batches from `offset`, fenced by the "
    "leader epoch; the leader's high watermark, log start and epoch in headers. Brokers call it.",
    "replicaEpochEndOffset": "Kafka's OffsetsForLeaderEpoch: where a follower truncates to after a leader "
    "change (KIP-101/279). Brokers call it.",
    "replicaAlterPartition": "A leader asks the active controller to commit an ISR change (Kafka's "
    "AlterPartition, KIP-497), conditioned on the partition epoch. Brokers call it.",
}
_BODIES: dict[str, tuple[str, str, Any]] = {
    "nativeProduceBatches": ("One or more Kafka v2 record batches, concatenated", BATCHES_TYPE, None),
    "nativeInitProducerId": (
        "Nothing (a new id), or the id and epoch of an issued producer to bump",
        "application/json",
        {"producer_id": 1000, "producer_epoch": 0},
    ),
    "replicaAlterPartition": (
        "The partition, the leader's id, leader epoch and partition epoch, and the ISR it asks for",
        "application/json",
        {
            "topic": "orders",
            "partition": 0,
            "broker_id": 1,
            "leader_epoch": 3,
            "partition_epoch": 7,
            "new_isr": [1, 2],
        },
    ),
}
for _item in OPENAPI_PATHS.values():
    for _operation in _item.values():
        _operation["description"] = _DESCRIPTIONS[_operation["operationId"]]
        if _operation["operationId"] in _BODIES:
            _text, _media, _example = _BODIES[_operation["operationId"]]
            _operation["requestBody"]["description"] = _text
            if _example is not None:
                _operation["requestBody"]["content"][_media]["example"] = _example
