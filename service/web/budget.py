"""Broker-wide byte budgets: bounded memory for work the broker holds on behalf of requests.

Two budgets exist, each sized by a setting (Kafka's ``queued.max.request.bytes`` is the model):

* ``rest.produce.conversion.max.bytes``: bytes of REST JSON produce bodies being converted to batches at once;
* ``queued.max.request.bytes``: bytes of acks=0 native produce bodies waiting for their background append.

A request that does not fit is refused at once with 503 (50301, retriable) instead of queueing: memory
stays bounded however many clients send at once. A single request larger than the whole budget is let
through only when nothing else holds the budget, so it cannot starve and cannot stack on others.
A hold can grow once the request shows what it will cost (:meth:`Hold.resize`): the REST produce route
holds the declared ``Content-Length`` before reading the body, then its estimate of the conversion's
memory before converting. A hold grows when it fits beside the others, or when it is the oldest hold: two
requests that both read their bodies under the budget would otherwise refuse each other's growth forever,
under a steady flood none would ever convert. So the request that has waited longest always progresses,
and bytes in use stay below ``limit`` plus one request's size.
A budget lives on the event loop: not thread-safe, and never awaited on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from tierlog.wire.errors import UnavailableError

__all__ = ["ACKS0_BUDGET", "CONVERSION_BUDGET", "ByteBudget", "Hold"]


class ByteBudget:
    """Bytes in use out of a fixed ``limit``; ``acquire`` refuses instead of waiting."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.in_use = 0
        self.peak = 0  # the most bytes ever in use at once
        self.refused = 0  # how many acquires were refused
        self._holds: dict[int, Hold] = {}  # the live holds, oldest first

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

    def resize(self, held: int, size: int, *, oldest: bool = False) -> None:
        """Turn ``held`` bytes (taken by :meth:`acquire`) into ``size`` bytes. Shrinking always succeeds;
        growing follows :meth:`acquire`'s rule with the other holders' bytes (refused when others hold
        bytes and they plus ``size`` pass the limit), except that the ``oldest`` hold always grows. Not
        idempotent.

        Raises:
            UnavailableError: (503, 50301, retriable) the hold cannot grow now (it stays as it is).
            ValueError: ``held`` is more than the bytes in use, or ``size`` is negative.
        """
        if held > self.in_use or size < 0:
            raise ValueError(f"{self.name}: resizing a hold of {held} bytes to {size}, {self.in_use} in use")
        others = self.in_use - held
        if size > held and others and others + size > self.limit and not oldest:
            self.refused += 1
            raise UnavailableError(
                f"{self.name} is full ({others} of {self.limit} bytes in use by other requests, this request "
                f"needs {size}); retry shortly"
            )
        self.in_use = others + size
        self.peak = max(self.peak, self.in_use)

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken by :meth:`acquire`. Raises ValueError on a release never taken."""
        if size > self.in_use:
            raise ValueError(f"{self.name}: releasing {size} bytes, only {self.in_use} in use")
        self.in_use -= size

    @contextmanager
    def hold(self, size: int) -> Iterator[Hold]:
        """``size`` bytes of the budget for the ``with`` block, as a :class:`Hold` that can be resized; the
        bytes it holds at the end are given back. Raises UnavailableError as :meth:`acquire`."""
        self.acquire(size)
        held = Hold(self, size)
        self._holds[id(held)] = held
        try:
            yield held
        finally:
            del self._holds[id(held)]
            self.release(held.size)

    def _is_oldest(self, held: Hold) -> bool:
        """``held`` is the oldest live hold and no bytes are taken outside holds (their age is unknown)."""
        first = next(iter(self._holds.values()), None)
        return first is held and sum(h.size for h in self._holds.values()) == self.in_use


class Hold:
    """Bytes one request holds of a :class:`ByteBudget`, made by :meth:`ByteBudget.hold`."""

    def __init__(self, budget: ByteBudget, size: int) -> None:
        self.budget = budget
        self.size = size

    def resize(self, size: int) -> None:
        """Hold ``size`` bytes instead: it fits beside the other holders' bytes, or this is the oldest live
        hold of the budget (see the module docstring). Raises UnavailableError as
        :meth:`ByteBudget.resize` (the hold is then unchanged)."""
        self.budget.resize(self.size, size, oldest=self.budget._is_oldest(self))
        self.size = size


CONVERSION_BUDGET: web.AppKey[ByteBudget] = web.AppKey("tierlog.rest_conversion_budget", ByteBudget)
ACKS0_BUDGET: web.AppKey[ByteBudget] = web.AppKey("tierlog.acks0_budget", ByteBudget)
