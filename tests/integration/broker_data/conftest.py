"""A real broker app on a loopback aiohttp server with a fresh data directory per test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.integration.broker import Brokers, Client

MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
def make_client(brokers: Brokers) -> MakeClient:
    """Start a broker with ``settings`` overrides (dotted names) and wait until its logs are open."""

    async def make(**overrides: str) -> Client:
        running = await brokers.start({"num.partitions": "3", **overrides})
        return running.client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client()
