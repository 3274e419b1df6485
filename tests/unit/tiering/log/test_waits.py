"""wait_signalled: True when the event is set in time, False on the timeout, and a cancel that arrives as
the event is set still cancels (Python 3.11's asyncio.wait_for answers the result and drops it)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tierlog.tiering.log.waits import wait_signalled


async def test_it_answers_whether_the_event_was_set_in_time() -> None:
    event = asyncio.Event()
    assert await wait_signalled(event, 0.01) is False
    event.set()
    assert await wait_signalled(event, 0.01) is True
    assert await wait_signalled(event, None) is True


async def test_a_condition_is_waited_on_under_its_lock() -> None:
    condition = asyncio.Condition()

    async def notify() -> None:
        async with condition:
            condition.notify_all()

    async with condition:
        notifier = asyncio.create_task(notify())
        assert await wait_signalled(condition, 30) is True
    await notifier


async def test_a_cancel_that_comes_as_the_event_is_set_is_not_lost() -> None:
    event = asyncio.Event()
    entered = asyncio.Event()

    async def waiter() -> str:
        entered.set()
        await wait_signalled(event, 30)
        return "went on"

    task = asyncio.create_task(waiter())
    await entered.wait()
    await asyncio.sleep(0)  # the waiter is parked on the event
    event.set()  # its wake-up is scheduled...
    task.cancel()  # ...and the cancel arrives in the same loop iteration
    done, _ = await asyncio.wait({task}, timeout=30)
    assert done and task.cancelled()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for drops the cancel only before Python 3.12")
async def test_the_same_race_drops_the_cancel_with_wait_for() -> None:
    """The reason for the helper, shown on this Python: wait_for lets the task go on (3.11)."""
    event = asyncio.Event()
    entered = asyncio.Event()

    async def waiter() -> str:
        entered.set()
        await asyncio.wait_for(event.wait(), 30)
        return "went on"

    task = asyncio.create_task(waiter())
    await entered.wait()
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    assert done and not task.cancelled() and task.result() == "went on"
