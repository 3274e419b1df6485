"""Real brokers for the client tests: one on the test's event loop, one in a background thread.

``broker`` serves a broker app on a loopback aiohttp server in the test's own loop (for the asyncio clients).
``thread_broker`` runs a broker app on its own event loop in a thread the fixture owns and joins (for the
synchronous clients and the CLI, which run their own loops and block the calling thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tierlog.service.app import create_app
from tierlog.service.config import build_settings
from tierlog.service.groups.state import COORDINATOR, GROUPS_READY
from tierlog.service.state import BROKER
from tierlog.tiering.log import ManualClock

START_MS = 1_700_000_000_000


@dataclass
class RunningBroker:
    """A started broker: its URL and app (the app belongs to the loop that serves it)."""

    url: str
    app: web.Application
    server: TestServer | None = None

    async def stop(self) -> None:
        """Stop serving (the broker is "down"); idempotent."""
        if self.server is not None:
            await self.server.close()
            self.server = None


def broker_settings(data_dir: Path, **overrides: str) -> dict[str, str]:
    return {
        "data.dir": str(data_dir),
        "num.partitions": "3",
        "port": "0",
        "logging.level": "WARNING",
        **overrides,
    }


async def start_app(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    await app[BROKER].wait_ready()
    await app[GROUPS_READY].wait()
    return server


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    """Settings a test module may override (dotted names)."""
    return {}


@pytest.fixture
async def broker(tmp_path: Path, broker_overrides: dict[str, str]) -> AsyncIterator[RunningBroker]:
    app = create_app(build_settings(broker_settings(tmp_path / "data", **broker_overrides)))
    server = await start_app(app)
    running = RunningBroker(str(server.make_url("")).rstrip("/"), app, server)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def clocked_broker(tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, ManualClock]]:
    """A broker whose group coordinator runs on a manual clock (session expiry only when the test says)."""
    clock = ManualClock(START_MS)
    app = create_app(build_settings(broker_settings(tmp_path / "data")), clock=clock)
    server = await start_app(app)
    running = RunningBroker(str(server.make_url("")).rstrip("/"), app, server)
    try:
        yield running, clock
    finally:
        await running.stop()


async def expire_sessions(app: web.Application, clock: ManualClock, ms: int) -> None:
    """Move the manual clock and let the coordinator expire sessions and rebalance timeouts."""
    clock.advance(ms)
    await app[COORDINATOR].tick()


class BrokerThread:
    """A broker serving from its own event loop in a thread; ``close`` stops it and joins the thread."""

    def __init__(self, data_dir: Path, **overrides: str) -> None:
        self._settings = broker_settings(data_dir, **overrides)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="test-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            self.close()
            raise RuntimeError(f"broker thread did not start: {self._error!r}")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as err:
            self._error = err
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = create_app(build_settings(self._settings))
        server = await start_app(app)
        self.url = str(server.make_url("")).rstrip("/")
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.close()

    def call(self, coro: Any) -> Any:
        """Run ``coro`` on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture
def thread_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    running = BrokerThread(tmp_path / "data")
    try:
        yield running
    finally:
        running.close()
