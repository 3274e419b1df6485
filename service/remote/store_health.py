"""What the broker knows about its object store, said once and in the operator's words.

The store is checked (one ``list`` request) when the broker starts and before a topic with
``remote.storage.enable=true`` is created. A store that cannot be used (a missing bucket, bad or missing
credentials, an unreachable endpoint) is named by one ERROR line, in ``/ready``'s details and in the v3
cluster answer. Readiness holds, as a Kafka broker starts without its remote store: the broker serves its
local data; creating a tiered topic is refused naming the cause.

Upload failures of every partition are rate-limited into one WARNING line per store per
``FAILURE_LOG_INTERVAL_S`` (with how many were held back); the first pass that fails nowhere after an
outage logs one INFO line ``uploads resumed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tierlog.service.log_limit import LogLimiter
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.translate import describe_store_error

__all__ = ["CHECK_TIMEOUT_S", "FAILURE_LOG_INTERVAL_S", "StoreHealth", "probe"]

log = logging.getLogger("tierlog.remote")

FAILURE_LOG_INTERVAL_S = 60.0
CHECK_TIMEOUT_S = 10.0  # as the first manifest read at start (tier.py): a slow first client creation fits


async def probe(store: ObjectStore) -> None:
    """One request that needs the bucket, the credentials and the endpoint: the first page of a listing.

    Raises: the store's tierlog kind (its ``__cause__`` is the vendor error).
    """
    listing = store.list("")
    try:
        async for _ in listing:
            break
    finally:
        close = getattr(listing, "aclose", None)
        if close is not None:
            await close()


class StoreHealth:
    """The health of one broker's object store (``where`` names it: URI and endpoint, no credentials).

    ``problem`` is the cause the last check or failed upload found (None while the store works);
    ``failing`` whether an upload pass failed since the last one that did not. Event-loop only.
    """

    def __init__(
        self,
        where: str,
        *,
        interval_s: float = FAILURE_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.where = where
        self.problem: str | None = None
        self.failing = False
        self._interval_s = interval_s
        self._clock = clock
        self._limiter = LogLimiter(interval_s, clock=clock)

    async def check(self, store: ObjectStore, *, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
        """Probe ``store`` (give it the backend, not a retrying wrapper: one answer, fast). Returns the
        problem found (None: usable); a new problem is logged at ERROR, a cleared one at INFO. Never
        raises but ``CancelledError``; safe to call again (idempotent but for the log lines)."""
        try:
            await asyncio.wait_for(probe(store), timeout_s)
        except TimeoutError:
            return self._found(f"the store did not answer within {timeout_s:g} s (a hung endpoint?)")
        except Exception as err:
            return self._found(describe_store_error(err))
        if self.problem is not None and not self.failing:
            log.info("object store %s: usable again", self.where)
            self.problem = None
        return None

    def _found(self, problem: str) -> str:
        if problem != self.problem:
            log.error(
                "object store %s cannot be used: %s; tiered partitions keep their data locally and "
                "new tiered topics are refused until it is fixed",
                self.where,
                problem,
            )
        self.problem = problem
        return problem

    def upload_failed(self, label: str, err: BaseException) -> None:
        """An upload pass of partition ``label`` failed with ``err``: logged through the limiter (one
        line per interval for the whole store). Never raises."""
        self.failing = True
        self.problem = describe_store_error(err)
        held = self._limiter.admit()
        if held is None:
            return
        more = f"; {held} more failures held back" if held else ""
        log.warning(
            "object store %s: uploads failing: %s (%s: %s%s)", self.where, self.problem, label, err, more
        )

    def pass_succeeded(self) -> None:
        """An upload pass over at least one partition failed nowhere: after an outage, logs ``uploads
        resumed`` once and clears the problem. Idempotent."""
        if self.failing:
            log.info("object store %s: uploads resumed", self.where)
            self.problem = None
        self.failing = False
        self._limiter = LogLimiter(self._interval_s, clock=self._clock)
