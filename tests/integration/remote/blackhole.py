"""A TCP proxy on 127.0.0.1 that can blackhole its target: connections are accepted and what they send is
read and dropped, but nothing ever comes back (a firewall that drops packets, a hung load balancer).

    async with BlackholeProxy("127.0.0.1", port) as proxy:
        proxy.endpoint_url          # point the client here
        proxy.blackhole()           # every connection, open or new, goes silent
        proxy.restore()             # new connections reach the target again

Connections that went silent stay silent after :meth:`restore` (their requests were lost): the client
must time them out, as it must in production. Every task the proxy starts is cancelled and awaited on
exit.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["BlackholeProxy"]

_CHUNK = 65536


class _Connection:
    def __init__(self) -> None:
        self.silent = False


class BlackholeProxy:
    """Forward TCP connections to ``host:port`` until switched into a blackhole. Event-loop only."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.blackholed = False
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # accepted connections not yet closed

    @property
    def endpoint_url(self) -> str:
        assert self._server is not None, "proxy not started"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> BlackholeProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # a task cancelled before its first step never ran its ``finally``: close its connection here (left
        # open, it was collected after the test's loop had closed: "loop is closed" / "unclosed transport")
        for writer in list(self._writers):
            await _close(writer)
        await self._server.wait_closed()

    def blackhole(self) -> None:
        """From now on no connection, open or new, answers anything."""
        self.blackholed = True
        for connection in self._connections:
            connection.silent = True

    def restore(self) -> None:
        """New connections reach the target again (silent ones stay silent)."""
        self.blackholed = False

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        connection = _Connection()
        connection.silent = self.blackholed
        self._connections.add(connection)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            if connection.silent:
                await _drain_forever(reader)
                return
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            async with asyncio.TaskGroup() as group:
                group.create_task(_pump(reader, upstream_writer, connection))
                group.create_task(_pump(upstream_reader, writer, connection))
        except (OSError, ExceptionGroup):
            pass  # a peer went away: the connection ends, as a real network path's would
        finally:
            self._connections.discard(connection)
            # close both ends before awaiting either: a cancel that lands in the first wait must not leave the
            # other transport open, to be collected after the loop has closed ("loop is closed")
            ends = [w for w in (writer, upstream_writer) if w is not None]
            for w in ends:
                w.close()
            self._writers.discard(writer)
            for w in ends:
                await _close(w)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def _drain_forever(reader: asyncio.StreamReader) -> None:
    """Read and drop everything until the peer closes."""
    while await reader.read(_CHUNK):
        pass


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection) -> None:
    """Copy ``reader`` to ``writer`` until EOF; once ``connection`` is silent, drop instead of copying."""
    while data := await reader.read(_CHUNK):
        if connection.silent:
            continue
        writer.write(data)
        await writer.drain()
    if not connection.silent:
        writer.write_eof()
