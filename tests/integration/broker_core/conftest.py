"""Fixtures for the broker core: a real app served on loopback by pytest-aiohttp, one data dir per test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tierlog.service.app import create_app
from tierlog.service.broker import Broker
from tierlog.service.config import Settings, build_settings
from tierlog.service.state import BROKER
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import ManualClock

START_MS = 1_700_000_000_000


@dataclass
class Node:
    """One running broker app and the client talking to it."""

    client: TestClient[web.Request, web.Application]
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
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


def make_settings(data_dir: Path, **overrides: str) -> Settings:
    values = {"data.dir": str(data_dir)}
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return build_settings(values, {name: f"--{name}" for name in values})


@pytest.fixture
async def start_node(
    aiohttp_client: Callable[..., Awaitable[TestClient[web.Request, web.Application]]],
    data_dir: Path,
    clock: ManualClock,
) -> AsyncIterator[StartNode]:
    """Start a broker app on the shared data dir; keywords override settings (``num_partitions="3"``)."""

    async def start(*, wait: bool = True, gate: asyncio.Event | None = None, **overrides: str) -> Node:
        app = create_app(make_settings(data_dir, **overrides), clock=clock, startup_gate=gate)
        client = await aiohttp_client(app)
        node = Node(client, app)
        if wait:
            await node.broker.wait_ready()
        return node

    yield start


@pytest.fixture
async def node(start_node: StartNode) -> Node:
    return await start_node()


def batch(*values: bytes, timestamp: int = START_MS) -> bytes:
    """One v2 batch of records with these values and no keys."""
    return build_batch([Record(None, v, timestamp=timestamp) for v in values])
