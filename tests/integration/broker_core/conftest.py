"""Fixtures for the broker core: a real app on loopback (the shared ``brokers`` fixture), a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from tests.integration.broker import START_MS, Brokers, Client
from tierlog.service.topics.broker import Broker
from tierlog.service.web.keys import BROKER
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import ManualClock


@dataclass
class Node:
    """One running broker app and the client talking to it."""

    client: Client
    app: web.Application

    @property
    def broker(self) -> Broker:
        return self.app[BROKER]

    @property
    def v3(self) -> str:
        return f"/v3/clusters/{self.broker.cluster_id}"

    async def create(self, name: str, partitions: int = 1, **configs: str) -> dict[str, Any]:
        body = {
            "topic_name": name,
            "partitions_count": partitions,
            "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
        }
        resp = await self.client.post(f"{self.v3}/topics", json=body)
        assert resp.status == 201, await resp.text()
        result: dict[str, Any] = await resp.json()
        return result


StartNode = Callable[..., Awaitable[Node]]


@pytest.fixture
def start_node(brokers: Brokers, clock: ManualClock) -> StartNode:
    """Start a broker app on the test's data dir; keywords override settings (``num_partitions="3"``)."""

    async def start(*, wait: bool = True, gate: asyncio.Event | None = None, **overrides: str) -> Node:
        settings = {k.replace("_", "."): v for k, v in overrides.items()}
        running = await brokers.start(settings, clock=clock, startup_gate=gate, wait=wait)
        return Node(running.client, running.app)

    return start


@pytest.fixture
async def node(start_node: StartNode) -> Node:
    return await start_node()


def batch(*values: bytes, timestamp: int = START_MS) -> bytes:
    """One v2 batch of records with these values and no keys."""
    return build_batch([Record(None, v, timestamp=timestamp) for v in values])
