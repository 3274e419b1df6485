"""The event loop keeps running while a huge REST JSON produce body is converted in a worker thread.

The conversion is pure Python: a thread running it gives the GIL up only when another thread has waited a
whole switch interval, and the event loop thread gives it up on every system call (epoll, recv, send). Under
the hostile load of ``infra/bench/hostile_bench.py`` that cost the loop up to 5 ms per call, and ``/health``
100-300 ms (docs/benchmarks-hostile.md). The parse hands the GIL over by itself every few hundred records;
this test makes the interpreter never force a switch (a switch interval of a minute), so ``/health`` is
answered during the parse only through that hand-over.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.broker import Brokers
from tierlog.service.rest_v2 import routes
from tierlog.service.rest_v2.produce_body import parse_produce_rows

JSON_TYPE = "application/vnd.kafka.json.v2+json"
RECORDS = 200_000  # a parse of some 0.6 s on the development machine
ADMITTED = {"rest.produce.max.records": "1000000", "max.request.size": "67108864"}


@pytest.fixture
def no_forced_switch() -> Iterator[None]:
    """A switch interval of a minute: a thread keeps the GIL until it gives it up or blocks."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


@pytest.fixture
def parsing(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set while the produce route's worker thread is inside ``parse_produce_rows``."""
    event = threading.Event()
    parse = parse_produce_rows  # the route's import of it is replaced below

    def watched(*args: Any, **kwargs: Any) -> Any:
        event.set()
        try:
            return parse(*args, **kwargs)
        finally:
            event.clear()

    monkeypatch.setattr(routes, "parse_produce_rows", watched)
    return event


async def test_health_is_answered_while_a_huge_produce_body_is_parsed(
    brokers: Brokers, no_forced_switch: None, parsing: threading.Event
) -> None:
    running = await brokers.start(ADMITTED)
    client = running.client
    body = b'{"records":[' + b",".join([b'{"value":null}'] * RECORDS) + b"]}"
    headers = {"Content-Type": JSON_TYPE}
    produce = asyncio.create_task(client.post("/topics/t", data=io.BytesIO(body), headers=headers))
    answered_during_parse = 0
    while not produce.done():
        if not parsing.is_set():
            await asyncio.sleep(0)
            continue
        health = await client.get("/health")
        assert health.status == 200
        answered_during_parse += parsing.is_set()  # sent and answered while the parse ran
    resp = await produce
    # every record was parsed and converted; 200k records cannot fit the topic's max.message.bytes
    assert resp.status == 413, await resp.text()
    assert answered_during_parse > 0
