"""Sending a file region (stored record batches) on a plaintext transport with ``sendfile``: the bytes go
from the page cache to the socket without a copy in this process. The native HTTP fetch and the Kafka
listener's Fetch both answer this way; TLS transports cannot, and their callers copy instead."""

from __future__ import annotations

import asyncio
import os
from typing import IO, TYPE_CHECKING, cast

from tierlog.wire.errors import CorruptRecordError

if TYPE_CHECKING:
    from tierlog.tiering.log import FileSlice

__all__ = ["sendfile_region"]


class _RegionFile:
    """A private read-only descriptor for ``loop.sendfile``, which seeks its file: the slice's own ``fd``
    shares its file position with the log's descriptor, so sendfile gets a fresh open of the same file."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.mode = "rb"

    @classmethod
    def reopen(cls, fd: int) -> _RegionFile | None:
        """Open ``fd``'s file again through procfs (an inode already open: no device I/O), or None."""
        try:
            return cls(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            return None

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        os.close(self._fd)


async def sendfile_region(transport: asyncio.BaseTransport | None, region: FileSlice) -> bool:
    """Send ``region``'s bytes on ``transport`` with ``loop.sendfile`` (after whatever the transport
    still buffers). True once they are sent; False when nothing was sent because this transport cannot
    (TLS, no native ``sendfile``, no transport): the caller then copies the bytes. Not safe to call
    concurrently on one transport.

    Raises:
        ConnectionError: the transport is closing or the peer left midway.
        CorruptRecordError: the file ended before the region did (the log was truncated meanwhile);
            the bytes sent so far are a partial answer, so the caller must close the connection.
    """
    if transport is None or transport.get_extra_info("sslcontext") is not None:
        return False
    if transport.is_closing():
        raise ConnectionError("the connection is closing")
    if not region.size:
        return True
    private = _RegionFile.reopen(region.fd)
    if private is None:
        return False
    try:
        loop = asyncio.get_running_loop()
        file = cast("IO[bytes]", private)
        try:
            sent = await loop.sendfile(
                cast("asyncio.WriteTransport", transport), file, region.position, region.size, fallback=False
            )
        except NotImplementedError:
            return False
        except RuntimeError as err:  # asyncio's "transport is closing" and "not supported" alike
            if transport.is_closing():
                raise ConnectionError(str(err)) from None
            return False
    finally:
        private.close()
    if sent < region.size:
        raise CorruptRecordError(f"the segment file ended {region.size - sent} bytes before the region did")
    return True
