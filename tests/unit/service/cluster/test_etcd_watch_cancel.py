"""An etcd watch stops when its task is cancelled, even when the client drops the cancel.

aetcd waits for a watch's creation with ``asyncio.wait_for``; on Python 3.11 that answers the result and
drops the cancel when one arrives as the result does, and the watch then waited for ever (a security
store's close hung on it, once in about ten runs). The client here drops every cancel that arrives while
it creates the watch, as that race does; the store must still end the task and cancel the watch. It is
a fake in place of the store's connection because the race cannot be produced on demand with a real
etcd (it needs the cancel and the watch's creation in the same loop iteration); the real-etcd suites
(tests/integration/cluster, tests/integration/security/test_store.py) run the same code path.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tierlog.service.cluster.etcd_store import EtcdMetadataStore
from tierlog.service.settings.config import parse_metadata_uri


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False
        self._never = asyncio.Event()

    def __aiter__(self) -> _Handle:
        return self

    async def __anext__(self) -> Any:
        await self._never.wait()  # no event ever comes
        raise StopAsyncIteration

    async def cancel(self) -> None:
        self.cancelled = True


class _DroppingClient:
    """Creates a watch only when cancelled, and answers it as if the cancel had not come."""

    def __init__(self) -> None:
        self.creating = asyncio.Event()
        self.handles: list[_Handle] = []

    async def watch(self, key: bytes, **_: Any) -> _Handle:
        self.creating.set()
        # the cancel dropped, as Python 3.11's wait_for does when the result is ready at the same moment
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        handle = _Handle()
        self.handles.append(handle)
        return handle


async def test_a_cancel_dropped_while_the_watch_is_created_still_ends_the_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = EtcdMetadataStore(parse_metadata_uri("etcd://127.0.0.1:2379/unit"))
    client = _DroppingClient()

    async def connected() -> _DroppingClient:
        return client

    monkeypatch.setattr(store, "_connected", connected)
    events: list[object] = []

    async def consume() -> None:
        async for event in store.watch("security/", 1):
            events.append(event)

    task = asyncio.create_task(consume())
    await client.creating.wait()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)  # a hang is the failure, not a slow answer
    assert done and task.cancelled()
    assert [h.cancelled for h in client.handles] == [True] and events == []
