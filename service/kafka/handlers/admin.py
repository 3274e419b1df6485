"""The admin APIs: CreateTopics (19), DeleteTopics (20), DescribeConfigs (32), AlterConfigs (33),
DescribeLogDirs (35), CreatePartitions (37), IncrementalAlterConfigs (44) and DescribeCluster (60).

Each calls the broker methods the v3 admin API calls (``create_topic``, ``delete_topic``,
``add_partitions``, ``alter_topic_configs``, ``cluster_view``) and answers errors per topic or resource
(the broker's errors by their Kafka code; :mod:`..topic_checks` first tells apart the cases Kafka gives
their own codes). Topics are addressed by name only (tierlog assigns no topic ids: answers carry the zero
UUID). Broker configs are read-only: tierlog's settings are static.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.configs import (
    ConfigOp,
    ResourceType,
    broker_config_entries,
    incremental_updates,
    topic_config_entries,
)
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.metadata import brokers_of
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.kafka.topic_checks import Refusal, check_create, check_partition_growth
from tierlog.service.security import model as acl
from tierlog.service.topics.broker import Broker
from tierlog.service.topics.configs import effective_configs, validate_overrides
from tierlog.wire.errors import InvalidConfigError, InvalidRequestError, TierlogError

__all__ = ["existing_topics"]

CREATE_TOPICS_KEY = 19
DELETE_TOPICS_KEY = 20
DESCRIBE_CONFIGS_KEY = 32
ALTER_CONFIGS_KEY = 33
DESCRIBE_LOG_DIRS_KEY = 35
CREATE_PARTITIONS_KEY = 37
INCREMENTAL_ALTER_CONFIGS_KEY = 44
DESCRIBE_CLUSTER_KEY = 60

_BROKERS_ENDPOINT = 1  # DescribeCluster's endpoint_type: 1 brokers, 2 controllers


def existing_topics(broker: Broker) -> set[str]:
    """The names of every topic of the cluster (the cluster view's and the ones this broker holds)."""
    return set(broker.cluster_view().partitions) | set(broker.local_topics)


def _error(err: TierlogError) -> tuple[int, str]:
    return err.kafka_error().code, err.message


def _duplicates(names: Sequence[str]) -> set[str]:
    return {n for n in names if names.count(n) > 1}


# ---- CreateTopics ---------------------------------------------------------------------------------------


@api(CREATE_TOPICS_KEY, "CreateTopics", 2, 7)
async def create_topics(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    names = [t.name for t in body.topics]
    duplicates = _duplicates(names)
    results = []
    for topic in body.topics:
        if topic.name in duplicates:
            message = f"Create topics request contains multiple entries for the topic {topic.name}"
            results.append(
                {"name": topic.name, "error_code": ErrorCode.invalid_request, "error_message": message}
            )
            continue
        results.append(await _create_one(request, broker, topic, bool(body.validate_only)))
    return {"throttle_time": 0, "topics": results}


async def _create_one(
    request: KafkaRequest, broker: Broker, topic: Any, validate_only: bool
) -> dict[str, Any]:
    name = topic.name
    if not request.may_create_topic(name):
        return {"name": name, **_refusal(request, acl.Operation.CREATE, name, counted=True)}
    try:
        broker.check_ready()
        view = broker.cluster_view()
        checked = check_create(
            name,
            topic.num_partitions,
            topic.replication_factor,
            [(a.partition_index, list(a.broker_ids)) for a in topic.assignments],
            existing=existing_topics(broker),
            live_brokers=[b.broker_id for b in view.brokers],
            single_broker=len(view.brokers) == 1,
        )
        if isinstance(checked, Refusal):
            return {"name": name, "error_code": checked.code, "error_message": checked.message}
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        if validate_only:
            count = broker.validate_create_topic(name, checked.partitions, configs)
            overrides = validate_overrides(broker.settings.topic_defaults, configs)
            values = effective_configs(broker.settings.topic_defaults, overrides)
        else:
            created = await broker.create_topic(
                name, checked.partitions, configs, replication_factor=checked.replication_factor
            )
            count, overrides, values = created.partition_count, created.overrides, created.configs()
    except TierlogError as err:
        code, message = _error(err)
        if isinstance(err, InvalidConfigError) and name in existing_topics(broker):
            code = ErrorCode.topic_already_exists.value  # created by another request meanwhile
        return {"name": name, "error_code": code, "error_message": message}
    return {
        "name": name,
        "error_code": ErrorCode.none,
        "error_message": None,
        "topic_id": broker.cluster_view().topic_uuid(name),  # the zero UUID for validate_only
        "num_partitions": count,
        "replication_factor": _replication(broker, name, checked.replication_factor),
        "configs": topic_config_entries(broker.settings, overrides, values),
    }


def _replication(broker: Broker, name: str, asked: int | None) -> int:
    """The replication factor of topic ``name`` (created: from the cluster view; else what a create would
    give it: ``asked`` or the default)."""
    partitions = broker.cluster_view().partitions.get(name)
    if partitions:
        return len(partitions[0].replicas)
    return asked or broker.settings.default_replication_factor


# ---- DeleteTopics ---------------------------------------------------------------------------------------


@api(DELETE_TOPICS_KEY, "DeleteTopics", 1, 5)
async def delete_topics(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    results = []
    for name in dict.fromkeys(body.topic_names):
        if not request.allowed(acl.Operation.DELETE, acl.ResourceType.TOPIC, name):
            results.append({"name": name, **_refusal(request, acl.Operation.DELETE, name, counted=True)})
            continue
        try:
            if broker.topic(name).is_internal:
                message = f"Topic {name} is an internal topic and cannot be deleted."
                results.append(
                    {"name": name, "error_code": ErrorCode.policy_violation, "error_message": message}
                )
                continue
            await broker.delete_topic(name)
        except TierlogError as err:
            code, message = _error(err)
            results.append({"name": name, "error_code": code, "error_message": message})
            continue
        results.append({"name": name, "error_code": ErrorCode.none, "error_message": None})
    return {"throttle_time": 0, "responses": results}


# ---- CreatePartitions -----------------------------------------------------------------------------------


@api(CREATE_PARTITIONS_KEY, "CreatePartitions", 0, 3)
async def create_partitions(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    duplicates = _duplicates([t.name for t in body.topics])
    results = []
    for topic in body.topics:
        name = topic.name
        if name in duplicates:
            message = f"Duplicate topic in request: {name}"
            results.append({"name": name, "error_code": ErrorCode.invalid_request, "error_message": message})
            continue
        if not request.allowed(acl.Operation.ALTER, acl.ResourceType.TOPIC, name):
            results.append({"name": name, **_refusal(request, acl.Operation.ALTER, name, counted=True)})
            continue
        try:
            current = broker.topic(name).partition_count
            assignments = (
                None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
            )
            refused = check_partition_growth(
                name,
                current,
                topic.count,
                assignments,
                live_brokers=[b.broker_id for b in broker.cluster_view().brokers],
                single_broker=len(broker.cluster_view().brokers) == 1,
            )
            if refused is not None:
                results.append({"name": name, "error_code": refused.code, "error_message": refused.message})
                continue
            if not body.validate_only:
                await broker.add_partitions(name, topic.count)
        except TierlogError as err:
            code, message = _error(err)
            results.append({"name": name, "error_code": code, "error_message": message})
            continue
        results.append({"name": name, "error_code": ErrorCode.none, "error_message": None})
    return {"throttle_time": 0, "results": results}


# ---- DescribeConfigs ------------------------------------------------------------------------------------


def _resource_answer(resource: Any, code: int | ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }


def _refusal(
    request: KafkaRequest, operation: acl.Operation, topic: str, *, counted: bool = False
) -> dict[str, Any]:
    """The ``error_code``/``error_message`` of a topic the principal may not ``operation`` (already
    counted by :meth:`KafkaRequest.allowed` when ``counted``)."""
    if not counted:
        request.count_denied(acl.ResourceType.TOPIC)
    return {
        "error_code": ErrorCode.topic_authorization_failed,
        "error_message": f"Not authorized to {operation.kafka_name} Topic '{topic}'",
    }


def _config_refusal(request: KafkaRequest, resource: Any, operation: acl.Operation) -> dict[str, Any] | None:
    """The answer to a config resource the principal may not ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS on the topic, or on the cluster for a broker); None when allowed."""
    if resource.resource_type == ResourceType.TOPIC:
        if request.allowed(operation, acl.ResourceType.TOPIC, resource.resource_name):
            return None
        return _resource_answer(
            resource, ErrorCode.topic_authorization_failed, f"Not authorized to {operation.kafka_name} Topic"
        )
    if request.allowed(operation, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME):
        return None
    return _resource_answer(
        resource, ErrorCode.cluster_authorization_failed, f"Not authorized to {operation.kafka_name} Cluster"
    )


def _cluster_refusal(request: KafkaRequest) -> bool:
    """Whether DESCRIBE on the cluster is refused (DescribeCluster, DescribeLogDirs)."""
    return not request.allowed(acl.Operation.DESCRIBE, acl.ResourceType.CLUSTER, acl.CLUSTER_NAME)


def _broker_refusal(request: KafkaRequest, resource: Any) -> str | None:
    """Why a BROKER resource is not this broker's (None when it is: its id, or empty for the default)."""
    own = request.broker.broker_id
    if resource.resource_name in ("", str(own)):
        return None
    return f"Unexpected broker id, expected {own} or empty string, but received {resource.resource_name}"


@api(DESCRIBE_CONFIGS_KEY, "DescribeConfigs", 1, 4)
async def describe_configs(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    with_synonyms = bool(getattr(body, "include_synonyms", False))
    with_docs = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        keys = resource.configuration_keys
        answer = _resource_answer(resource, ErrorCode.none, None)
        refused_access = _config_refusal(request, resource, acl.Operation.DESCRIBE_CONFIGS)
        if refused_access is not None:
            results.append(refused_access)
            continue
        try:
            if resource.resource_type == ResourceType.TOPIC:
                topic = broker.topic(resource.resource_name)
                entries = topic_config_entries(broker.settings, topic.overrides, topic.configs(), keys)
            elif resource.resource_type == ResourceType.BROKER:
                refused = _broker_refusal(request, resource)
                if refused is not None:
                    results.append(_resource_answer(resource, ErrorCode.invalid_request, refused))
                    continue
                host, port = request.listener.advertised
                listener = f"{request.listener.security_protocol}://{host}:{port}"
                entries = broker_config_entries(broker.settings, broker.broker_id, keys, listener=listener)
            else:
                message = f"Unsupported resource type {resource.resource_type}"
                results.append(_resource_answer(resource, ErrorCode.invalid_request, message))
                continue
        except TierlogError as err:
            results.append(_resource_answer(resource, *_error(err)))
            continue
        for entry in entries:
            if not with_synonyms:
                entry["synonyms"] = []
            if not with_docs:
                entry["documentation"] = None
        results.append({**answer, "configs": entries})
    return {"throttle_time": 0, "results": results}


# ---- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------------------


async def _alter(
    request: KafkaRequest, resources: Sequence[Any], validate_only: bool, incremental: bool
) -> list[dict[str, Any]]:
    broker = request.broker
    answers = []
    for resource in resources:
        refused_access = _config_refusal(request, resource, acl.Operation.ALTER_CONFIGS)
        if refused_access is not None:
            answers.append(refused_access)
            continue
        try:
            if resource.resource_type == ResourceType.BROKER:
                message = _broker_refusal(request, resource) or (
                    "tierlog's broker configs are static: set them in the broker's settings and restart it"
                )
                answers.append(_resource_answer(resource, ErrorCode.invalid_request, message))
                continue
            if resource.resource_type != ResourceType.TOPIC:
                message = f"Unsupported resource type {resource.resource_type}"
                answers.append(_resource_answer(resource, ErrorCode.invalid_request, message))
                continue
            topic = broker.topic(resource.resource_name)
            if incremental:
                ops = [ConfigOp(c.name, c.config_operation, c.value) for c in resource.configs]
                updates = incremental_updates(topic.configs(), ops)
            else:
                updates = _replacement(topic.overrides, resource.configs)
            await broker.alter_topic_configs(topic.name, updates, validate_only=validate_only)
        except TierlogError as err:
            answers.append(_resource_answer(resource, *_error(err)))
            continue
        answers.append(_resource_answer(resource, ErrorCode.none, None))
    return answers


def _replacement(overrides: Mapping[str, str], configs: Sequence[Any]) -> dict[str, str | None]:
    """AlterConfigs replaces a topic's overrides whole: the given ones set, every other one reset.
    Raises InvalidRequestError for a name given twice."""
    names = [c.name for c in configs]
    duplicates = sorted(_duplicates(names))
    if duplicates:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicates)}")
    updates: dict[str, str | None] = {name: None for name in overrides}
    for config in configs:
        updates[config.name] = config.value
    return updates


@api(ALTER_CONFIGS_KEY, "AlterConfigs", 0, 2)
async def alter_configs(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    answers = await _alter(request, body.resources, bool(body.validate_only), incremental=False)
    return {"throttle_time": 0, "responses": answers}


@api(INCREMENTAL_ALTER_CONFIGS_KEY, "IncrementalAlterConfigs", 0, 1)
async def incremental_alter_configs(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    answers = await _alter(request, body.resources, bool(body.validate_only), incremental=True)
    return {"throttle_time": 0, "responses": answers}


# ---- DescribeCluster and DescribeLogDirs ----------------------------------------------------------------


@api(DESCRIBE_CLUSTER_KEY, "DescribeCluster", 0, 2)
async def describe_cluster(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    broker.check_ready()
    endpoint_type = getattr(body, "endpoint_type", _BROKERS_ENDPOINT)
    if _cluster_refusal(request):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": "Not authorized to Describe Cluster",
            "endpoint_type": endpoint_type,
        }
    if endpoint_type != _BROKERS_ENDPOINT:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "tierlog's brokers describe brokers only: it has no separate controllers",
            "endpoint_type": endpoint_type,
        }
    view = broker.cluster_view()
    brokers = [
        {
            "broker_id": b["node_id"],
            "host": b["host"],
            "port": b["port"],
            "rack": b["rack"],
            "is_fenced": False,
        }
        for b in brokers_of(request, view)
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "endpoint_type": _BROKERS_ENDPOINT,
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "brokers": brokers,
    }


@api(DESCRIBE_LOG_DIRS_KEY, "DescribeLogDirs", 1, 4)
async def describe_log_dirs(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    broker.check_ready()
    if _cluster_refusal(request):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results": []}
    held = broker.local_topics
    if body.topics is None:
        wanted: dict[str, set[int] | None] = {name: None for name in held}
    else:
        wanted = {t.topic: set(t.partitions) for t in body.topics}
    topics = []
    for name, indexes in sorted(wanted.items()):
        topic = held.get(name)
        if topic is None:
            continue
        partitions = [
            {
                "partition_index": p.index,
                "partition_size": p.size_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
            for p in topic.partitions
            if (indexes is None or p.index in indexes) and not p.closed
        ]
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    usage = await asyncio.to_thread(shutil.disk_usage, broker.data_dir)
    result = {
        "error_code": ErrorCode.none,
        "log_dir": str(broker.data_dir),
        "topics": topics,
        "total_bytes": usage.total,
        "usable_bytes": usage.free,
    }
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}
