"""Producers their user left open are closed when the interpreter exits, as Kafka's clients do.

A synchronous :class:`~tierlog.client.sync_producer.Producer` registers itself here (by weak reference) when
it starts and unregisters when it closes. At interpreter exit an ``atexit`` hook closes every producer still
open, each with a bounded wait (:func:`exit_close_timeout`): what can be delivered within the bound is
delivered, the rest fails with ``ClientClosedError``, and a :class:`UnclosedProducerWarning` names how many
records were not delivered. A producer closed at exit with nothing lost says so only as a ``ResourceWarning``
(hidden unless warnings are enabled, as Python's own unclosed files are).

The hook runs while the producers' loop threads (daemon threads) are still alive, after the main thread's
code and the non-daemon threads have ended. Safe to call from any thread; ``close_open_producers`` is
idempotent (a closed producer is not registered).
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Protocol

__all__ = [
    "EXIT_CLOSE_MAX_S",
    "UnclosedProducerWarning",
    "close_open_producers",
    "exit_close_timeout",
    "track",
    "untrack",
]

# The longest a producer left open waits at interpreter exit for its records to be delivered.
EXIT_CLOSE_MAX_S = 5.0


class UnclosedProducerWarning(UserWarning):
    """A producer was not closed by its user and records were lost when the interpreter exited."""


class _ClosesAtExit(Protocol):
    def close_at_exit(self) -> None: ...


_open: weakref.WeakSet[_ClosesAtExit] = weakref.WeakSet()
_lock = threading.Lock()
_hooked = False


def exit_close_timeout(delivery_timeout_ms: int) -> float:
    """Seconds a producer left open may spend delivering at exit: ``delivery_timeout_ms`` capped at
    :data:`EXIT_CLOSE_MAX_S`. Pure."""
    return max(0.0, min(delivery_timeout_ms / 1000, EXIT_CLOSE_MAX_S))


def track(producer: _ClosesAtExit) -> None:
    """Close ``producer`` at interpreter exit unless it is closed (:func:`untrack`) before. Idempotent."""
    global _hooked
    with _lock:
        _open.add(producer)
        if not _hooked:
            atexit.register(close_open_producers)
            _hooked = True


def untrack(producer: _ClosesAtExit) -> None:
    """Forget ``producer`` (it was closed). Idempotent."""
    with _lock:
        _open.discard(producer)


def close_open_producers() -> None:
    """Close every producer still registered, each with its bounded wait; the ``atexit`` hook."""
    with _lock:
        producers = list(_open)
        _open.clear()
    for producer in producers:
        producer.close_at_exit()
