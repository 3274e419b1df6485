"""Helpers for the producer id and idempotent produce suites: raw HTTP against real broker apps."""

from __future__ import annotations

from typing import Any

from tests.integration.broker import Client

PRODUCERS = "/native/v1/producers"


async def init_producer(client: Client, body: dict[str, Any] | None = None) -> tuple[int, int]:
    """``POST /native/v1/producers`` (with ``body`` as JSON when given); asserts 200, returns (id, epoch)."""
    resp = await client.post(PRODUCERS, json=body) if body is not None else await client.post(PRODUCERS)
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    assert set(doc) == {"producer_id", "producer_epoch"}
    return doc["producer_id"], doc["producer_epoch"]
