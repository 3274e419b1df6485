"""A counting HTTP proxy in front of the S3 server: every request Spark's driver or executors send is
recorded (method, path, query, Range), so tests assert on the requests that really reached the store,
whatever process sent them.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # unquoted, without the query
    query: str
    range: str | None


class CountingProxy:
    """Forwards to ``upstream`` (``http://host:port``) and records every request. Thread-safe."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _forward(self) -> None:
                path, _, query = self.path.partition("?")
                proxy._record(Seen(self.command, unquote(path), query, self.headers.get("Range")))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream = http.client.HTTPConnection(proxy._host, proxy._port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def gets(self, suffix: str) -> list[Seen]:
        """GET requests for object keys ending with ``suffix`` (``.log``, ``.index``, ``.json`` ...)."""
        return [s for s in self.seen() if s.method == "GET" and s.path.endswith(suffix)]


@contextmanager
def counting_proxy(upstream: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
