"""An HTTP proxy in front of one real broker that loses the answers of chosen produce requests.

The proxy forwards every request to the broker and passes its answer back, except:

* the metadata route answers 404 (40400, as a broker older than cluster mode), so the client sends
  everything, produce requests included, through the proxy;
* for the produce requests whose ordinal (1, 2, 3 ... in arrival order) ``drop`` accepts, the broker's answer
  is read and then thrown away: the client's connection is closed instead, as when an answer is lost after
  the broker appended. The client sees a reset connection (a retriable error) and retries;
* while ``bump_answers`` holds canned ``(status, JSON)`` answers, an epoch bump (``POST
  /native/v1/producers`` with a body) gets the first of them instead of reaching the broker; the bodies of
  every producer id request are kept in ``id_requests``.

It runs on the test's event loop; ``close`` stops it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

__all__ = ["LossyProxy"]

_PASSED_REQUEST = ("Content-Type", "Accept")


class LossyProxy:
    """Forwards to ``broker_url``; ``drop(n)`` says whether the answer of the n-th produce request is lost."""

    def __init__(self, broker_url: str, drop: Callable[[int], bool]) -> None:
        self._broker = broker_url
        self._drop = drop
        self._session: aiohttp.ClientSession | None = None
        self._server: TestServer | None = None
        self.produce_requests = 0
        self.bump_answers: list[tuple[int, dict[str, Any]]] = []
        self.id_requests: list[Any] = []
        self.dropped = 0
        self.url = ""

    async def start(self) -> str:
        """Listen on a free loopback port; answer the proxy's base URL."""
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()
        self.url = str(self._server.make_url("")).rstrip("/")
        return self.url

    async def close(self) -> None:
        if self._server is not None:
            await self._server.close()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/native/v1/metadata":
            return web.json_response({"error_code": 40400, "message": "HTTP 404 Not Found"}, status=404)
        assert self._session is not None
        if request.path == "/native/v1/producers":
            raw = await request.read()
            body = json.loads(raw) if raw.strip() else None
            self.id_requests.append(body)
            if body and self.bump_answers:
                status, canned = self.bump_answers.pop(0)
                return web.json_response(canned, status=status)
        produce = request.method == "POST" and request.path.endswith("/batches")
        ordinal = 0
        if produce:
            self.produce_requests += 1
            ordinal = self.produce_requests
        headers = {k: v for k, v in request.headers.items() if k in _PASSED_REQUEST}
        async with self._session.request(
            request.method, self._broker + request.path_qs, data=await request.read(), headers=headers
        ) as answer:
            body = await answer.read()
            passed = {
                k: v for k, v in answer.headers.items() if k.startswith("Tierlog-") or k == "Content-Type"
            }
        if produce and answer.status == 200 and self._drop(ordinal):
            self.dropped += 1
            transport = request.transport
            assert transport is not None
            transport.abort()  # the broker appended; its answer never reaches the client
            raise web.HTTPInternalServerError  # nothing is written: the connection is gone
        return web.Response(status=answer.status, body=body, headers=passed)
