"""Warming a file region's pages before the event loop ``sendfile``s it."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.tiering.log import FileSlice

__all__ = ["resident", "warm_pages"]

_WARM_CHUNK = 1 << 20
# Below this a read is cheaper than asking: mapping the region and mincore cost some 35 us here, a read
# of 1 MiB 75 us when its bytes are in the CPU cache and 200-280 us when not (cold memory)
_ASK_FROM_BYTES = 256 << 10
_warm_buffers = threading.local()


class _Libc:
    """The C library calls :func:`resident` makes (Linux): ``mmap``, ``mincore``, ``munmap``."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library this process already runs on
        self.mmap = libc.mmap
        self.mmap.argtypes = (
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64
        )  # fmt: skip
        self.mmap.restype = ctypes.c_void_p
        self.mincore = libc.mincore
        self.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
        self.mincore.restype = ctypes.c_int
        self.munmap = libc.munmap
        self.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        self.munmap.restype = ctypes.c_int


def _load_libc() -> _Libc | None:
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        return _Libc()
    except (OSError, AttributeError):
        return None


_libc = _load_libc()
_MAP_FAILED = 2**64 - 1  # (void *) -1
_LOW_BIT = bytes(i & 1 for i in range(256))  # mincore's residency bit of each page's byte (the rest reserved)


def warm_pages(region: FileSlice) -> FileSlice:
    """Make sure ``region``'s pages are cached, in this worker thread, before the event loop
    ``sendfile``s it: a cold segment then costs a disk read here, never a stall of the loop (Kafka's
    KAFKA-7504). A region of 256 KiB or more whose pages are all cached (:func:`resident`, the usual
    case) is left as it is; otherwise it is read once (a memory copy for the pages that were cached).
    Returns ``region``; read errors are left to sendfile."""
    if region.size >= _ASK_FROM_BYTES and resident(region.fd, region.position, region.size):
        return region
    buffer = getattr(_warm_buffers, "buffer", None)
    if buffer is None:
        buffer = _warm_buffers.buffer = memoryview(bytearray(_WARM_CHUNK))
    position, left = region.position, region.size
    try:
        while left > 0:
            got = os.preadv(region.fd, [buffer[: min(left, _WARM_CHUNK)]], position)
            if got <= 0:
                break
            position, left = position + got, left - got
    except OSError:
        pass
    return region


def resident(fd: int, position: int, size: int) -> bool:
    """Whether every page of ``size`` bytes of ``fd`` from ``position`` is in the page cache, asked of the
    kernel (``mincore`` on a read-only shared mapping of the region, which touches no page) without copying
    them. Thread-safe; never raises.

    False when it cannot tell: not 64-bit Linux, a failed mapping, or a file this process neither owns nor
    runs as root for (Linux 5.0 and later answer "all cached" for those, so as not to reveal another
    user's page cache). A region past the end of the file is not cached either.
    """
    if size <= 0:
        return True
    if _libc is None:
        return False
    try:
        owner = os.fstat(fd).st_uid
    except OSError:
        return False
    if owner != os.geteuid() and os.geteuid() != 0:
        return False
    start = position - position % mmap.ALLOCATIONGRANULARITY
    length = position + size - start
    address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address is None or address == _MAP_FAILED:
        return False
    try:
        vector = (ctypes.c_ubyte * -(-length // mmap.PAGESIZE))()
        if _libc.mincore(address, length, vector) != 0:
            return False
        return b"\0" not in bytes(vector).translate(_LOW_BIT)
    finally:
        _libc.munmap(address, length)
