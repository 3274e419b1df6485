"""An event loop in a background thread that a synchronous client owns.

The synchronous :class:`~client.Producer` and :class:`~client.Consumer` run their asyncio core here: calls
from any thread hand a coroutine to the loop and wait for its result; ``close`` stops the loop and joins the
thread. The thread is a daemon only so that a program that forgets ``close`` can still exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from tierlog.client.errors import ClientClosedError
from tierlog.wire.errors import IllegalStateError

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """One event loop in one thread. ``run`` and ``submit`` are thread-safe; ``close`` is idempotent."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._closed = False
        self._kept: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    def keep(self, task: asyncio.Task[T]) -> asyncio.Task[T]:
        """Hold a strong reference to ``task`` until it is done, so that it (and what it refers to) lives as
        long as the loop runs it. Call on the loop thread. Answers ``task``."""
        self._kept.add(task)
        task.add_done_callback(self._kept.discard)
        return task

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; answer a future of its result.

        Raises:
            ClientClosedError: the loop is closed.
        """
        if self._closed:
            coro.close()
            raise ClientClosedError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (re-raising its exception).

        Raises:
            IllegalStateError: called from the loop's own thread (a callback), which would deadlock.
            TimeoutError: ``timeout`` seconds passed (the coroutine is cancelled).
        """
        if self.in_loop_thread:
            coro.close()
            raise IllegalStateError("a blocking client call from a client callback would deadlock")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout} s") from None
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop (cancelling what still runs) and join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if not self.in_loop_thread:
                self._thread.join()
