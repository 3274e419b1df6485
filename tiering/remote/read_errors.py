"""The errors and counters of the remote read path (:mod:`tierlog.tiering.remote.reader`).

Both errors are subclasses of the public kinds in :mod:`tierlog.wire.errors` (so the web layer maps them
with no extra code) and carry the object key, so an operator knows which object to look at.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tierlog.wire.errors import CorruptRecordError, NotFoundError

__all__ = ["RemoteObjectCorruptError", "RemoteObjectMissingError", "ReadStats"]


class RemoteObjectCorruptError(CorruptRecordError):
    """Bytes of a remote segment object failed a check (CRC, framing, a torn object, an index that
    disagrees with the log). Never retried: the bytes will not change under the same key.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"remote object {key}: {message}")
        self.key = key


class RemoteObjectMissingError(NotFoundError):
    """A segment object the manifest lists as readable is not in the bucket."""

    def __init__(self, key: str) -> None:
        super().__init__(f"remote object {key} is missing from the bucket although the manifest lists it")
        self.key = key


@dataclass(slots=True)
class ReadStats:
    """Counters of one :class:`~tierlog.tiering.remote.reader.RemoteReader`; touched only on the event loop
    thread.

    ``cache_hits``/``cache_misses`` count chunk lookups (a miss waited for a GET, its own or a shared one);
    ``remote_*`` count every GET the reader issued (chunks, oversized batches, indexes).
    """

    reads: int = 0
    sequential_reads: int = 0
    bytes_served: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    singleflight_joins: int = 0
    remote_requests: int = 0
    remote_bytes: int = 0
    remote_errors: int = 0
    oversized_reads: int = 0
    index_loads: int = 0
    index_hits: int = 0
    index_missing: int = 0
    index_invalid: int = 0
    index_fallbacks: int = 0
    readahead_fetches: int = 0
    readahead_hits: int = 0
    readahead_errors: int = 0
    readahead_skipped: int = 0
    readahead_unused: int = 0
    corrupt_errors: int = 0
    missing_errors: int = 0

    def as_dict(self) -> dict[str, int]:
        """A copy of the counters."""
        return asdict(self)
