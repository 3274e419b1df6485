"""Broker-wide byte budgets: bounded memory for work the broker holds on behalf of requests.

Two budgets exist, each sized by a setting (Kafka's ``queued.max.request.bytes`` is the model):

* ``rest.produce.conversion.max.bytes``: bytes of REST JSON produce bodies being converted to batches at once;
* ``queued.max.request.bytes``: bytes of acks=0 native produce bodies waiting for their background append.

A request that does not fit is refused at once with 503 (50301, retriable) instead of queueing: memory
stays bounded however many clients send at once. A single request larger than the whole budget is let
through only when nothing else holds the budget, so it cannot starve and cannot stack on others.
A budget lives on the event loop: not thread-safe, and never awaited on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tierlog.tiering.errors import UnavailableError

__all__ = ["ACKS0_BUDGET", "CONVERSION_BUDGET", "ByteBudget"]


class ByteBudget:
    """Bytes in use out of a fixed ``limit``; ``acquire`` refuses instead of waiting."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.in_use = 0
        self.peak = 0  # the most bytes ever in use at once
        self.refused = 0  # how many acquires were refused

    def acquire(self, size: int) -> None:
        """Take ``size`` bytes of the budget; pair with :meth:`release`. Not idempotent.

        Raises:
            UnavailableError: (503, 50301, retriable) the budget cannot hold ``size`` more bytes now.
        """
        if self.in_use and self.in_use + size > self.limit:
            self.refused += 1
            raise UnavailableError(
                f"{self.name} is full ({self.in_use} of {self.limit} bytes in use, this request needs "
                f"{size}); retry shortly"
            )
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken by :meth:`acquire`. Raises ValueError on a release never taken."""
        if size > self.in_use:
            raise ValueError(f"{self.name}: releasing {size} bytes, only {self.in_use} in use")
        self.in_use -= size

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """``size`` bytes of the budget for the ``with`` block. Raises UnavailableError as :meth:`acquire`."""
        self.acquire(size)
        try:
            yield
        finally:
            self.release(size)


CONVERSION_BUDGET: web.AppKey[ByteBudget] = web.AppKey("tierlog.rest_conversion_budget", ByteBudget)
ACKS0_BUDGET: web.AppKey[ByteBudget] = web.AppKey("tierlog.acks0_budget", ByteBudget)
