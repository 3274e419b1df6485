"""The broker process's open-file limit: raised to the hard limit at start.

Every client connection, on either listener, holds a descriptor, and so do the open segments and indexes.
Many systems start services with a soft ``RLIMIT_NOFILE`` of 1024 while allowing far more as the hard
limit; Kafka's operators raise it (``ulimit -n 100000`` and up) before starting a broker. :func:`raise_limit`
does the same for this process at start: the soft limit goes up to the hard one (to ``fs.nr_open`` when the
hard limit is unlimited), never down. A broker allowed ``max.connections`` per listener whose limit stays
below what those need is named in a warning (a refused ``accept`` would otherwise be the first sign).
"""

from __future__ import annotations

import logging
import resource
from pathlib import Path

__all__ = ["DESCRIPTORS_KEPT", "raise_limit", "warn_if_short"]

log = logging.getLogger("tierlog.open_files")

#: Descriptors a broker needs besides its client connections: segments, indexes, logs, the store's
#: sockets. A rough floor for :func:`warn_if_short`, not a bound.
DESCRIPTORS_KEPT = 1024
_NR_OPEN = Path("/proc/sys/fs/nr_open")  # the kernel's ceiling of a process's descriptors (Linux)
_FALLBACK_CEILING = 1 << 20


def _ceiling(hard: int) -> int:
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(_NR_OPEN.read_text().strip())
    except (OSError, ValueError):
        return _FALLBACK_CEILING


def raise_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the soft limit in force afterwards.
    Idempotent; never raises (a refusal is logged and the limit left as it was)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as err:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, err)
            return soft
        log.info("open-file limit raised from %d to %d (the hard limit)", soft, target)
        return target
    return soft


def warn_if_short(connections: int) -> bool:
    """Log a warning when ``connections`` client connections plus :data:`DESCRIPTORS_KEPT` do not fit in
    the soft open-file limit; whether they fit. Never raises."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + DESCRIPTORS_KEPT
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return True
    log.warning(
        "the open-file limit (%d) is below the %d descriptors max.connections (%d connections in all) "
        "and the logs may need: raise it (ulimit -n, LimitNOFILE= in systemd) or lower max.connections",
        soft,
        needed,
        connections,
    )
    return False
