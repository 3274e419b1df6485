"""glibc allocator settings for a broker process.

A broker moves request bodies and fetch answers of about 1 MiB through Python ``bytes`` objects: the
transport's receive chunks (256 KiB), the HTTP parser's body chunks, JSON answers. With glibc's defaults
an allocation of 128 KiB or more may be served by a fresh ``mmap`` and returned with ``munmap`` when
freed, and the heap's top is given back to the kernel whenever 128 KiB of it are free; glibc moves both
thresholds as it sees large blocks freed, so which allocation pays depends on history. Every block that
comes from fresh pages costs a page fault per 4 KiB when it is first written, with the GIL held: under
four producers sending 1 MiB batches that was about a quarter of the event loop's GIL-held time, in the
HTTP parser alone (docs/benchmarks-http.md).

:func:`tune` fixes both thresholds (``mallopt``): blocks up to :data:`MMAP_THRESHOLD` come from the heap,
and the heap keeps up to :data:`TRIM_THRESHOLD` of free memory at its top instead of trimming it. Freed
blocks are then reused with their pages mapped. The cost is memory that stays mapped after a burst: at
most about :data:`TRIM_THRESHOLD` above what is in use, per allocator arena.

Operators who set ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment keep their
values (glibc reads them at start; :func:`tune` then changes nothing). Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune"]

log = logging.getLogger("tierlog.allocator")

MMAP_THRESHOLD = 16 * 1024 * 1024
TRIM_THRESHOLD = 64 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune(environ: dict[str, str] | None = None) -> bool:
    """Set glibc's mmap and trim thresholds for this process, unless the environment sets either.

    Returns True when both were set; False on another C library, when ``environ`` (default
    ``os.environ``) names either threshold, or when glibc refuses. Never raises.
    """
    env = os.environ if environ is None else environ
    if any(name in env for name in _ENVIRONMENT):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
    done = done and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    if not done:
        log.warning("glibc refused the allocator thresholds; running with its defaults")
    return done
