"""Real brokers for the integration suites: one way to build a test broker's settings and app, one way to
start and stop it.

:func:`start_broker` serves a broker app on an aiohttp ``TestServer`` bound to 127.0.0.1 in the running event
loop and waits until its logs (and, if asked, its consumer groups) are open. :class:`BrokerThread` runs the
same coroutine on an event loop of its own in a thread it owns and joins, for the synchronous clients and the
CLI, which run their own loops and block the calling thread.

Tests do not call these directly: the ``brokers`` and ``broker_threads`` fixtures of
``tests/integration/conftest.py`` start brokers and stop every one of them at teardown.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tierlog.service.app import create_app
from tierlog.service.groups.state import GROUPS_READY
from tierlog.service.settings.config import Settings, build_settings
from tierlog.service.topics.broker import Broker
from tierlog.service.web.keys import BROKER
from tierlog.tiering.log import Clock
from tierlog.tiering.remote.object_store import ObjectStore

__all__ = [
    "START_MS",
    "BrokerThread",
    "Brokers",
    "Client",
    "RunningBroker",
    "StartThread",
    "broker_settings",
    "start_broker",
]

START_MS = 1_700_000_000_000  # where the suites' manual clocks start
THREAD_DEADLINE_S = 30  # bounded waits on the broker thread; a readiness deadline, not a timing assertion

Client = TestClient[web.Request, web.Application]
StartThread = Callable[..., "BrokerThread"]  # the ``broker_threads`` fixture


def broker_settings(data_dir: Path, overrides: Mapping[str, str] | None = None) -> Settings:
    """Settings of a test broker on ``data_dir``; ``overrides`` maps dotted names to values, ``data.dir``
    included (``{"num.partitions": "3"}``). Raises SettingsError for an unknown name or a bad value."""
    overrides = overrides or {}
    # the Kafka listener on a free port: many test brokers run at once, and 9092 is the default
    values = {"data.dir": str(data_dir), "kafka.listener": "127.0.0.1:0", **overrides}
    return build_settings(values, {name: f"test override {name}" for name in overrides})


@dataclass
class RunningBroker:
    """A started broker: its app, the server on 127.0.0.1 serving it, and a test client bound to it.

    The app belongs to the event loop that serves it: use it (and ``client``) only from that loop.
    """

    app: web.Application
    server: TestServer
    client: Client
    url: str  # http(s)://127.0.0.1:port, no trailing slash

    @property
    def broker(self) -> Broker:
        return self.app[BROKER]

    @property
    def kafka_bootstrap(self) -> str:
        """``127.0.0.1:port`` of the broker's Kafka protocol listener (bound to a free port in tests)."""
        endpoint = self.broker.kafka_endpoint
        assert endpoint is not None, "this broker serves no Kafka listener (kafka.listener=none?)"
        return endpoint

    async def wait_ready(self, *, groups: bool = False) -> None:
        """Wait until the logs are open and, with ``groups``, until the group coordinator has replayed the
        committed offsets (which creates ``__consumer_offsets`` on a fresh data directory)."""
        await self.broker.wait_ready()
        if groups:
            await self.app[GROUPS_READY].wait()

    async def stop(self) -> None:
        """Stop serving and close the broker (its logs get the clean-shutdown marker). Idempotent."""
        await self.client.close()  # closes the client session, then the server and the app's cleanup


async def start_broker(
    settings: Settings,
    *,
    clock: Clock | None = None,
    startup_gate: asyncio.Event | None = None,
    remote_store: ObjectStore | None = None,
    port: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
    wait: bool = True,
    wait_groups: bool = False,
) -> RunningBroker:
    """Serve a new broker app on 127.0.0.1 (``port`` or a free one); with ``wait``, wait until its logs are
    open, and with ``wait_groups`` until its consumer groups are too (see :meth:`RunningBroker.wait_ready`).

    ``clock``, ``startup_gate`` and ``remote_store`` go to ``create_app``; ``ssl_context`` serves HTTPS.
    The caller owns the result and must ``stop()`` it. Raises OSError when ``port`` is taken.
    """
    app = create_app(settings, clock=clock, startup_gate=startup_gate, remote_store=remote_store)
    server = TestServer(app, host="127.0.0.1", port=port)
    client: Client = TestClient(server)
    try:
        await server.start_server(ssl=ssl_context)
        await client.start_server()
        running = RunningBroker(app, server, client, str(server.make_url("")).rstrip("/"))
        if wait:
            await running.wait_ready(groups=wait_groups)
    except BaseException:
        await client.close()
        raise
    return running


class Brokers:
    """Starts brokers on the running loop and stops all of them in :meth:`close` (the ``brokers`` fixture).

    Not safe to use from another thread or loop than the test's.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._started: list[RunningBroker] = []

    async def start(
        self,
        settings: Mapping[str, str] | None = None,
        *,
        clock: Clock | None = None,
        startup_gate: asyncio.Event | None = None,
        remote_store: ObjectStore | None = None,
        port: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        wait: bool = True,
        wait_groups: bool = False,
    ) -> RunningBroker:
        """Start a broker on the test's data directory; ``settings`` overrides (dotted names) the defaults."""
        running = await start_broker(
            broker_settings(self.data_dir, settings),
            clock=clock,
            startup_gate=startup_gate,
            remote_store=remote_store,
            port=port,
            ssl_context=ssl_context,
            wait=wait,
            wait_groups=wait_groups,
        )
        self._started.append(running)
        return running

    async def close(self) -> None:
        """Stop every broker started here, the last one first."""
        while self._started:
            await self._started.pop().stop()


class BrokerThread:
    """A broker served from its own event loop in a thread this object owns; ``close`` stops it and joins.

    The constructor returns once the broker's logs and consumer groups are ready, or raises RuntimeError
    (with the thread joined).
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._running: RunningBroker | None = None
        self._thread = threading.Thread(target=self._run, name="test-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(THREAD_DEADLINE_S) or self._error is not None:
            self.close()
            raise RuntimeError(f"broker thread did not start: {self._error!r}")

    @property
    def url(self) -> str:
        assert self._running is not None
        return self._running.url

    @property
    def kafka_bootstrap(self) -> str:
        """``127.0.0.1:port`` of the broker's Kafka protocol listener."""
        assert self._running is not None
        return self._running.kafka_bootstrap

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
        self._running = await start_broker(self._settings, wait_groups=True)
        try:
            self._ready.set()
            await self._stop.wait()
        finally:
            await self._running.stop()

    def close(self) -> None:
        """Stop the broker and join its thread. Idempotent; raises AssertionError if the thread hangs."""
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(THREAD_DEADLINE_S)
        assert not self._thread.is_alive(), "the broker thread did not stop"
