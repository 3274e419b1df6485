"""A real broker app (with consumer groups) on a loopback aiohttp server, on a manual clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.integration.broker import Brokers, Client
from tierlog.tiering.log import ManualClock

StartBroker = Callable[..., Awaitable[Client]]


@pytest.fixture
def start_broker(brokers: Brokers, clock: ManualClock) -> StartBroker:
    """Start a broker on ``data_dir`` (call again after closing the last one to restart it)."""

    async def start(**overrides: str) -> Client:
        running = await brokers.start({"num.partitions": "4", **overrides}, clock=clock, wait_groups=True)
        return running.client

    return start


@pytest.fixture
async def client(start_broker: StartBroker) -> Client:
    return await start_broker()
