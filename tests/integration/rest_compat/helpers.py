"""Requests as a REST Proxy client sends them, with the media types of Confluent's API reference."""

from __future__ import annotations

import base64
import json
from typing import Any

from aiohttp import ClientResponse

from tests.integration.broker import Client

V2 = "application/vnd.kafka.v2+json"
V1 = "application/vnd.kafka.v1+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V1 = "application/vnd.kafka.binary.v1+json"
JSON_V1 = "application/vnd.kafka.json.v1+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"


class Answer:
    """Status, content type and decoded JSON body of one response."""

    def __init__(self, status: int, content_type: str, body: Any) -> None:
        self.status = status
        self.content_type = content_type
        self.body = body

    def error(self, status: int, code: int, prefix: str = "") -> str:
        """Assert this is the error ``status``/``code`` whose message starts with ``prefix``; the message."""
        assert (self.status, self.body.get("error_code")) == (status, code), self.body
        message: str = self.body["message"]
        assert message.startswith(prefix), message
        return message


async def send(
    client: Client,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str | None = V2,
    accept: str | None = None,
    raw: bytes | None = None,
) -> Answer:
    """Send ``body`` as JSON (or ``raw`` bytes) with the given headers; never asserts."""
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if accept is not None:
        headers["Accept"] = accept
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    response: ClientResponse = await client.request(method, path, data=data, headers=headers)
    text = await response.text()
    return Answer(response.status, response.content_type, json.loads(text) if text else None)


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def unb64(value: str) -> bytes:
    return base64.b64decode(value)


async def produce_binary(client: Client, topic: str, values: list[bytes], partition: int = 0) -> None:
    records = [{"value": b64(v)} for v in values]
    answer = await send(
        client,
        "POST",
        f"/topics/{topic}/partitions/{partition}",
        {"records": records},
        content_type=BINARY_V2,
    )
    assert answer.status == 200, answer.body


async def consumer(client: Client, group: str, name: str, **config: Any) -> str:
    """Create a consumer instance (binary, earliest unless told) and return its base path."""
    body = {"name": name, "format": "binary", "auto.offset.reset": "earliest", **config}
    answer = await send(client, "POST", f"/consumers/{group}", body)
    assert answer.status == 200, answer.body
    return f"/consumers/{group}/instances/{name}"


async def assign(client: Client, base: str, topic: str, partition: int = 0) -> None:
    body = {"partitions": [{"topic": topic, "partition": partition}]}
    answer = await send(client, "POST", f"{base}/assignments", body)
    assert answer.status == 204, answer.body
