"""A TCP proxy between a client and a broker that loses answers and resets connections on purpose.

Each accepted connection gets its own connection to the upstream port (opened when the client connects, so a
broker restarted on the same port is reached by the next connection; while it is down the client's
connection is reset at once). Two threads pump the bytes, one per direction. What goes wrong, decided with
one seeded :class:`random.Random` so a run can be replayed as far as thread scheduling allows:

* **a dropped answer**: bytes the broker sent are not forwarded; the client's side is closed instead. The
  broker has done the work (appended, for a produce) and the client never learns it: a lost answer.
* **a reset**: before forwarding bytes the client sent, both sides are closed with an RST (``SO_LINGER``
  0). The request may not have reached the broker, or only partly.

:meth:`ChaosProxy.drop_next_answer` drops exactly the next answer, whatever the rates, and reports it through
an event: the deterministic form a test uses to lose one chosen answer.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from dataclasses import dataclass

__all__ = ["ChaosProxy", "ChaosStats"]

CHUNK = 65536


@dataclass
class ChaosStats:
    """What the proxy did so far; read with the proxy's lock held (:meth:`ChaosProxy.stats`)."""

    connections: int = 0
    refused: int = 0  # client connections closed because the upstream did not accept
    dropped_answers: int = 0
    resets: int = 0


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN. Never raises."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class ChaosProxy:
    """Listens on 127.0.0.1 (``port`` 0: a free one, see :attr:`port`) and forwards every connection to
    ``127.0.0.1:upstream_port``, dropping an answer with probability ``drop_rate`` per chunk the upstream
    sends and resetting with probability ``reset_rate`` per chunk the client sends.

    Thread-safe: the rates and :meth:`drop_next_answer` may be changed from any thread while it runs.
    :meth:`close` stops accepting and ends every open connection; it is idempotent. Use it as a context
    manager.
    """

    def __init__(
        self,
        upstream_port: int,
        *,
        port: int = 0,
        seed: int = 0,
        drop_rate: float = 0.0,
        reset_rate: float = 0.0,
    ) -> None:
        self.upstream_port = upstream_port
        self.drop_rate = drop_rate
        self.reset_rate = reset_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stats = ChaosStats()
        self._drop_next: threading.Event | None = None
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept_loop, name="chaos-proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> ChaosStats:
        """A copy of the counters."""
        with self._lock:
            return ChaosStats(**vars(self._stats))

    def drop_next_answer(self) -> threading.Event:
        """Drop the next chunk any upstream sends (closing that client's side); the event returned is set
        once it has been dropped."""
        done = threading.Event()
        with self._lock:
            self._drop_next = done
        return done

    def close(self) -> None:
        """Stop accepting and close every connection; returns once the acceptor has ended. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_sockets = list(self._sockets)
        _close(self._listener)
        for sock in open_sockets:
            _close(sock)
        self._acceptor.join(10)

    def __enter__(self) -> ChaosProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), name="chaos-proxy-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        """Connect upstream for ``client`` and pump both ways until either side ends."""
        with self._lock:
            self._stats.connections += 1
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        except OSError:
            with self._lock:
                self._stats.refused += 1
            _reset(client)
            return
        upstream.settimeout(None)
        with self._lock:
            if self._closed:
                _close(client)
                _close(upstream)
                return
            self._sockets.update((client, upstream))
        pair = (client, upstream)
        back = threading.Thread(target=self._pump, args=(upstream, client, False, pair), daemon=True)
        back.start()
        self._pump(client, upstream, True, pair)
        back.join()
        with self._lock:
            self._sockets.difference_update(pair)

    def _pump(
        self, src: socket.socket, dst: socket.socket, to_broker: bool, pair: tuple[socket.socket, ...]
    ) -> None:
        """Forward ``src`` to ``dst`` until either ends, applying the chaos of this direction."""
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                if self._misfortune(to_broker):
                    for sock in pair:
                        if to_broker:
                            _reset(sock)
                        else:
                            _close(sock)
                    return
                dst.sendall(data)
        except OSError:
            pass
        for sock in pair:
            _close(sock)

    def _misfortune(self, to_broker: bool) -> bool:
        """Whether the chunk about to be forwarded is lost (and its connection ended); counts it."""
        with self._lock:
            if to_broker:
                if self._rng.random() < self.reset_rate:
                    self._stats.resets += 1
                    return True
                return False
            chosen = self._drop_next
            if chosen is not None:
                self._drop_next = None
            elif not self._rng.random() < self.drop_rate:
                return False
            self._stats.dropped_answers += 1
        if chosen is not None:
            chosen.set()
        return True
