"""send_body: an answer's body goes out whole, with its length and type; a large one after its headers (no
join of the two on the event loop); a client that leaves midway costs the server nothing but a debug line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient

from tierlog.service.web.requests import SEPARATE_HEADERS_BYTES, send_body

TYPE = "application/vnd.kafka.binary.v2+json"
ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


def _app(
    bodies: dict[str, bytes | bytearray],
    answered: list[web.StreamResponse],
    done: asyncio.Event | None = None,
) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = await send_body(request, bodies[request.match_info["name"]], TYPE, what="a test answer")
        answered.append(response)
        if done is not None and request.match_info["name"] == "huge":
            done.set()
        return response

    app = web.Application()
    app.router.add_get("/{name}", handler)
    return app


@pytest.mark.parametrize("size", [0, 1, SEPARATE_HEADERS_BYTES - 1, SEPARATE_HEADERS_BYTES, 3 << 20])
async def test_the_body_arrives_whole_with_its_length_and_type(
    aiohttp_client: ClientFactory, size: int
) -> None:
    body = bytearray((i * 7) % 251 for i in range(size))
    answered: list[web.StreamResponse] = []
    client = await aiohttp_client(_app({"b": body, "s": bytes(body)}, answered))
    for name in ("b", "s"):
        async with client.get(f"/{name}") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == TYPE
            assert response.headers["Content-Length"] == str(size)
            assert await response.read() == body
    # a large body is written by the handler itself, after its headers; a small one is aiohttp's to write
    assert len(answered) == 2
    kind = web.StreamResponse if size >= SEPARATE_HEADERS_BYTES else web.Response
    assert all(type(a) is kind for a in answered)


async def test_answers_on_one_connection_follow_each_other_intact(aiohttp_client: ClientFactory) -> None:
    bodies = {"big": b"\x01" * (2 * SEPARATE_HEADERS_BYTES), "small": b"\x02" * 10}
    client = await aiohttp_client(_app(dict(bodies), []))
    for name in ["big", "small", "big", "big", "small"]:
        async with client.get(f"/{name}") as response:
            assert await response.read() == bodies[name]


async def test_a_client_that_leaves_midway_is_logged_and_the_server_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answered: list[web.StreamResponse] = []
    huge_done = asyncio.Event()
    # far more than the loopback socket buffers hold, so the write is still going on when the client leaves
    app = _app({"huge": bytes(64 << 20), "small": b"ok"}, answered, huge_done)
    runner = web.AppRunner(app)  # as the broker runs: handlers are not cancelled when a client leaves
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        caplog.set_level(logging.DEBUG, logger="tierlog.service.web.requests")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 200")
        writer.transport.abort()  # unread data: the kernel answers the server's next send with a reset
        await asyncio.wait_for(huge_done.wait(), 30)  # the huge answer's handler returns once its write fails
        assert any("client left during a test answer" in r.getMessage() for r in caplog.records)
        async with ClientSession() as session, session.get(f"http://127.0.0.1:{port}/small") as response:
            assert await response.read() == b"ok"
        assert len(answered) == 2
    finally:
        await runner.cleanup()


async def test_a_head_request_gets_the_headers_and_no_body(aiohttp_client: ClientFactory) -> None:
    """HEAD (routed with GET) answers the length a GET would have, and nothing after the headers: the next
    answer on the same connection is read intact."""
    big = b"\x03" * (2 * SEPARATE_HEADERS_BYTES)
    client = await aiohttp_client(_app({"big": big, "small": b"ok"}, []))
    async with client.head("/big") as response:
        assert response.status == 200 and response.headers["Content-Length"] == str(len(big))
        assert await response.read() == b""
    async with client.get("/small") as response:
        assert await response.read() == b"ok"
