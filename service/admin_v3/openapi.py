"""OpenAPI description of the v3 admin routes (:mod:`tierlog.service.admin_v3`)."""

from __future__ import annotations

from typing import Any

from tierlog.service.topics.configs import TOPIC_CONFIGS
from tierlog.service.topics.data_dir import MAX_TOPIC_NAME, TOPIC_NAME_PATTERN
from tierlog.service.topics.rules import NOT_INTERNAL_TOPIC_PATTERN

__all__ = ["OPENAPI_COMPONENTS", "OPENAPI_PATHS"]

_REF_ERROR = {"$ref": "#/components/schemas/Error"}
_RELATED = {"type": "object", "properties": {"related": {"type": "string", "format": "uri"}}}
_NULLABLE_RELATED = {**_RELATED, "nullable": True}
_META = {
    "type": "object",
    "properties": {"self": {"type": "string", "format": "uri"}, "resource_name": {"type": "string"}},
}
_LIST_META = {
    "type": "object",
    "properties": {"self": {"type": "string", "format": "uri"}, "next": {"type": "string", "nullable": True}},
}


def _resource(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"kind": {"type": "string", "enum": [kind]}, "metadata": _META, **fields},
    }


def _list_of(kind: str, item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": [kind]},
            "metadata": _LIST_META,
            "data": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
        },
    }


_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_NULLABLE_BOOL = {"type": "boolean", "nullable": True, "description": "null means false"}
_TOPIC_NAME = {"type": "string", "pattern": TOPIC_NAME_PATTERN, "maxLength": MAX_TOPIC_NAME}
_CONFIG_NAME = {
    "type": "string",
    "enum": sorted(TOPIC_CONFIGS),
    "description": "A topic config's name (Kafka's)",
}

OPENAPI_COMPONENTS: dict[str, Any] = {
    "schemas": {
        "KafkaCluster": _resource(
            "KafkaCluster",
            {
                "cluster_id": _STR,
                "remote_uri": {**_STR, "description": "tierlog extension: where sealed segments go"},
                "remote_store": {
                    "type": "object",
                    "description": "tierlog extension: whether the object store is usable, else why not",
                    "properties": {
                        "store": _STR,
                        "usable": _BOOL,
                        "problem": {"type": "string", "nullable": True},
                        "uploads_failing": _BOOL,
                    },
                },
                "controller": {**_NULLABLE_RELATED, "description": "null while no controller is elected"},
                "brokers": _RELATED,
                "topics": _RELATED,
            },
        ),
        "KafkaBroker": _resource(
            "KafkaBroker",
            {
                "cluster_id": _STR,
                "broker_id": _INT,
                "host": _STR,
                "port": _INT,
                "rack": {"type": "string", "nullable": True},
            },
        ),
        "KafkaTopic": _resource(
            "KafkaTopic",
            {
                "cluster_id": _STR,
                "topic_name": _STR,
                "topic_id": _STR,
                "is_internal": _BOOL,
                "replication_factor": _INT,
                "partitions_count": _INT,
                "partitions": _RELATED,
                "configs": _RELATED,
                "authorized_operations": {"type": "array", "items": _STR},
            },
        ),
        "KafkaTopicConfig": _resource(
            "KafkaTopicConfig",
            {
                "cluster_id": _STR,
                "topic_name": _STR,
                "name": _STR,
                "value": _STR,
                "is_default": _BOOL,
                "is_read_only": _BOOL,
                "is_sensitive": _BOOL,
                "source": {
                    "type": "string",
                    "enum": ["DYNAMIC_TOPIC_CONFIG", "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"],
                },
                "synonyms": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": _STR, "value": _STR, "source": _STR}},
                },
            },
        ),
        "KafkaPartition": _resource(
            "KafkaPartition",
            {
                "cluster_id": _STR,
                "topic_name": _STR,
                "partition_id": _INT,
                "leader": {
                    **_NULLABLE_RELATED,
                    "description": "the leader's replica; null when none is live",
                },
                "replicas": _RELATED,
                "tiered_storage": {
                    "type": "object",
                    "description": "tierlog extension, on GET of one partition when this broker leads it",
                },
            },
        ),
        "KafkaReplica": _resource(
            "KafkaReplica",
            {
                "cluster_id": _STR,
                "topic_name": _STR,
                "partition_id": _INT,
                "broker_id": _INT,
                "is_leader": _BOOL,
                "is_in_sync": _BOOL,
                "broker": _RELATED,
            },
        ),
        "KafkaClusterList": _list_of("KafkaClusterList", "KafkaCluster"),
        "KafkaBrokerList": _list_of("KafkaBrokerList", "KafkaBroker"),
        "KafkaTopicList": _list_of("KafkaTopicList", "KafkaTopic"),
        "KafkaTopicConfigList": _list_of("KafkaTopicConfigList", "KafkaTopicConfig"),
        "KafkaPartitionList": _list_of("KafkaPartitionList", "KafkaPartition"),
        "KafkaReplicaList": _list_of("KafkaReplicaList", "KafkaReplica"),
        "CreateTopicRequest": {
            "type": "object",
            "required": ["topic_name"],
            "properties": {
                "topic_name": {
                    **_TOPIC_NAME,
                    "pattern": NOT_INTERNAL_TOPIC_PATTERN,
                    "description": "Kafka's rule: 1-249 of [a-zA-Z0-9._-], not . or ..; '__*' is reserved",
                },
                "partitions_count": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10000,
                    "nullable": True,
                    "description": "default num.partitions",
                },
                "replication_factor": {
                    "type": "integer",
                    "minimum": -1,
                    "maximum": 32767,
                    "nullable": True,
                    "description": "at most the live brokers; -1 or null: default.replication.factor",
                },
                "configs": {
                    "type": "array",
                    "nullable": True,
                    "description": "Topic configs by Kafka's names, each value checked by its config's rule",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {**_STR, "description": "A topic config's name (Kafka's); unknown: 400"},
                            "value": {**_STR, "nullable": True, "description": "null: the default"},
                        },
                    },
                },
                "validate_only": _NULLABLE_BOOL,
            },
        },
        "UpdateTopicRequest": {
            "type": "object",
            "required": ["partitions_count"],
            "properties": {"partitions_count": {"type": "integer", "minimum": 1, "maximum": 10000}},
        },
        "UpdateConfigRequest": {"type": "object", "required": ["value"], "properties": {"value": _STR}},
        "AlterConfigBatchRequest": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": _CONFIG_NAME,
                            "value": {**_STR, "nullable": True},
                            "operation": {
                                "type": "string",
                                "nullable": True,
                                "enum": ["SET", "DELETE", None],
                                "default": "SET",
                            },
                        },
                        "description": "SET (the default) needs a value; DELETE takes none",
                        "anyOf": [
                            {
                                "required": ["value"],
                                "properties": {
                                    "value": _STR,
                                    "operation": {"nullable": True, "enum": ["SET", None]},
                                },
                            },
                            {"required": ["operation"], "properties": {"operation": {"enum": ["DELETE"]}}},
                        ],
                    },
                },
                "validate_only": _NULLABLE_BOOL,
            },
        },
    }
}

_SCHEMA_DESCRIPTIONS = {
    "KafkaCluster": "The cluster this broker belongs to, with links to its brokers, topics and controller",
    "KafkaBroker": "A live broker of the cluster: its id, advertised host and port, and rack",
    "KafkaTopic": "A topic: its id, partition count, replication factor and links to partitions and configs",
    "KafkaTopicConfig": "One topic config: its value and where it comes from (the topic, a broker default "
    "or the built-in one)",
    "KafkaPartition": "A partition: its leader and replicas, and on its leader the tiering state",
    "KafkaReplica": "A replica of a partition on one broker: whether it leads and whether it is in sync",
    "KafkaClusterList": "The clusters this broker knows: its own",
    "KafkaBrokerList": "The live brokers of the cluster",
    "KafkaTopicList": "The topics the caller may describe",
    "KafkaTopicConfigList": "Every config of a topic, set or default",
    "KafkaPartitionList": "The partitions of a topic",
    "KafkaReplicaList": "The replicas of a partition",
    "CreateTopicRequest": "A topic to create: its name, and optionally its partitions, replication factor "
    "and configs (Kafka's names)",
    "UpdateTopicRequest": "The new partition count of a topic (only growth: Kafka cannot shrink a topic)",
    "UpdateConfigRequest": "The new value of one topic config, checked by the config's own rule",
    "AlterConfigBatchRequest": "Several config changes applied together, or none when one is invalid",
}
for _name, _text in _SCHEMA_DESCRIPTIONS.items():
    OPENAPI_COMPONENTS["schemas"][_name]["description"] = _text

_BODY_EXAMPLES: dict[str, Any] = {
    "CreateTopicRequest": {
        "topic_name": "orders",
        "partitions_count": 3,
        "replication_factor": 1,
        "configs": [
            {"name": "retention.ms", "value": "604800000"},
            {"name": "remote.storage.enable", "value": "true"},
        ],
    },
    "UpdateTopicRequest": {"partitions_count": 6},
    "UpdateConfigRequest": {"value": "86400000"},
    "AlterConfigBatchRequest": {
        "data": [
            {"name": "retention.ms", "value": "86400000"},
            {"name": "segment.bytes", "operation": "DELETE"},
        ]
    },
}
_BODY_DESCRIPTIONS = {
    "CreateTopicRequest": "The topic; unset fields take the broker's defaults (`num.partitions`, "
    "`default.replication.factor`, the `log.*` settings)",
    "UpdateTopicRequest": "The partition count to grow to",
    "UpdateConfigRequest": "The config's new value, as text",
    "AlterConfigBatchRequest": "The changes: SET a value, or DELETE to go back to the default",
}

_DESCRIPTIONS = {
    "listClusters": "The one cluster this broker is a member of (Confluent's v3 shape: a list of one), with "
    "the object store's state as a tierlog extension.",
    "getCluster": "The cluster: its id, the controller (null while none is elected), links to brokers and "
    "topics, and where sealed segments go (`remote_uri`).",
    "listBrokers": "Every live broker of the cluster, from this broker's view of the cluster metadata.",
    "getBroker": "One live broker: its advertised host and port and its rack. 404 for an id not registered.",
    "listTopics": "Every topic the caller may describe, internal topics included (`is_internal`).",
    "createTopic": "Creates a topic with Kafka's name rule and config names; the answer comes once the "
    "partitions this broker leads are open. `validate_only` checks the request and creates nothing "
    "(200).",
    "getTopic": "The topic's id, partition count, replication factor and the operations the caller may do.",
    "updatePartitionCount": "Grows the topic to `partitions_count` partitions; existing partitions keep "
    "their data and keys may map to other partitions afterwards, as in Kafka. Shrinking is refused (400).",
    "deleteTopic": "Deletes the topic and its data on every broker. Internal topics "
    "(`__consumer_offsets`) cannot be deleted (400).",
    "listTopicConfigs": "Every config of the topic: set on the topic, a broker default, or the built-in one.",
    "alterTopicConfigs": "Sets or resets several configs at once: every change is checked first, and none "
    "is applied when one is invalid.",
    "getTopicConfig": "One config of the topic, its value and its source. 404 for a name that is no config.",
    "updateTopicConfig": "Sets one config of the topic, checked by the config's rule and the combination "
    "rules (`local.retention.ms` at most `retention.ms`, ...).",
    "resetTopicConfig": "Removes the topic's own value of a config: the broker default applies again.",
    "listPartitions": "The topic's partitions with their leaders and replicas.",
    "getPartition": "One partition; on the broker that leads it, also its tiering state (`tiered_storage`).",
    "listReplicas": "The replicas of one partition, which leads and which are in sync.",
    "getReplica": "The replica of one partition on one broker. 404 when that broker holds no replica.",
}

_ERRORS = {
    "400": "Bad request: malformed body (40001), or invalid name, config, count, or topic exists (40002)",
    "404": "Unknown cluster (404), topic (40401), partition (40402), config or broker (404)",
    "415": "Body is not JSON (41501)",
    "503": "The broker is still opening its logs (50301)",
    "507": "The disk is full (50701, retriable once space is freed): nothing was changed",
}


def _op(
    op_id: str,
    summary: str,
    ok: str,
    schema: str | None = None,
    *,
    body: str | None = None,
    errors: tuple[str, ...] = ("404", "503"),
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if schema is None:
        responses[ok] = {"description": "No content"}
    else:
        content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
        responses[ok] = {"description": summary, "content": content}
    for status, text in (extra or {}).items():
        responses[status] = {"description": text}
    for status in errors:
        responses[status] = {
            "description": _ERRORS[status],
            "content": {"application/json": {"schema": _REF_ERROR}},
        }
    operation: dict[str, Any] = {
        "tags": ["Admin (v3)"],
        "operationId": op_id,
        "summary": summary,
        "description": _DESCRIPTIONS[op_id],
        "responses": responses,
    }
    if body is not None:
        ref = {"$ref": f"#/components/schemas/{body}"}
        operation["requestBody"] = {
            "required": True,
            "description": _BODY_DESCRIPTIONS[body],
            "content": {"application/json": {"schema": ref, "example": _BODY_EXAMPLES[body]}},
        }
    return operation


_WRITE = ("400", "404", "415", "503", "507")
_C = "/v3/clusters/{cluster_id}"
_T = _C + "/topics/{topic_name}"
_P = _T + "/partitions/{partition_id}"

OPENAPI_PATHS: dict[str, Any] = {
    "/v3/clusters": {
        "get": _op(
            "listClusters", "List clusters (this broker's one)", "200", "KafkaClusterList", errors=("503",)
        )
    },
    _C: {"get": _op("getCluster", "Describe the cluster", "200", "KafkaCluster")},
    _C + "/brokers": {"get": _op("listBrokers", "List brokers", "200", "KafkaBrokerList")},
    _C + "/brokers/{broker_id}": {"get": _op("getBroker", "Describe a broker", "200", "KafkaBroker")},
    _C + "/topics": {
        "get": _op("listTopics", "List topics", "200", "KafkaTopicList"),
        "post": _op(
            "createTopic",
            "Create a topic",
            "201",
            "KafkaTopic",
            body="CreateTopicRequest",
            errors=_WRITE,
            extra={"200": "validate_only: the request is valid, nothing was created"},
        ),
    },
    _T: {
        "get": _op("getTopic", "Describe a topic", "200", "KafkaTopic"),
        "patch": _op(
            "updatePartitionCount",
            "Increase the partition count",
            "200",
            "KafkaTopic",
            body="UpdateTopicRequest",
            errors=_WRITE,
        ),
        "delete": _op(
            "deleteTopic",
            "Delete a topic and its data (400 for an internal topic)",
            "204",
            errors=("400", "404", "503"),
        ),
    },
    _T + "/configs": {
        "get": _op("listTopicConfigs", "List every config of a topic", "200", "KafkaTopicConfigList")
    },
    _T + "/configs:alter": {
        "post": _op(
            "alterTopicConfigs",
            "Set or reset several configs at once (all or nothing)",
            "204",
            body="AlterConfigBatchRequest",
            errors=_WRITE,
        ),
    },
    _T + "/configs/{name}": {
        "get": _op("getTopicConfig", "Describe one config", "200", "KafkaTopicConfig"),
        "put": _op("updateTopicConfig", "Set one config", "204", body="UpdateConfigRequest", errors=_WRITE),
        "delete": _op(
            "resetTopicConfig", "Reset one config to its default", "204", errors=("400", "404", "503", "507")
        ),
    },
    _T + "/partitions": {"get": _op("listPartitions", "List partitions", "200", "KafkaPartitionList")},
    _P: {"get": _op("getPartition", "Describe a partition", "200", "KafkaPartition")},
    _P + "/replicas": {"get": _op("listReplicas", "List replicas of a partition", "200", "KafkaReplicaList")},
    _P + "/replicas/{broker_id}": {"get": _op("getReplica", "Describe a replica", "200", "KafkaReplica")},
}
