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

Operators who set ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment, or either
threshold in ``GLIBC_TUNABLES``, keep their values (glibc reads them at start; :func:`tune` then changes
nothing). Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune"]

log = logging.getLogger("tierlog.allocator")

MMAP_THRESHOLD = 16 * 1024 * 1024
TRIM_THRESHOLD = 64 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def tune(environ: dict[str, str] | None = None) -> bool:
    """Set glibc's mmap and trim thresholds for this process, unless the environment sets either.

    Returns True when both were set; False on another C library, when ``environ`` (default
    ``os.environ``) sets either threshold (``MALLOC_*_THRESHOLD_`` or ``GLIBC_TUNABLES``), or when glibc
    refuses. Never raises.
    """
    env = os.environ if environ is None else environ
    tunables = env.get("GLIBC_TUNABLES", "")
    if any(name in env for name in _ENVIRONMENT) or any(name in tunables for name in _TUNABLES):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, ValueError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        log.warning("glibc refused the mmap threshold; its allocator keeps its defaults")
        return False
    if mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        log.warning("glibc refused the trim threshold; only the mmap threshold is set")
        return False
    return True
