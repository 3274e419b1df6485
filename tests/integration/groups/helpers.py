"""Request helpers for the consumer-group tests."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.integration.broker import Client

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
JSON = "application/vnd.kafka.json.v2+json"


async def call(
    client: Client, method: str, path: str, body: Any = None, *, status: int = 200, **kw: Any
) -> Any:
    """Send a request, assert its status, return the decoded JSON body (None when empty)."""
    data = None if body is None else json.dumps(body)
    headers = {"Content-Type": V2, **kw.pop("headers", {})}
    response = await client.request(method, path, data=data, headers=headers, **kw)
    text = await response.text()
    assert response.status == status, f"{method} {path}: {response.status} {text}"
    return json.loads(text) if text else None


async def create_topic(client: Client, name: str, partitions: int) -> None:
    cluster = (await call(client, "GET", "/v3/clusters"))["data"][0]["cluster_id"]
    await call(
        client,
        "POST",
        f"/v3/clusters/{cluster}/topics",
        {"topic_name": name, "partitions_count": partitions},
        status=201,
    )


async def produce(client: Client, topic: str, partition: int, values: list[str]) -> None:
    records = [{"value": base64.b64encode(v.encode()).decode()} for v in values]
    await call(
        client,
        "POST",
        f"/topics/{topic}/partitions/{partition}",
        {"records": records},
        headers={"Content-Type": BINARY},
    )


def decoded(records: list[dict[str, Any]]) -> list[str]:
    return [base64.b64decode(r["value"]).decode() for r in records]


async def rest_consumer(client: Client, group: str, name: str, **config: str) -> str:
    body = {"name": name, "format": "binary", **config}
    answer = await call(client, "POST", f"/consumers/{group}", body)
    assert answer["instance_id"] == name
    assert answer["base_uri"].endswith(f"/consumers/{group}/instances/{name}")
    return f"/consumers/{group}/instances/{name}"


async def poll(client: Client, base: str, timeout_ms: int = 0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = await call(
        client, "GET", f"{base}/records?timeout={timeout_ms}", headers={"Accept": BINARY}
    )
    return records


async def join(client: Client, group: str, member_id: str = "", **extra: Any) -> dict[str, Any]:
    body = {"member_id": member_id, "topics": ["t"], **extra}
    answer: dict[str, Any] = await call(client, "POST", f"/native/v1/groups/{group}/join", body)
    return answer
