"""Reusable receive buffers for large native produce bodies.

``Request.read`` builds every body twice: it grows a ``bytearray`` chunk by chunk, then copies it into a
fresh ``bytes``. For a 1 MiB batch both allocations are fresh memory, so each request also pays a few
hundred page faults, all with the GIL held on the event loop thread. Under four producers that was the
largest single cost on the loop (py-spy: about a third of the GIL-held samples of the native produce
path, see docs/benchmarks-http.md). Here a body with a declared ``Content-Length`` is copied once, chunk
by chunk as the transport delivers it, into a buffer kept from an earlier request, whose pages are
already mapped.

Ownership is what makes reuse safe. :meth:`BodyBuffers.read` hands out a :class:`Lease`: a read-only view
of exactly the body, and the buffer under it. The request handler gives the lease back (:meth:`Lease.close`)
only once nothing can read the buffer any more, which for the produce route means the append's worker
call has ended. A handler cancelled while a worker may still read the buffer calls
:meth:`Lease.abandon` instead: the buffer is then never reused and goes away with its last reference.

Bounds: buffers are kept for bodies up to :data:`LARGEST` bytes, at most :data:`KEEP_BYTES` of them in
total. A larger body gets a buffer of its own that is not kept. A buffer is allocated whole when a
request's headers arrive, before its body: so at most :data:`LEASE_BYTES` are leased at once, and
:meth:`BodyBuffers.read` answers None beyond that (the caller reads the body the ordinary way, whose
memory grows only with the bytes that arrive), so that clients sending headers alone cannot make the
broker hold ``max.connections`` times ``max.request.size``. A pool lives on the event loop: not
thread-safe.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from tierlog.wire.errors import BadRequestError

__all__ = ["BODY_BUFFERS", "KEEP_BYTES", "LARGEST", "LEASE_BYTES", "BodyBuffers", "Lease"]

LARGEST = 16 * 1024 * 1024  # bodies larger than this get a buffer that is not kept
KEEP_BYTES = 32 * 1024 * 1024  # free buffers kept, in bytes of capacity
LEASE_BYTES = 64 * 1024 * 1024  # buffers leased at once, in bytes of capacity
_GRAIN = 256 * 1024  # capacities are multiples of this, so that bodies of similar sizes share buffers


class Lease:
    """A body read into a pooled buffer: ``view`` is read-only and exactly the body's bytes."""

    __slots__ = ("_buffer", "_pool", "view")

    def __init__(self, pool: BodyBuffers, buffer: bytearray, size: int) -> None:
        self._pool: BodyBuffers | None = pool
        self._buffer = buffer
        self.view = memoryview(buffer)[:size].toreadonly()
        pool.leased(len(buffer))

    def close(self) -> None:
        """Give the buffer back for reuse. Only when nothing reads ``view`` any more. Idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.returned(len(self._buffer))
            pool.give(self._buffer)

    def abandon(self) -> None:
        """Never reuse the buffer (a worker thread may still read it); it is freed with its last reference.
        Idempotent; ``close`` afterwards does nothing."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.returned(len(self._buffer))


class BodyBuffers:
    """Free buffers, largest capacity last; see the module docstring."""

    def __init__(
        self, *, largest: int = LARGEST, keep_bytes: int = KEEP_BYTES, lease_bytes: int = LEASE_BYTES
    ) -> None:
        self.largest = largest
        self.keep_bytes = keep_bytes
        self._free: list[bytearray] = []
        self._free_bytes = 0
        self.lease_bytes = lease_bytes
        self.leased_bytes = 0  # capacity of the buffers leased now
        self.idle = asyncio.Event()  # set while no buffer is leased
        self.idle.set()
        self.reused = 0  # leases served from a kept buffer
        self.fresh = 0  # leases that needed a new buffer
        self.declined = 0  # bodies left to the ordinary read: the leased bytes were at their bound

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes: the smallest kept one that fits, else a new one."""
        for i, buffer in enumerate(self._free):
            if len(buffer) >= size:
                del self._free[i]
                self._free_bytes -= len(buffer)
                self.reused += 1
                return buffer
        self.fresh += 1
        return bytearray(-(-max(size, 1) // _GRAIN) * _GRAIN)

    def give(self, buffer: bytearray) -> None:
        """Keep ``buffer`` for a later body if it is small enough and the pool has room; else drop it."""
        size = len(buffer)
        if size > self.largest or self._free_bytes + size > self.keep_bytes:
            return
        self._free.append(buffer)
        self._free.sort(key=len)
        self._free_bytes += size

    def leased(self, size: int) -> None:
        self.leased_bytes += size
        self.idle.clear()

    def returned(self, size: int) -> None:
        self.leased_bytes -= size
        if not self.leased_bytes:
            self.idle.set()

    async def read(self, request: web.Request, size: int) -> Lease | None:
        """Read the ``size``-byte body of ``request`` (its declared ``Content-Length``, not encoded) into
        a buffer; None, reading nothing, when the leased buffers already hold :attr:`lease_bytes`.

        On any failure the buffer is given back (nothing else has seen it).

        Raises:
            BadRequestError: (40001) the body ended early.
        """
        if self.leased_bytes and self.leased_bytes + size > self.lease_bytes:
            self.declined += 1
            return None
        buffer = self.take(size)
        lease = Lease(self, buffer, size)
        try:
            await _fill(request, memoryview(buffer), size)
        except BaseException:
            lease.close()
            raise
        return lease


async def _fill(request: web.Request, target: memoryview, size: int) -> None:
    content = request.content
    # as Request.read does: let the transport buffer the whole body instead of pausing per 64 KiB
    content.set_read_chunk_size(size)
    position = 0
    while position < size:
        # one transport chunk at a time (readany would first join what is buffered: another copy)
        chunk, _ = await content.readchunk()
        if not chunk:
            raise BadRequestError(f"request body ended after {position} of {size} bytes")
        end = position + len(chunk)
        if end > size:  # aiohttp stops at Content-Length; guard the copy anyway
            raise BadRequestError(f"request body is longer than its Content-Length {size}")
        target[position:end] = chunk
        position = end


BODY_BUFFERS: web.AppKey[BodyBuffers] = web.AppKey("tierlog.body_buffers", BodyBuffers)
