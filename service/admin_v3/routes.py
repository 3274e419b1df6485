"""Confluent REST v3 admin routes: clusters, brokers, topics, topic configs, partitions and replicas.

Shapes follow Confluent's v3 API: every resource has ``kind``, ``metadata.self`` (built from the
broker's advertised URL) and ``metadata.resource_name``; lists are ``{"kind": ..., "metadata": {...},
"data": [...]}``. Errors are Confluent's: an unknown cluster is 404 (error_code 404), an unknown topic
404 (40401), an unknown partition 404 (40402), a bad body 400 (40001), and an invalid name, config,
partition count or an already existing topic 400 (40002). Handlers parse, call one broker method and
serialise; the OpenAPI description lives in :mod:`tierlog.service.admin_v3.openapi`.

Brokers, the controller, partition leaders, replicas and the ISR come from the broker's cluster view
(``Broker.cluster_view``), so every broker of a cluster answers the same; a single broker is a
cluster of one. A partition without a live leader has ``"leader": null``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from tierlog.service.admin_v3.openapi import OPENAPI_PATHS
from tierlog.service.security import authz
from tierlog.service.security.authz import authorize_create
from tierlog.service.security.model import Operation, ResourceType
from tierlog.service.security.redact import without_userinfo
from tierlog.service.topics.broker import Broker, Topic
from tierlog.service.topics.configs import TOPIC_CONFIGS
from tierlog.service.web.keys import BROKER, SETTINGS
from tierlog.wire.errors import (
    BadRequestError,
    InvalidConfigError,
    LeaderNotAvailableError,
    NotFoundError,
    NotLeaderOrFollowerError,
    UnknownPartitionError,
    UnsupportedMediaTypeError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.model import BrokerRegistration
    from tierlog.service.cluster.view import ClusterView, PartitionView

__all__ = ["OPENAPI_PATHS", "setup_routes"]

BASE = "/v3/clusters"


class _Urls:
    """Builds ``metadata.self`` and ``related`` links for one cluster."""

    def __init__(self, broker: Broker) -> None:
        self.cluster_id = broker.cluster_id
        self.root = f"{broker.advertised_url}{BASE}/{broker.cluster_id}"

    def meta(self, path: str, crn: str) -> dict[str, Any]:
        return {"self": self.root + path, "resource_name": f"crn:///kafka={self.cluster_id}{crn}"}

    def related(self, path: str) -> dict[str, str]:
        return {"related": self.root + path}


def _cluster(broker: Broker) -> dict[str, Any]:
    urls = _Urls(broker)
    controller = broker.cluster_view().controller_id
    return {
        "kind": "KafkaCluster",
        "metadata": urls.meta("", ""),
        "cluster_id": broker.cluster_id,
        "remote_uri": without_userinfo(str(broker.settings.remote_uri)),
        "remote_store": _remote_store(broker),
        "controller": urls.related(f"/brokers/{controller}") if controller >= 0 else None,
        "brokers": urls.related("/brokers"),
        "topics": urls.related("/topics"),
    }


def _remote_store(broker: Broker) -> dict[str, Any]:
    """tierlog's object-store state in the cluster answer: usable, or the problem its last check or
    upload found, and whether uploads are failing now."""
    health = broker.remote.health
    return {
        "store": health.where,
        "usable": health.problem is None,
        "problem": health.problem,
        "uploads_failing": health.failing,
    }


def _broker_resource(broker: Broker, registration: BrokerRegistration) -> dict[str, Any]:
    urls = _Urls(broker)
    broker_id = registration.broker_id
    advertised = urlsplit(registration.url)
    return {
        "kind": "KafkaBroker",
        "metadata": urls.meta(f"/brokers/{broker_id}", f"/broker={broker_id}"),
        "cluster_id": broker.cluster_id,
        "broker_id": broker_id,
        "host": advertised.hostname,
        "port": advertised.port or (443 if advertised.scheme == "https" else 80),
        "rack": registration.rack,
    }


def _topic(broker: Broker, topic: Topic, view: ClusterView | None = None) -> dict[str, Any]:
    """A ``KafkaTopic``; ``view`` is the cluster view to describe it from (the broker's current one when
    None: pass one when describing many topics)."""
    urls = _Urls(broker)
    partitions = (view or broker.cluster_view()).partitions.get(topic.name, ())
    path = f"/topics/{topic.name}"
    return {
        "kind": "KafkaTopic",
        "metadata": urls.meta(path, f"/topic={topic.name}"),
        "cluster_id": broker.cluster_id,
        "topic_name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "replication_factor": len(partitions[0].replicas) if partitions else 0,
        "partitions_count": len(partitions),
        "partitions": urls.related(f"{path}/partitions"),
        "configs": urls.related(f"{path}/configs"),
        "authorized_operations": [],
    }


def _partition(broker: Broker, topic: str, view: PartitionView) -> dict[str, Any]:
    urls = _Urls(broker)
    path = f"/topics/{topic}/partitions/{view.partition}"
    return {
        "kind": "KafkaPartition",
        "metadata": urls.meta(path, f"/topic={topic}/partition={view.partition}"),
        "cluster_id": broker.cluster_id,
        "topic_name": topic,
        "partition_id": view.partition,
        "leader": urls.related(f"{path}/replicas/{view.leader}") if view.leader >= 0 else None,
        "replicas": urls.related(f"{path}/replicas"),
    }


def _replica(broker: Broker, topic: str, view: PartitionView, broker_id: int) -> dict[str, Any]:
    urls = _Urls(broker)
    path = f"/topics/{topic}/partitions/{view.partition}/replicas/{broker_id}"
    crn = f"/topic={topic}/partition={view.partition}/replica={broker_id}"
    return {
        "kind": "KafkaReplica",
        "metadata": urls.meta(path, crn),
        "cluster_id": broker.cluster_id,
        "topic_name": topic,
        "partition_id": view.partition,
        "broker_id": broker_id,
        "is_leader": broker_id == view.leader,
        "is_in_sync": broker_id in view.isr,
        "broker": urls.related(f"/brokers/{broker_id}"),
    }


def _config(request: web.Request, topic: Topic, name: str) -> dict[str, Any]:
    broker = request.app[BROKER]
    settings = request.app[SETTINGS]
    spec = TOPIC_CONFIGS[name]
    overrides = topic.overrides
    synonyms: list[dict[str, Any]] = []
    if name in overrides:
        synonyms.append({"name": name, "value": overrides[name], "source": "DYNAMIC_TOPIC_CONFIG"})
    if spec.broker_name is not None and spec.broker_name in settings.sources:
        value = settings.topic_defaults[name]
        synonyms.append({"name": spec.broker_name, "value": value, "source": "STATIC_BROKER_CONFIG"})
    synonyms.append({"name": spec.broker_name or name, "value": spec.default, "source": "DEFAULT_CONFIG"})
    urls = _Urls(broker)
    return {
        "kind": "KafkaTopicConfig",
        "metadata": urls.meta(f"/topics/{topic.name}/configs/{name}", f"/topic={topic.name}/config={name}"),
        "cluster_id": broker.cluster_id,
        "topic_name": topic.name,
        "name": name,
        "value": topic.configs()[name],
        "is_default": synonyms[0]["source"] == "DEFAULT_CONFIG",
        "is_read_only": False,
        "is_sensitive": False,
        "source": synonyms[0]["source"],
        "synonyms": synonyms,
    }


def _list(broker: Broker, kind: str, path: str, data: list[dict[str, Any]]) -> web.Response:
    return web.json_response(
        {"kind": kind, "metadata": {"self": _Urls(broker).root + path, "next": None}, "data": data}
    )


def _broker(request: web.Request) -> Broker:
    """The broker, after checking the ``cluster_id`` path parameter. Raises NotFoundError (404)."""
    broker = request.app[BROKER]
    broker.check_ready()
    cluster_id = request.match_info["cluster_id"]
    if cluster_id != broker.cluster_id:
        raise NotFoundError(f"Cluster {cluster_id} cannot be found.")
    return broker


def _topic_of(request: web.Request) -> tuple[Broker, Topic]:
    broker = _broker(request)
    return broker, broker.topic(request.match_info["topic_name"])


def _partition_views(broker: Broker, name: str) -> tuple[PartitionView, ...]:
    return tuple(broker.cluster_view().partitions.get(name, ()))


def _partition_of(request: web.Request) -> tuple[Broker, Topic, PartitionView]:
    """The topic and the cluster view of the partition in the path. Raises UnknownTopicError (40401),
    UnknownPartitionError (40402)."""
    broker, topic = _topic_of(request)
    raw = request.match_info["partition_id"]
    views = _partition_views(broker, topic.name)
    if not raw.isascii() or not raw.isdigit() or int(raw) >= len(views):
        raise UnknownPartitionError(f"Partition not found. (partition {raw} of topic {topic.name})")
    return broker, topic, views[int(raw)]


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object body. Raises UnsupportedMediaTypeError (415) or BadRequestError (40001)."""
    content_type = request.content_type
    if (
        request.body_exists
        and content_type not in ("application/json", "application/octet-stream")
        and not (content_type.endswith("+json"))
    ):
        raise UnsupportedMediaTypeError(
            f"Content-Type {content_type} is not supported: send application/json"
        )
    raw = await request.read()
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequestError(f"Request body is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise BadRequestError("Request body must be a JSON object")
    return doc


def _field(
    doc: Mapping[str, Any], name: str, kinds: type | tuple[type, ...], *, required: bool = False
) -> Any:
    value = doc.get(name)
    if value is None:
        if required:
            raise BadRequestError(f"Field {name} is required")
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise BadRequestError(f"Field {name} has the wrong type")
    if not isinstance(value, kinds):
        raise BadRequestError(f"Field {name} has the wrong type")
    return value


def _config_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    raise BadRequestError(f"The value of config {name} must be a string")


# ---- handlers ---------------------------------------------------------------------------------------


async def list_clusters(request: web.Request) -> web.Response:
    """``GET /v3/clusters``. Read-only. Raises UnavailableError (503) while opening."""
    broker = request.app[BROKER]
    broker.check_ready()
    body = {"kind": "KafkaClusterList", "metadata": {"self": f"{broker.advertised_url}{BASE}", "next": None}}
    return web.json_response({**body, "data": [_cluster(broker)]})


async def get_cluster(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}``. Read-only. Raises NotFoundError (404) for another cluster id."""
    return web.json_response(_cluster(_broker(request)))


async def list_brokers(request: web.Request) -> web.Response:
    """``GET .../brokers``: the live brokers of the cluster, by id. Read-only."""
    broker = _broker(request)
    data = [_broker_resource(broker, b) for b in broker.cluster_view().brokers]
    return _list(broker, "KafkaBrokerList", "/brokers", data)


async def get_broker(request: web.Request) -> web.Response:
    """``GET .../brokers/{broker_id}``. Read-only. Raises NotFoundError (404) for no live broker."""
    broker = _broker(request)
    wanted = request.match_info["broker_id"]
    for registration in broker.cluster_view().brokers:
        if str(registration.broker_id) == wanted:
            return web.json_response(_broker_resource(broker, registration))
    raise NotFoundError(f"Broker {wanted} cannot be found.")


async def list_topics(request: web.Request) -> web.Response:
    """``GET .../topics``: the topics the principal may Describe. Read-only."""
    broker = _broker(request)
    view = broker.cluster_view()
    data = [
        _topic(broker, t, view)
        for t in broker.topics()
        if authz.allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, t.name)
    ]
    return _list(broker, "KafkaTopicList", "/topics", data)


async def create_topic(request: web.Request) -> web.Response:
    """``POST .../topics``: 201, or 200 with ``validate_only``. Not idempotent (40002 the second time).

    Raises BadRequestError (40001), UnsupportedMediaTypeError (41501), InvalidConfigError (40002),
    AuthorizationError (40301: no Create on the Cluster nor on the topic).
    """
    broker = _broker(request)
    doc = await _body(request)
    name = _field(doc, "topic_name", str, required=True)
    authorize_create(request, name)
    partitions = _field(doc, "partitions_count", int)
    replication = _replication(broker, _field(doc, "replication_factor", int))
    validate_only = bool(_field(doc, "validate_only", bool))
    configs: dict[str, str] = {}
    for entry in _field(doc, "configs", list) or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequestError("Each entry of configs must be an object with a name")
        if entry.get("value") is not None:
            configs[entry["name"]] = _config_value(entry["name"], entry["value"])
    if validate_only:
        count = broker.validate_create_topic(name, partitions, configs)
        preview = {
            "kind": "KafkaTopic",
            "cluster_id": broker.cluster_id,
            "topic_name": name,
            "is_internal": False,
            "replication_factor": replication or broker.settings.default_replication_factor,
            "partitions_count": count,
        }
        return web.json_response(preview, status=200)
    topic = await broker.create_topic(name, partitions, configs, replication_factor=replication)
    return web.json_response(_topic(broker, topic), status=201)


def _replication(broker: Broker, factor: int | None) -> int | None:
    """``replication_factor`` of a create request: None (or -1) for ``default.replication.factor``.

    Raises InvalidConfigError (40002): 0 or below -1, or more than the live brokers."""
    if factor is None or factor == -1:
        return None
    if factor < 1:
        raise InvalidConfigError(
            f"Replication factor must be larger than 0, or -1 to use the default: {factor}."
        )
    live = len(broker.cluster_view().brokers)
    if factor > live:
        raise InvalidConfigError(f"Replication factor: {factor} larger than available brokers: {live}.")
    return factor


async def get_topic(request: web.Request) -> web.Response:
    """``GET .../topics/{topic_name}``. Read-only. Raises UnknownTopicError (40401)."""
    broker, topic = _topic_of(request)
    return web.json_response(_topic(broker, topic))


async def update_topic(request: web.Request) -> web.Response:
    """``PATCH .../topics/{topic_name}`` with ``partitions_count``: grow the topic. Idempotent.

    Raises UnknownTopicError (40401), BadRequestError (40001), InvalidConfigError (40002).
    """
    broker, topic = _topic_of(request)
    doc = await _body(request)
    count = _field(doc, "partitions_count", int, required=True)
    topic = await broker.add_partitions(topic.name, count)
    return web.json_response(_topic(broker, topic))


async def delete_topic(request: web.Request) -> web.Response:
    """``DELETE .../topics/{topic_name}``: 204. Not idempotent (40401 the second time)."""
    broker, topic = _topic_of(request)
    await broker.delete_topic(topic.name)
    return web.Response(status=204)


async def list_configs(request: web.Request) -> web.Response:
    """``GET .../configs``: every topic config. Read-only. Raises UnknownTopicError (40401)."""
    broker, topic = _topic_of(request)
    data = [_config(request, topic, name) for name in sorted(TOPIC_CONFIGS)]
    return _list(broker, "KafkaTopicConfigList", f"/topics/{topic.name}/configs", data)


def _config_name(request: web.Request, topic: Topic) -> str:
    name = request.match_info["name"]
    if name not in TOPIC_CONFIGS:
        raise NotFoundError(f"Config {name} cannot be found for topic {topic.name}.")
    return name


async def get_config(request: web.Request) -> web.Response:
    """``GET .../configs/{name}``. Read-only. Raises UnknownTopicError (40401), NotFoundError (404)."""
    _, topic = _topic_of(request)
    return web.json_response(_config(request, topic, _config_name(request, topic)))


async def put_config(request: web.Request) -> web.Response:
    """``PUT .../configs/{name}`` with ``value``: 204. Idempotent.

    Raises UnknownTopicError (40401), NotFoundError (404), BadRequestError (40001), InvalidConfigError
    (40002).
    """
    broker, topic = _topic_of(request)
    name = _config_name(request, topic)
    doc = await _body(request)
    if doc.get("value") is None:
        raise BadRequestError("Field value is required")
    await broker.alter_topic_configs(topic.name, {name: _config_value(name, doc["value"])})
    return web.Response(status=204)


async def delete_config(request: web.Request) -> web.Response:
    """``DELETE .../configs/{name}``: reset to the default, 204. Idempotent."""
    broker, topic = _topic_of(request)
    await broker.alter_topic_configs(topic.name, {_config_name(request, topic): None})
    return web.Response(status=204)


async def alter_configs(request: web.Request) -> web.Response:
    """``POST .../configs:alter``: SET/DELETE several configs, all or nothing, 204. Idempotent.

    Raises UnknownTopicError (40401), BadRequestError (40001), InvalidConfigError (40002).
    """
    broker, topic = _topic_of(request)
    doc = await _body(request)
    updates: dict[str, str | None] = {}
    for entry in _field(doc, "data", list, required=True):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequestError("Each entry of data must be an object with a name")
        operation = str(entry.get("operation") or "SET").upper()
        if operation == "DELETE":
            updates[entry["name"]] = None
        elif operation == "SET":
            if entry.get("value") is None:
                raise BadRequestError(f"Config {entry['name']}: operation SET needs a value")
            updates[entry["name"]] = _config_value(entry["name"], entry["value"])
        else:
            raise BadRequestError(f"Config {entry['name']}: operation must be SET or DELETE")
    validate_only = bool(_field(doc, "validate_only", bool))
    await broker.alter_topic_configs(topic.name, updates, validate_only=validate_only)
    return web.Response(status=204)


async def list_partitions(request: web.Request) -> web.Response:
    """``GET .../partitions``. Read-only. Raises UnknownTopicError (40401)."""
    broker, topic = _topic_of(request)
    data = [_partition(broker, topic.name, p) for p in _partition_views(broker, topic.name)]
    return _list(broker, "KafkaPartitionList", f"/topics/{topic.name}/partitions", data)


async def get_partition(request: web.Request) -> web.Response:
    """``GET .../partitions/{partition_id}``; on the partition's leader, with tierlog's ``tiered_storage``
    state (offsets of both tiers, upload lag, uploads and failures). Read-only. Raises UnknownTopicError
    (40401), UnknownPartitionError (40402)."""
    broker, topic, view = _partition_of(request)
    body = _partition(broker, topic.name, view)
    try:
        partition = topic.partition(view.partition)
    except (NotLeaderOrFollowerError, LeaderNotAvailableError):
        return web.json_response(body)
    body["tiered_storage"] = await broker.remote.describe(partition)
    return web.json_response(body)


async def list_replicas(request: web.Request) -> web.Response:
    """``GET .../replicas``: the partition's replicas, in assignment order. Read-only."""
    broker, topic, view = _partition_of(request)
    path = f"/topics/{topic.name}/partitions/{view.partition}/replicas"
    data = [_replica(broker, topic.name, view, b) for b in view.replicas]
    return _list(broker, "KafkaReplicaList", path, data)


async def get_replica(request: web.Request) -> web.Response:
    """``GET .../replicas/{broker_id}``. Read-only. Raises NotFoundError (404) for a broker that holds no
    replica of the partition."""
    broker, topic, view = _partition_of(request)
    wanted = request.match_info["broker_id"]
    for broker_id in view.replicas:
        if str(broker_id) == wanted:
            return web.json_response(_replica(broker, topic.name, view, broker_id))
    raise NotFoundError(f"Replica {wanted} cannot be found.")


def setup_routes(app: web.Application) -> None:
    """Register the v3 admin routes."""
    cluster = BASE + "/{cluster_id}"
    topic = cluster + "/topics/{topic_name}"
    partition = topic + "/partitions/{partition_id}"
    router = app.router
    router.add_get(BASE, list_clusters, allow_head=False)
    router.add_get(cluster, get_cluster, allow_head=False)
    router.add_get(cluster + "/brokers", list_brokers, allow_head=False)
    router.add_get(cluster + "/brokers/{broker_id}", get_broker, allow_head=False)
    router.add_get(cluster + "/topics", list_topics, allow_head=False)
    router.add_post(cluster + "/topics", create_topic)
    router.add_get(topic, get_topic, allow_head=False)
    router.add_patch(topic, update_topic)
    router.add_delete(topic, delete_topic)
    router.add_get(topic + "/configs", list_configs, allow_head=False)
    router.add_post(topic + "/configs:alter", alter_configs)
    router.add_get(topic + "/configs/{name}", get_config, allow_head=False)
    router.add_put(topic + "/configs/{name}", put_config)
    router.add_delete(topic + "/configs/{name}", delete_config)
    router.add_get(topic + "/partitions", list_partitions, allow_head=False)
    router.add_get(partition, get_partition, allow_head=False)
    router.add_get(partition + "/replicas", list_replicas, allow_head=False)
    router.add_get(partition + "/replicas/{broker_id}", get_replica, allow_head=False)
