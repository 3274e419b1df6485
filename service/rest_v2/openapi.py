"""OpenAPI 3 ``paths`` entries for the REST Proxy v2 routes (merged into the broker's document)."""

from __future__ import annotations

from typing import Any

__all__ = ["OPENAPI_PATHS", "error_responses"]

_V2 = "application/vnd.kafka.v2+json"
_BINARY = "application/vnd.kafka.binary.v2+json"
_JSON = "application/vnd.kafka.json.v2+json"

_ERROR = {"$ref": "#/components/schemas/Error"}
_TAG = "REST Proxy v2"
_DESCRIPTIONS = {
    "400": "Malformed JSON, base64, query parameter or topic name (40001)",
    "404": "Topic (40401) or partition (40402) not found",
    "406": "No acceptable representation for the Accept header (40601)",
    "413": "Body over max.request.size, or a batch over max.message.bytes (41301)",
    "415": "Unsupported Content-Type (41501)",
    "416": "Offset out of range (41601); the body carries the valid range",
    "422": "Key (42201) or value (42202) not valid for the embedded format",
    "500": "Corrupt data (50002) or internal error (50001)",
    "503": "Retriable: rest.produce.conversion.max.bytes is full (50301), the partition's leader cannot be "
    "reached (50311, or 50301 when it does not answer in time), it has no live leader (50311), or its "
    "leadership just moved (50310); retry with backoff",
    "507": "The disk is full (50701, retriable once space is freed): the topic could not be auto-created. "
    "An append that fails on a full disk is reported per record in a 200 answer with error_code 50701",
}
_TOPIC = {"name": "topic", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 249}}
_PARTITION = {
    "name": "partition",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}
_PARTITION_OBJ = {
    "type": "object",
    "properties": {
        "partition": {"type": "integer"},
        "leader": {"type": "integer"},
        "replicas": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "broker": {"type": "integer"},
                    "leader": {"type": "boolean"},
                    "in_sync": {"type": "boolean"},
                },
            },
        },
    },
}
_BASE64 = {
    "type": "string",
    "nullable": True,
    "format": "byte",
    "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
    "description": "standard base64 with padding (RFC 4648), or null",
}
_ANY_JSON = {"description": "any JSON value, or null"}


def _produce_body(embedded: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["records"],
        "additionalProperties": False,
        "description": description + "; unknown fields, in the body or in a record, are refused (422)",
        "properties": {
            **{
                name: {
                    "description": "accepted and ignored with binary and json (schema formats answer 42206)"
                }
                for name in ("key_schema", "key_schema_id", "value_schema", "value_schema_id")
            },
            "records": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "key": {**embedded, "description": "the key: " + embedded["description"]},
                        "value": {**embedded, "description": "the value: " + embedded["description"]},
                        "partition": {"type": "integer", "minimum": 0, "nullable": True},
                    },
                },
            },
        },
    }


_BINARY_BODY = _produce_body(_BASE64, "Records whose keys and values are base64")
_JSON_BODY = _produce_body(_ANY_JSON, "Records whose keys and values are JSON")
_PRODUCE_ANSWER = {
    "type": "object",
    "properties": {
        "offsets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "partition": {"type": "integer", "nullable": True},
                    "offset": {"type": "integer", "nullable": True},
                    "error_code": {"type": "integer", "nullable": True},
                    "error": {"type": "string", "nullable": True},
                },
            },
        },
        "key_schema_id": {"type": "integer", "nullable": True},
        "value_schema_id": {"type": "integer", "nullable": True},
    },
}
_RECORDS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "topic": {"type": "string"},
            "key": {},
            "value": {},
            "partition": {"type": "integer"},
            "offset": {"type": "integer"},
        },
    },
}


def error_responses(*statuses: str) -> dict[str, Any]:
    """OpenAPI response objects for the given error statuses. Pure.

    An error is answered as ``application/json`` or, when the client accepts the v2 type (as REST Proxy
    clients do), as ``application/vnd.kafka.v2+json``: both are documented.
    """
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {"application/json": {"schema": _ERROR}, _V2: {"schema": _ERROR}},
        }
        for status in statuses
    }


def _ok(schema: dict[str, Any], *types: str) -> dict[str, Any]:
    return {"200": {"description": "OK", "content": {t: {"schema": schema} for t in types}}}


_BINARY_EXAMPLE = {"records": [{"key": "a2V5", "value": "aGVsbG8="}, {"value": "d29ybGQ=", "partition": 0}]}
_JSON_EXAMPLE = {"records": [{"key": "user-1", "value": {"event": "login"}}, {"value": [1, 2, 3]}]}


def _produce(
    summary: str, operation_id: str, params: list[dict[str, Any]], description: str
) -> dict[str, Any]:
    return {
        "tags": [_TAG],
        "operationId": operation_id,
        "summary": summary,
        "description": description + " Each record's outcome is in `offsets`, in request order: an offset, "
        "or an error_code and error (a full disk, a leader change) while others succeed.",
        "parameters": params,
        "requestBody": {
            "required": True,
            "description": "The records: keys and values base64 in the binary format, any JSON value in "
            "the json format",
            "content": {
                _BINARY: {"schema": _BINARY_BODY, "example": _BINARY_EXAMPLE},
                _JSON: {"schema": _JSON_BODY, "example": _JSON_EXAMPLE},
            },
        },
        "responses": {
            **_ok(_PRODUCE_ANSWER, _V2),
            **error_responses("400", "404", "406", "413", "415", "422", "503", "507"),
        },
    }


OPENAPI_PATHS: dict[str, Any] = {
    "/brokers": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2ListBrokers",
            "summary": "List broker ids",
            "description": 'The ids of the cluster\'s live brokers: `{"brokers": [0, 1, 2]}`.',
            "responses": _ok({"type": "object"}, _V2),
        },
    },
    "/topics": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2ListTopics",
            "summary": "List topic names",
            "description": "The names of the topics the caller may describe, internal topics included.",
            "responses": {
                **_ok({"type": "array", "items": {"type": "string"}}, _V2),
                **error_responses("406"),
            },
        },
    },
    "/topics/{topic}": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2GetTopic",
            "summary": "Topic name, configs and partitions",
            "description": "The topic's name, its configs (set and default) and its partitions with their "
            "leaders and replicas.",
            "parameters": [_TOPIC],
            "responses": {**_ok({"type": "object"}, _V2), **error_responses("400", "404", "406")},
        },
        "post": _produce(
            "Produce records; partition from the record, murmur2(key), or sticky",
            "v2ProduceToTopic",
            [_TOPIC],
            "Appends records to the topic: a record's `partition` when given, else murmur2 of its key as "
            "Kafka's default partitioner, else one partition per request (sticky). An unknown topic is "
            "created when `auto.create.topics.enable` is on.",
        ),
    },
    "/topics/{topic}/partitions": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2ListPartitions",
            "summary": "List partitions",
            "description": "Every partition of the topic with its leader and replicas (in sync or not).",
            "parameters": [_TOPIC],
            "responses": {
                **_ok({"type": "array", "items": _PARTITION_OBJ}, _V2),
                **error_responses("404", "406"),
            },
        },
    },
    "/topics/{topic}/partitions/{partition}": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2GetPartition",
            "summary": "One partition",
            "description": "One partition of the topic with its leader and replicas.",
            "parameters": [_TOPIC, _PARTITION],
            "responses": {**_ok(_PARTITION_OBJ, _V2), **error_responses("404", "406")},
        },
        "post": _produce(
            "Produce records to one partition",
            "v2ProduceToPartition",
            [_TOPIC, _PARTITION],
            "Appends every record to the partition of the path (a record's own `partition` field is "
            "ignored).",
        ),
    },
    "/topics/{topic}/partitions/{partition}/offsets": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2GetPartitionOffsets",
            "summary": "Beginning offset and end offset (high watermark)",
            "description": "`beginning_offset` (the log start, archived segments included) and `end_offset` "
            "(the high watermark: the next offset consumers will see).",
            "parameters": [_TOPIC, _PARTITION],
            "responses": {**_ok({"type": "object"}, _V2), **error_responses("404", "406", "503")},
        },
    },
    "/topics/{topic}/partitions/{partition}/records": {
        "get": {
            "tags": [_TAG],
            "operationId": "v2FetchRecords",
            "summary": "Fetch records from an offset (long poll up to timeout ms)",
            "description": "Records from `offset` on, without a consumer instance (Pandaproxy's route), in "
            "the format the Accept header names: base64 keys and values (binary) or JSON (json). Waits up to "
            "`timeout` ms when none is there yet; reads below the local log come from the archive.",
            "parameters": [
                _TOPIC,
                _PARTITION,
                {
                    "name": "offset",
                    "in": "query",
                    "required": True,
                    "description": "The first offset to read",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                },
                {
                    "name": "timeout",
                    "in": "query",
                    "description": "How long to wait, in ms, when no record is past offset yet",
                    "schema": {"type": "integer", "default": 1000, "minimum": 0, "maximum": 300000},
                },
                {
                    "name": "max_bytes",
                    "in": "query",
                    "description": "Bound on the record bytes returned (at least one record is)",
                    "schema": {
                        "type": "integer",
                        "default": 1048576,
                        "minimum": 1,
                        "maximum": 64 * 1024 * 1024,
                    },
                },
            ],
            "responses": {
                **_ok(_RECORDS, _BINARY, _JSON),
                **error_responses("400", "404", "406", "416", "422", "500", "503"),
            },
        },
    },
    "/topics/{topic}/partitions/{partition}/messages": {
        "get": {
            "tags": [_TAG],
            "operationId": "v1ReadMessages",
            "summary": "v1 API: up to count records from an offset, without waiting",
            "description": "REST Proxy v1's simple consumer: at most `count` records from `offset`, answered "
            "at once (possibly none), in the v1 binary or json format.",
            "parameters": [
                _TOPIC,
                _PARTITION,
                {
                    "name": "offset",
                    "in": "query",
                    "required": True,
                    "description": "The first offset to read",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                },
                {
                    "name": "count",
                    "in": "query",
                    "description": "Most records returned",
                    "schema": {"type": "integer", "default": 1, "minimum": 1, "maximum": 100_000},
                },
            ],
            "responses": {
                **_ok(_RECORDS, "application/vnd.kafka.binary.v1+json", "application/vnd.kafka.json.v1+json"),
                **error_responses("400", "404", "406", "416", "422", "500", "503"),
            },
        },
    },
}
