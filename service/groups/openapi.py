"""OpenAPI 3 ``paths`` of the consumer group routes: REST Proxy v2 consumer instances
(:mod:`~tierlog.service.groups.rest`), the native group protocol (:mod:`~tierlog.service.groups.native`) and
the v3 consumer groups (:mod:`~tierlog.service.groups.admin`); merged by :mod:`tierlog.service.openapi`."""

from __future__ import annotations

from typing import Any

from tierlog.service.groups.admin import GROUPS
from tierlog.service.groups.assignors import STRATEGIES
from tierlog.service.groups.consumer_config import MAX_REQUEST_TIMEOUT_MS
from tierlog.service.groups.coordinator import MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS
from tierlog.service.groups.native import BASE
from tierlog.service.groups.rest import DEFAULT_MAX_BYTES, INSTANCE

__all__ = ["NATIVE_PATHS", "REST_PATHS", "V3_PATHS"]

_REST_STATUSES = {
    "400": "40001 malformed JSON or query parameter",
    "404": "40403 consumer instance not found (40401/40402 an unknown topic or partition)",
    "406": "40601 an Accept that does not match the instance's format",
    "409": "40902 instance name taken, 40903 subscription and assignment mixed or an unassigned seek",
    "415": "41501 a Content-Type that is no REST Proxy type",
    "416": "41601 a position out of range with auto.offset.reset=none",
    "422": "42204 invalid consumer configuration or body; 42201/42202 a key/value the format cannot render; "
    "42201 an invalid group id",
    "500": "50002 corrupt stored data",
    "503": "50301 the broker is still opening its logs or restoring committed offsets",
}
_REST_READ_STATUSES = ("406", "416", "500")
_REST_PART: dict[str, Any] = {
    "type": "object",
    "required": ["topic", "partition"],
    "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"}},
}
_REST_PART_LIST = {"type": "array", "items": _REST_PART}


def _any_case(*words: str) -> str:
    """A pattern matching one of ``words`` in any letter case (the broker lower-cases these values)."""
    return "^(" + "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in word) for word in words) + ")$"


def _integer_or_text(low: int, high: int, description: str) -> dict[str, Any]:
    return {
        "description": f"{description}; an integer from {low} to {high}, or its decimal text",
        "nullable": True,
        "oneOf": [
            {"type": "integer", "minimum": low, "maximum": high},
            {"type": "string", "pattern": "^-?[0-9]+$"},
        ],
    }


_REST_BODIES: dict[str, Any] = {
    "create": {
        "type": "object",
        "nullable": True,
        "description": "Confluent's names; a field null or absent takes its default",
        "properties": {
            "name": {
                "type": "string",
                "nullable": True,
                "description": "The instance name (default: generated)",
            },
            "id": {
                "description": "The v1 API's name for `name` (a string), read when `name` is null or absent"
            },
            "format": {
                "type": "string",
                "nullable": True,
                "pattern": _any_case("binary", "json"),
                "description": "The embedded format of keys and values: binary (default) or json",
            },
            "auto.offset.reset": {
                "type": "string",
                "nullable": True,
                "pattern": _any_case("earliest", "latest", "none", "smallest", "largest"),
                "description": "Where to start without a committed offset (default latest)",
            },
            "auto.commit.enable": {
                "nullable": True,
                "description": "Commit what a read returned (default true)",
                "oneOf": [{"type": "boolean"}, {"type": "string", "pattern": _any_case("true", "false")}],
            },
            "fetch.min.bytes": _integer_or_text(-1, 2**31 - 1, "Bytes a read waits for"),
            "consumer.request.timeout.ms": _integer_or_text(
                0, MAX_REQUEST_TIMEOUT_MS, "How long a read waits for records, in ms (default 1000)"
            ),
        },
    },
    "partitions": {
        "type": "object",
        "required": ["partitions"],
        "properties": {"partitions": _REST_PART_LIST},
    },
    "subscription": {
        "type": "object",
        "nullable": True,
        "properties": {
            "topics": {"type": "array", "nullable": True, "items": {"type": "string"}},
            "topic_pattern": {"type": "string", "nullable": True},
        },
    },
    "commit": {
        "type": "object",
        "nullable": True,
        "description": "null, empty or without offsets: commit everything this instance returned",
        "properties": {
            "offsets": {
                "type": "array",
                "nullable": True,
                "items": {
                    **_REST_PART,
                    "required": ["topic", "partition", "offset"],
                    "properties": {
                        **_REST_PART["properties"],
                        "offset": {"type": "integer", "minimum": -1},
                        "metadata": {"type": "string", "nullable": True},
                    },
                },
            },
        },
    },
    "positions": {
        "type": "object",
        "description": "offsets, timestamps, or both",
        "anyOf": [{"required": ["offsets"]}, {"required": ["timestamps"]}],
        "properties": {
            "offsets": {
                "type": "array",
                "nullable": True,
                "items": {
                    **_REST_PART,
                    "required": ["topic", "partition", "offset"],
                    "properties": {**_REST_PART["properties"], "offset": {"type": "integer"}},
                },
            },
            "timestamps": {
                "type": "array",
                "nullable": True,
                "items": {
                    **_REST_PART,
                    "required": ["topic", "partition", "timestamp"],
                    "properties": {
                        **_REST_PART["properties"],
                        "timestamp": {
                            "description": "ISO 8601 date-time or epoch milliseconds",
                            "oneOf": [{"type": "integer"}, {"type": "string", "format": "date-time"}],
                        },
                    },
                },
            },
        },
    },
}


def _rest_op(
    op_id: str,
    summary: str,
    description: str,
    *,
    body: str | None = None,
    ok: str = "200",
    params: tuple[str, ...] = (),
    reads: tuple[str, ...] = (),
    body_schema: str | None = None,
    example: Any = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "description": description,
        "tags": ["consumers (REST Proxy v2)"],
        "parameters": [
            {"name": p, "in": "query", "description": _REST_QUERY[p][0], "schema": _REST_QUERY[p][1]}
            for p in params
        ],
        "responses": {
            ok: {"description": "success" if ok == "200" else "done, no content"},
            **{
                status: {"description": _REST_STATUSES[status]}
                for status in ("400", "404", "409", "415", "422", "503")
            },
            **({status: {"description": _REST_STATUSES[status]} for status in reads}),
        },
    }
    if body is not None:
        schema = _REST_BODIES.get(body_schema or "", {"type": "object"})
        content: dict[str, Any] = {"schema": schema}
        if example is not None:
            content["example"] = example
        op["requestBody"] = {
            "content": {"application/vnd.kafka.v2+json": content},
            "description": body,
            "required": body_schema in ("partitions", "positions"),
        }
    return op


_REST_QUERY = {
    "timeout": (
        "How long to wait for records, in ms; negative or absent: consumer.request.timeout.ms",
        {"type": "integer", "maximum": MAX_REQUEST_TIMEOUT_MS},
    ),
    "max_bytes": (
        "Bound on the record bytes returned (at least one record is); negative or absent: 64 MiB",
        {"type": "integer", "maximum": DEFAULT_MAX_BYTES},
    ),
}
_REST_GROUP = [{"name": "group", "in": "path", "required": True, "schema": {"type": "string"}}]
_REST_INST = [
    *_REST_GROUP,
    {"name": "instance", "in": "path", "required": True, "schema": {"type": "string"}},
]
_PARTITIONS_EXAMPLE = {"partitions": [{"topic": "orders", "partition": 0}]}


def _seek_to(op_id: str, summary: str, description: str) -> dict[str, Any]:
    """The path item of a seek of named partitions to one end of their logs."""
    operation = _rest_op(
        op_id,
        summary,
        description,
        body='{"partitions": [...]}',
        ok="204",
        body_schema="partitions",
        example=_PARTITIONS_EXAMPLE,
    )
    return {"parameters": _REST_INST, "post": operation}


REST_PATHS: dict[str, Any] = {
    "/consumers/{group}": {
        "parameters": _REST_GROUP,
        "post": _rest_op(
            "v2CreateConsumer",
            "Create a consumer instance in the group",
            "Creates a stateful consumer in the group, answered with its `instance_id` and `base_uri` (on "
            "this broker). It lives until deleted or idle for consumer.instance.timeout.ms.",
            body='{"name", "format": binary|json, "auto.offset.reset", "auto.commit.enable", '
            '"fetch.min.bytes", "consumer.request.timeout.ms"}; an empty or null body means defaults',
            body_schema="create",
            example={"name": "reader-1", "format": "binary", "auto.offset.reset": "earliest"},
        ),
    },
    INSTANCE: {
        "parameters": _REST_INST,
        "delete": _rest_op(
            "v2DeleteConsumer",
            "Delete the instance (commits with auto commit)",
            "Removes the instance from its group (its partitions are reassigned); with auto commit on, "
            "commits what it returned first.",
            ok="204",
        ),
    },
    INSTANCE + "/subscription": {
        "parameters": _REST_INST,
        "post": _rest_op(
            "v2Subscribe",
            "Subscribe to topics or a pattern",
            "Subscribes the instance to a list of topics or a regular expression; the group assigns the "
            "partitions. Replaces an earlier subscription.",
            body='{"topics": [...]} or {"topic_pattern": "..."}',
            ok="204",
            body_schema="subscription",
            example={"topics": ["orders", "payments"]},
        ),
        "get": _rest_op(
            "v2GetSubscription",
            "The current subscription",
            'The topics the instance is subscribed to: `{"topics": [...]}`.',
        ),
        "delete": _rest_op(
            "v2Unsubscribe",
            "Unsubscribe",
            "Drops the subscription; the instance gets no partitions.",
            ok="204",
        ),
    },
    INSTANCE + "/assignments": {
        "parameters": _REST_INST,
        "post": _rest_op(
            "v2Assign",
            "Assign partitions by hand",
            "Reads exactly these partitions, outside the group's assignment (not mixable with a "
            "subscription).",
            body='{"partitions": [{"topic", "partition"}]}',
            ok="204",
            body_schema="partitions",
            example=_PARTITIONS_EXAMPLE,
        ),
        "get": _rest_op(
            "v2GetAssignments",
            "The partitions currently assigned",
            "The partitions the instance reads now, assigned by hand or by the group.",
        ),
    },
    INSTANCE + "/positions": {
        "parameters": _REST_INST,
        "post": _rest_op(
            "v2Seek",
            "Seek to offsets, or to the first record at or after timestamps",
            "Sets where the next records read start, per assigned partition: an offset, or the first offset "
            "whose timestamp is at or after a time.",
            body='{"offsets": [{"topic", "partition", "offset"}]} and/or '
            '{"timestamps": [{"topic", "partition", "timestamp"}]}',
            ok="204",
            body_schema="positions",
            example={"offsets": [{"topic": "orders", "partition": 0, "offset": 42}]},
        ),
    },
    INSTANCE + "/positions/beginning": _seek_to(
        "v2SeekToBeginning",
        "Seek to the beginning",
        "Moves the position of each partition to its log start offset (archived records included).",
    ),
    INSTANCE + "/positions/end": _seek_to(
        "v2SeekToEnd",
        "Seek to the end",
        "Moves the position of each partition to its high watermark: only new records are read.",
    ),
    INSTANCE + "/records": {
        "parameters": _REST_INST,
        "get": _rest_op(
            "v2ConsumeRecords",
            "Fetch records (long poll up to timeout ms); 422 names a record the format cannot render, "
            "whose position stays until a seek",
            "The next records of the instance's partitions in its format (the Accept header must match it), "
            "advancing its positions; waits up to `timeout` ms when there are none.",
            params=("timeout", "max_bytes"),
            reads=_REST_READ_STATUSES,
        ),
    },
    INSTANCE + "/offsets": {
        "parameters": _REST_INST,
        "post": _rest_op(
            "v2CommitOffsets",
            "Commit offsets (empty body: everything fetched); answers "
            '[{"topic", "partition", "consumed", "committed"}]',
            "Commits offsets for the group, shared with the Kafka protocol and native consumers; an empty "
            "body commits the positions of everything the instance returned.",
            body='{"offsets": [...]} or empty',
            body_schema="commit",
            example={"offsets": [{"topic": "orders", "partition": 0, "offset": 43}]},
        ),
        "get": _rest_op(
            "v2GetCommittedOffsets",
            "Committed offsets",
            "The group's committed offsets of the partitions the body names (a GET with a body, as REST "
            "Proxy has it).",
            body='{"partitions": [...]}',
            body_schema="partitions",
            example=_PARTITIONS_EXAMPLE,
        ),
    },
    INSTANCE + "/topics/{topic}": {
        "parameters": [
            *_REST_INST,
            {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}},
        ],
        "get": _rest_op(
            "v1ConsumeTopic",
            "v1 API: subscribe to the topic on the first read, then fetch its records",
            "REST Proxy v1's high-level consumer: the first read of a topic subscribes the instance to it.",
            params=("max_bytes",),
            reads=_REST_READ_STATUSES,
        ),
    },
}


_NATIVE_STATUSES = {
    "400": "40001 malformed JSON, or a body that is not a JSON object",
    "404": "40411 the group does not exist; 40410 the member is not in the group (rejoin)",
    "409": "40910 rebalance in progress / 40911 fenced: an unknown member, or a stale generation",
    "422": "42201 a missing field or one of the wrong type, or an invalid group id",
    "503": "50301 the broker is still opening its logs or restoring committed offsets; 50312 another "
    "broker coordinates the group (the body names it)",
}
_MEMBER = {"type": "string", "description": "The member id the join answered"}
_GENERATION = {"type": "integer", "description": "The generation the join answered"}
_NATIVE_PARTITION: dict[str, Any] = {
    "type": "object",
    "required": ["topic", "partition"],
    "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"}},
}
_NATIVE_BODIES: dict[str, tuple[dict[str, Any], Any]] = {
    "join": (
        {
            "type": "object",
            "properties": {
                "member_id": {**_MEMBER, "description": "Empty (a new member) or the member's id"},
                "topics": {"type": "array", "items": {"type": "string"}},
                "pattern": {"type": "string", "nullable": True, "description": "A topic regular expression"},
                "strategy": {
                    "type": "string",
                    "nullable": True,
                    "enum": [*sorted(STRATEGIES), None],
                    "description": "The partition assignment strategy (default group.default.assignor)",
                },
                "client_id": {"type": "string"},
                "session_timeout_ms": {
                    "type": "integer",
                    "minimum": MIN_SESSION_TIMEOUT_MS,
                    "maximum": MAX_SESSION_TIMEOUT_MS,
                    "description": "How long the member lives without a heartbeat (default 45000)",
                },
                "rebalance_timeout_ms": {
                    "type": "integer",
                    "description": "How long a rebalance waits for the other members to rejoin (default "
                    "300000): a join can take that long",
                },
            },
            "description": "A subscription: topics, a pattern, or both",
            "anyOf": [
                {"required": ["topics"], "properties": {"topics": {"minItems": 1}}},
                {"required": ["pattern"], "properties": {"pattern": {"type": "string"}}},
            ],
        },
        {"member_id": "", "topics": ["orders"], "session_timeout_ms": 45000},
    ),
    "sync": (
        {
            "type": "object",
            "required": ["member_id", "generation"],
            "properties": {"member_id": _MEMBER, "generation": _GENERATION},
        },
        {"member_id": "tierlog-client-6f1c", "generation": 3},
    ),
    "leave": (
        {"type": "object", "required": ["member_id"], "properties": {"member_id": _MEMBER}},
        {"member_id": "tierlog-client-6f1c"},
    ),
    "commit": (
        {
            "type": "object",
            "required": ["offsets"],
            "properties": {
                "member_id": {**_MEMBER, "description": "Empty: a commit outside the group's generations"},
                "generation": {**_GENERATION, "description": "-1 with an empty member_id"},
                "offsets": {
                    "type": "array",
                    "items": {
                        **_NATIVE_PARTITION,
                        "required": ["topic", "partition", "offset"],
                        "properties": {
                            **_NATIVE_PARTITION["properties"],
                            "offset": {"type": "integer"},
                            "metadata": {"type": "string", "nullable": True},
                        },
                    },
                },
            },
        },
        {
            "member_id": "tierlog-client-6f1c",
            "generation": 3,
            "offsets": [{"topic": "orders", "partition": 0, "offset": 43}],
        },
    ),
    "fetch": (
        {
            "type": "object",
            "properties": {"partitions": {"type": "array", "items": _NATIVE_PARTITION}},
            "description": "Without partitions: every committed offset of the group",
        },
        {"partitions": [{"topic": "orders", "partition": 0}]},
    ),
}
_NATIVE_BODIES["heartbeat"] = _NATIVE_BODIES["sync"]


def _native_op(
    op_id: str,
    summary: str,
    description: str,
    ok: str = "200",
    errors: tuple[str, ...] = ("400", "404", "409", "422", "503"),
    body: str | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {ok: {"description": "success" if ok == "200" else "done, no content"}}
    responses.update({status: {"description": _NATIVE_STATUSES[status]} for status in errors})
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "description": description,
        "tags": ["groups (native)"],
        "responses": responses,
    }
    if body is not None:
        schema, example = _NATIVE_BODIES[body]
        op["requestBody"] = {
            "description": f"The {body} request (JSON)",
            "required": body != "fetch",
            "content": {"application/json": {"schema": schema, "example": example}},
        }
    return op


_NATIVE_G = [{"name": "group", "in": "path", "required": True, "schema": {"type": "string"}}]
NATIVE_PATHS: dict[str, Any] = {
    BASE: {
        "get": _native_op(
            "nativeListGroups",
            "List consumer groups",
            "Every group of the cluster the caller may describe, with its state, from every broker.",
            errors=("503",),
        )
    },
    BASE + "/{group}": {
        "parameters": _NATIVE_G,
        "get": _native_op(
            "nativeDescribeGroup",
            "Describe a group with members, assignment and lag",
            "The group's state, generation, leader, members with their assignments, and lag per partition.",
            errors=("404", "422", "503"),
        ),
    },
    BASE + "/{group}/join": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeJoinGroup",
            "Join and wait for the next generation",
            "Kafka's JoinGroup: answers once the group's next generation forms (every member rejoined, or "
            "the rebalance timeout passed), with the member id, generation and this member's assignment.",
            body="join",
        ),
    },
    BASE + "/{group}/sync": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeSyncGroup",
            "The member's assignment for a generation",
            "Kafka's SyncGroup: the partitions assigned to the member in the generation.",
            body="sync",
        ),
    },
    BASE + "/{group}/heartbeat": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeHeartbeat",
            "Keep the member alive",
            "Kafka's Heartbeat: keeps the member in the group; 409 tells it to rejoin.",
            ok="204",
            body="heartbeat",
        ),
    },
    BASE + "/{group}/leave": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeLeaveGroup",
            "Leave the group",
            "Kafka's LeaveGroup: the member leaves at once and the group rebalances.",
            ok="204",
            body="leave",
        ),
    },
    BASE + "/{group}/offsets/commit": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeCommitOffsets",
            "Commit offsets (fenced)",
            "Kafka's OffsetCommit: refused (409) from a member or generation the group no longer has.",
            ok="204",
            body="commit",
        ),
    },
    BASE + "/{group}/offsets/fetch": {
        "parameters": _NATIVE_G,
        "post": _native_op(
            "nativeFetchOffsets",
            "Committed offsets (-1 where none)",
            "Kafka's OffsetFetch: the group's committed offsets, -1 for a partition without one.",
            body="fetch",
        ),
    },
}


def _v3_op(op_id: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "description": description,
        "tags": ["consumer groups (v3)"],
        "responses": {
            "200": {"description": "success"},
            "404": {"description": "unknown cluster or group"},
            "422": {"description": "42201 an invalid group id"},
        },
    }


_V3_CLUSTER = {"name": "cluster_id", "in": "path", "required": True, "schema": {"type": "string"}}
_V3_GROUP = {"name": "group", "in": "path", "required": True, "schema": {"type": "string"}}
_V3_BOTH = [_V3_CLUSTER, _V3_GROUP]
V3_PATHS: dict[str, Any] = {
    GROUPS: {
        "parameters": [_V3_CLUSTER],
        "get": _v3_op(
            "listConsumerGroups", "List consumer groups", "The groups of the cluster the caller may describe."
        ),
    },
    GROUPS + "/{group}": {
        "parameters": _V3_BOTH,
        "get": _v3_op(
            "getConsumerGroup",
            "Describe a consumer group",
            "The group's state, assignor, coordinator and links to its consumers and lags.",
        ),
    },
    GROUPS + "/{group}/consumers": {
        "parameters": _V3_BOTH,
        "get": _v3_op(
            "listGroupConsumers",
            "Members and assignments",
            "The group's members, their client ids and the partitions assigned to each.",
        ),
    },
    GROUPS + "/{group}/lags": {
        "parameters": _V3_BOTH,
        "get": _v3_op(
            "listGroupLags",
            "Lag per partition",
            "Per partition: the committed offset, the log end offset and their difference.",
        ),
    },
    GROUPS + "/{group}/lag-summary": {
        "parameters": _V3_BOTH,
        "get": _v3_op(
            "getGroupLagSummary",
            "Largest and total lag",
            "The partition with the largest lag, and the total over the group's partitions.",
        ),
    },
}
