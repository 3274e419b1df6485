"""A real broker app on a loopback aiohttp server with a fresh data directory per test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tierlog.service.app import create_app
from tierlog.service.config import build_settings
from tierlog.service.state import BROKER

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
def make_client(tmp_path: Path, aiohttp_client: Any) -> MakeClient:
    """Start a broker with ``settings`` overrides (dotted names) and wait until its logs are open."""

    async def make(**overrides: str) -> Client:
        values = {"data.dir": str(tmp_path / "data"), "num.partitions": "3", "port": "0", **overrides}
        app = create_app(build_settings(values))
        client: Client = await aiohttp_client(app)
        await app[BROKER].wait_ready()
        return client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
