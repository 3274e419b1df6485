"""Warming a file region's pages before the event loop ``sendfile``s it."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.tiering.log import FileSlice

__all__ = ["warm_pages"]

_WARM_CHUNK = 1 << 20
_warm_buffers = threading.local()


def warm_pages(region: FileSlice) -> FileSlice:
    """Read ``region`` once in this worker thread so its pages are cached when the event loop
    ``sendfile``s it: a cold segment then costs a disk read here, never a stall of the loop (Kafka's
    KAFKA-7504). Warm pages cost one memory copy. Returns ``region``; read errors are left to sendfile."""
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
