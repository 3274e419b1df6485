"""Metadata (key 3): the live brokers' Kafka endpoints, the controller, and each topic's partitions with
their leader, leader epoch, replicas and in-sync replicas, from the broker's view of the cluster.

Topics a request names that do not exist are auto-created as Kafka does when the request allows it and
``auto.create.topics.enable`` is on. Every topic has its id (v10+), and a v12 request may name topics by id
(KIP-848's consumers resolve their assignment so); APIs that address topics by id in their bodies are
served only in versions that use names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.cluster.view import ClusterView
from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.security.model import Operation, ResourceType
from tierlog.wire.errors import TierlogError

__all__ = ["brokers_of", "split_endpoint"]

METADATA_KEY = 3


def split_endpoint(endpoint: str) -> tuple[str, int] | None:
    """``"host:port"`` as ``(host, port)``; None when it is not one."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def brokers_of(request: KafkaRequest, view: ClusterView) -> list[dict[str, Any]]:
    """The Metadata ``brokers`` entries: every live broker with a Kafka endpoint (this one: the
    listener's advertised address)."""
    own = request.broker.broker_id
    out = []
    for registration in view.brokers:
        if registration.broker_id == own:
            host, port = request.listener.advertised
        else:
            found = split_endpoint(registration.kafka or "")
            if found is None:
                continue
            host, port = found
        out.append({"node_id": registration.broker_id, "host": host, "port": port, "rack": registration.rack})
    return out


def topic_entry(view: ClusterView, name: str) -> dict[str, Any]:
    """One topic's Metadata entry from ``view`` (UNKNOWN_TOPIC_OR_PARTITION when it has no partitions)."""
    partitions = view.partitions.get(name)
    if partitions is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "partitions": []}
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": view.topic_uuid(name),
        "is_internal": name.startswith("__"),
        "partitions": [
            {
                "error_code": ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": p.partition,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
            }
            for p in partitions
        ],
    }


async def _auto_create(request: KafkaRequest, name: str, errors: dict[str, int]) -> None:
    """Create ``name`` as Kafka's auto-creation does, when the principal may (CREATE on the cluster or
    the topic); a refusal or failure lands in ``errors``."""
    broker = request.broker
    if name not in broker.cluster_view().partitions and not request.may_create_topic(name):
        errors[name] = ErrorCode.topic_authorization_failed
        return
    try:
        await broker.ensure_topic(name)
    except TierlogError as err:
        errors[name] = err.kafka_error().code


_TOPIC_ID_VERSION = 12  # the first Metadata version that looks topics up by id


@api(METADATA_KEY, "Metadata", 0, 12)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    broker = request.broker
    broker.check_ready()
    requested = body.topics
    if request.version == 0 and not requested:  # v0 has no null: an empty list asks for every topic
        requested = None
    errors: dict[str, int] = {}
    unknown_ids = []
    nameless = 0  # topics asked for by id before v12 (Kafka refuses them: names are not nullable there)
    if requested is not None:
        names = [t.name for t in requested if t.name is not None]
        for t in requested:
            topic_id = getattr(t, "topic_id", None)
            if t.name is None and request.version < _TOPIC_ID_VERSION:
                nameless += 1
            elif t.name is None and topic_id is not None:
                found = broker.cluster_view().topic_by_id(topic_id)
                if found is None or not request.granted(Operation.DESCRIBE, ResourceType.TOPIC, found):
                    unknown_ids.append(topic_id)  # Kafka answers an unauthorized id as unknown too
                else:
                    names.append(found)
        for name in names:
            if not request.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                errors[name] = ErrorCode.topic_authorization_failed
        allow = getattr(body, "allow_auto_topic_creation", True)
        if allow and broker.settings.auto_create_topics_enable:
            for name in names:
                if name not in broker.local_topics and name not in errors:
                    await _auto_create(request, name, errors)
    view = broker.cluster_view()
    if requested is None:  # every topic the principal may describe
        names = [n for n in view.partitions if request.granted(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    topics = []
    for name in names:
        if errors.get(name) == ErrorCode.topic_authorization_failed or (
            name in errors and name not in view.partitions
        ):
            topics.append({"error_code": errors[name], "name": name, "partitions": []})
        else:
            topics.append(topic_entry(view, name))
    topics.extend(
        {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": topic_id, "partitions": []}
        for topic_id in unknown_ids
    )
    invalid = {"error_code": ErrorCode.invalid_request, "name": "", "partitions": []}
    topics.extend(dict(invalid) for _ in range(nameless))
    return {
        "throttle_time": 0,
        "brokers": brokers_of(request, view),
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
    }
