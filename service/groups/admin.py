"""Consumer groups on the v3 admin API, in Confluent's REST v3 shape.

``GET /v3/clusters/{cluster_id}/consumer-groups`` lists groups; ``.../consumer-groups/{group}`` describes one;
``.../consumers`` lists its members with their assignments; ``.../lags`` gives the lag of every partition with
a committed offset or an owner, and ``.../lag-summary`` the largest and the total.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tierlog.service.admin_v3.routes import BASE, _broker, _list, _Urls
from tierlog.service.groups.coordination import Coordination
from tierlog.service.groups.coordinator import GroupDescription
from tierlog.service.groups.lag import group_lag
from tierlog.service.groups.routing import from_other_brokers, group_route
from tierlog.service.groups.state import CONSUMERS, COORDINATOR, require_ready
from tierlog.service.security import authz
from tierlog.service.security.model import CLUSTER_NAME, Operation, ResourceType

__all__ = ["setup_routes"]

GROUPS = BASE + "/{cluster_id}/consumer-groups"


def _coordinator(request: web.Request) -> Coordination:
    require_ready(request)
    return request.app[COORDINATOR]


def _group(urls: _Urls, description: GroupDescription, coordinator_id: int) -> dict[str, Any]:
    path = f"/consumer-groups/{description.group_id}"
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": urls.meta(path, f"/consumer-group={description.group_id}"),
        "cluster_id": urls.cluster_id,
        "consumer_group_id": description.group_id,
        "is_simple": not description.members,
        "partition_assignor": description.protocol,
        "state": description.state.upper().replace("PREPARINGREBALANCE", "PREPARING_REBALANCE"),
        "generation": description.generation,
        "coordinator": urls.related(f"/brokers/{coordinator_id}"),
        "consumers": urls.related(path + "/consumers"),
        "lag_summary": urls.related(path + "/lag-summary"),
    }


async def list_groups(request: web.Request) -> web.Response:
    """The groups of the cluster the principal may Describe (all of them with Describe on the Cluster, as
    Kafka's ListGroups)."""
    broker = _broker(request)
    coordinator = _coordinator(request)
    urls = _Urls(broker)
    data = [_group(urls, coordinator.describe(g), broker.broker_id) for g in coordinator.group_ids()]
    for answer in await from_other_brokers(request):
        data.extend(answer["data"])
    if authz.is_enabled(request) and not authz.allowed(
        request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        data = [
            g
            for g in data
            if authz.allowed(request, Operation.DESCRIBE, ResourceType.GROUP, str(g["consumer_group_id"]))
        ]
    data.sort(key=lambda g: str(g["consumer_group_id"]))
    return _list(broker, "KafkaConsumerGroupList", "/consumer-groups", data)


async def get_group(request: web.Request) -> web.Response:
    broker = _broker(request)
    description = _coordinator(request).describe(request.match_info["group"])
    return web.json_response(_group(_Urls(broker), description, broker.broker_id))


async def list_consumers(request: web.Request) -> web.Response:
    broker = _broker(request)
    group_id = request.match_info["group"]
    description = _coordinator(request).describe(group_id)
    urls = _Urls(broker)
    data = [
        {
            "kind": "KafkaConsumer",
            "metadata": urls.meta(
                f"/consumer-groups/{group_id}/consumers/{m.member_id}",
                f"/consumer-group={group_id}/consumer={m.member_id}",
            ),
            "cluster_id": broker.cluster_id,
            "consumer_group_id": group_id,
            "consumer_id": m.member_id,
            "instance_id": None,
            "client_id": m.client_id,
            "assignments": [{"topic_name": t, "partition_id": p} for t, p in m.assignment],
        }
        for m in description.members
    ]
    return _list(broker, "KafkaConsumerList", f"/consumer-groups/{group_id}/consumers", data)


async def _lags(request: web.Request) -> tuple[str, list[dict[str, Any]]]:
    group_id = request.match_info["group"]
    coordinator = _coordinator(request)
    coordinator.describe(group_id)  # 404 for an unknown group
    rows = await group_lag(coordinator, request.app[CONSUMERS].reader, group_id)
    if authz.is_enabled(request):
        rows = [r for r in rows if authz.allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, r["topic"])]
    return group_id, rows


async def list_lags(request: web.Request) -> web.Response:
    broker = _broker(request)
    group_id, rows = await _lags(request)
    urls = _Urls(broker)
    data = [
        {
            "kind": "KafkaConsumerLag",
            "metadata": urls.meta(
                f"/consumer-groups/{group_id}/lags/{row['topic']}/partitions/{row['partition']}",
                f"/consumer-group={group_id}/lag={row['topic']}/partition={row['partition']}",
            ),
            "cluster_id": broker.cluster_id,
            "consumer_group_id": group_id,
            "topic_name": row["topic"],
            "partition_id": row["partition"],
            "consumer_id": row["member_id"],
            "current_offset": row["committed_offset"],
            "log_end_offset": row["log_end_offset"],
            "lag": row["lag"],
        }
        for row in rows
    ]
    return _list(broker, "KafkaConsumerLagList", f"/consumer-groups/{group_id}/lags", data)


async def lag_summary(request: web.Request) -> web.Response:
    broker = _broker(request)
    group_id, rows = await _lags(request)
    worst = max(rows, key=lambda r: r["lag"], default=None)
    urls = _Urls(broker)
    return web.json_response(
        {
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": urls.meta(f"/consumer-groups/{group_id}/lag-summary", f"/consumer-group={group_id}"),
            "cluster_id": broker.cluster_id,
            "consumer_group_id": group_id,
            "max_lag_consumer_id": worst["member_id"] if worst else None,
            "max_lag": worst["lag"] if worst else 0,
            "total_lag": sum(r["lag"] for r in rows),
            "max_lag_topic_name": worst["topic"] if worst else None,
            "max_lag_partition_id": worst["partition"] if worst else None,
        }
    )


def setup_routes(app: web.Application) -> None:
    """Register the v3 consumer-group routes on ``app``."""
    app.router.add_get(GROUPS, list_groups)
    app.router.add_get(GROUPS + "/{group}", group_route(get_group))
    app.router.add_get(GROUPS + "/{group}/consumers", group_route(list_consumers))
    app.router.add_get(GROUPS + "/{group}/lags", group_route(list_lags))
    app.router.add_get(GROUPS + "/{group}/lag-summary", group_route(lag_summary))
