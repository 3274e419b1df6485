"""A real broker app (with consumer groups) on a loopback aiohttp server, on a manual clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tierlog.service.app import create_app
from tierlog.service.config import build_settings
from tierlog.service.groups.state import GROUPS_READY
from tierlog.service.state import BROKER
from tierlog.tiering.log import ManualClock

Client = TestClient[web.Request, web.Application]
StartBroker = Callable[..., Awaitable[Client]]

START_MS = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def start_broker(data_dir: Path, clock: ManualClock, aiohttp_client: Any) -> StartBroker:
    """Start a broker on ``data_dir`` (call again after closing the last one to restart it)."""

    async def start(**overrides: str) -> Client:
        values = {"data.dir": str(data_dir), "num.partitions": "4", "port": "0", **overrides}
        app = create_app(build_settings(values), clock=clock)
        client: Client = await aiohttp_client(app)
        await app[BROKER].wait_ready()
        await app[GROUPS_READY].wait()
        return client

    return start


@pytest.fixture
async def client(start_broker: StartBroker) -> Client:
    return await start_broker()
