"""Bounded waits that a cancel always reaches, for the broker's and the client's background loops.

``asyncio.wait_for`` on Python 3.11 answers the result and drops a cancel that arrives as the awaited
event is set: a close that sets a loop's stop event and cancels its task at once could leave the task
running (a close awaiting it then hangs). ``asyncio.timeout`` has no such gap; this is it, said once.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["wait_signalled"]


class _Waitable(Protocol):
    async def wait(self) -> object: ...


async def wait_signalled(waitable: _Waitable, timeout: float | None) -> bool:  # noqa: ASYNC109
    """Wait up to ``timeout`` seconds (None: no bound) for ``waitable.wait()`` (an ``asyncio.Event``, or
    an ``asyncio.Condition`` whose lock the caller holds); True when it returned, False on the timeout.
    A cancel is never lost. Raises only what ``wait()`` raises, and CancelledError."""
    try:
        async with asyncio.timeout(timeout):
            await waitable.wait()
    except TimeoutError:
        return False
    return True
