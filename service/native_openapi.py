"""OpenAPI 3 ``paths`` entries for the native binary routes (:mod:`tierlog.service.native`), merged into the
broker's document by :mod:`tierlog.service.openapi`."""

from __future__ import annotations

from typing import Any

from tierlog.service.metadata import MAX_TOPIC_NAME, TOPIC_NAME_PATTERN
from tierlog.service.native import (
    BATCHES_TYPE,
    DEFAULT_MAX_BYTES,
    EARLIEST,
    HIGH_WATERMARK,
    LATEST,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    MAX_MAX_BYTES,
    MAX_WAIT_MS,
)

__all__ = ["OPENAPI_PATHS"]

_TAG = "Native binary path"
_ERR = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_TOPIC = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 249}}
_PART = {"name": "partition", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}}
_RANGE = {h: {"schema": {"type": "integer"}} for h in (HIGH_WATERMARK, LOG_START_OFFSET, LOG_END_OFFSET)}


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


def _errors(**statuses: str) -> dict[str, Any]:
    return {status[1:]: {"description": text, **_ERR} for status, text in statuses.items()}


OPENAPI_PATHS: dict[str, Any] = {
    "/native/v1/topics/{topic}/partitions/{partition}/batches": {
        "post": {
            "tags": [_TAG],
            "operationId": "nativeProduceBatches",
            "summary": "Append raw v2 record batches (offsets assigned by the broker)",
            "parameters": [
                _TOPIC,
                _PART,
                {"name": "acks", "in": "query", "schema": {"enum": ["0", "1", "-1", "all"]}},
            ],
            "requestBody": {
                "required": True,
                "content": {BATCHES_TYPE: {"schema": {"type": "string", "format": "binary"}}},
            },
            "responses": {
                "200": {"description": "Appended (acks 1/all): base_offset, last_offset, batch_base_offsets"},
                "202": {"description": "Validated and queued (acks 0)"},
                **_errors(
                    s400="Malformed parameter (40001) or corrupt batch (40003)",
                    s404="Topic (40401) or partition (40402) not found",
                    s413="Batch over max.message.bytes or body over max.request.size (41301)",
                    s415="Content-Type is not application/vnd.tierlog.batches (41501)",
                    s503="Retriable: this broker does not lead the partition (50310, the body names the "
                    "leader), it has no live leader (50311), or acks=0 and queued.max.request.bytes is full "
                    "(50301)",
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
                    s406="Accept does not allow application/vnd.tierlog.batches (40601)",
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
}
