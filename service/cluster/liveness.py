"""Failure detection faster than the broker session: peers' evidence, confirmed against the store.

A broker's etcd lease (``broker.session.timeout.ms``) is the last resort for noticing it is gone. Before
that, every broker watches what its own calls to the others show (design note 0017):

* a peer call refused, reset or unanswered (:class:`~tierlog.service.cluster.peers.PeerClient` reports it),
  or a replica fetch still unanswered well past its long poll (the follower's watchdog reports it), makes
  the broker at that URL a **suspect** for ``broker.session.timeout.ms``;
* besides, every :data:`WATCH_INTERVAL_S` the active controller tries a TCP connection to every other
  registered broker, and every other broker to the controller: a refused one makes that broker a suspect
  (so a broker nobody calls, the controller of a cluster of unreplicated topics or a dead follower, is
  found as fast; a connection costs the target one accept);
* a suspect is then **confirmed** or left alone, every :data:`CHECK_INTERVAL_S` while the suspicion lasts:

  - **refused** (strong evidence): a TCP connection to the address the suspect registered is refused, twice
    :data:`REPROBE_S` apart, while its registration is still in the store. A broker registers only once it
    listens, so nothing that is alive refuses: the process is gone (killed, crashed) or closing.
  - **silent** (weak evidence, a slow answer, confirmed only by the store): the suspect's lease has gone
    without a keep-alive for at least :func:`silence_limit_s` (four heartbeats, at least 2 s), as the store
    itself tells (``LeaseTimeToLive``). A broker that is slow under load still renews its lease and is never
    fenced for it; a paused or frozen one stops renewing and is.

A confirmed suspect is **fenced**: its lease is revoked, which deletes its registration (and the
controller key when it held it), exactly what the lease's expiry would have done, only sooner; the
controller then moves its partitions with new leader epochs as for any broker gone. A paused broker that
resumes finds its lease gone, re-registers as a new incarnation and is fenced by epoch like any broker that
returns (it leads nothing it led; its followers left it, so an ``acks=all`` write there is never
acknowledged). Revoking names the lease read from the registration, so a broker that restarted meanwhile
(a new lease) is never fenced for its previous life.

Every broker runs a detector (not only the controller): the controller itself may be the one gone. Several
brokers fencing one broker revoke one lease, idempotently. With the store down nothing is fenced (the
lease cannot be revoked, nor does it expire); once the store answers, a suspect that still refuses is
fenced at its next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tierlog.service.cluster.metadata_store import LeaseExpiredError, MetadataStore, MetadataStoreError
from tierlog.service.cluster.model import BrokerRegistration, broker_key
from tierlog.service.metrics import Metrics, Sample
from tierlog.tiering.log.waits import wait_signalled

__all__ = [
    "CHECK_INTERVAL_S",
    "WATCH_INTERVAL_S",
    "FailureDetector",
    "connection_refused",
    "origin",
    "silence_limit_s",
]

log = logging.getLogger("tierlog.cluster.liveness")

WATCH_INTERVAL_S = 0.5  # how often the watched brokers' addresses are tried
CHECK_INTERVAL_S = 0.25  # how often a suspect is checked again while its suspicion lasts
REPROBE_S = 0.1  # a refused connection is tried once more this much later before it counts
PROBE_TIMEOUT_S = 0.5  # a connection probe that neither connects nor is refused in this time proves nothing
MIN_SILENCE_S = 2

Probe = Callable[[str], Awaitable[bool]]


def silence_limit_s(heartbeat_interval_ms: int) -> int:
    """Whole seconds a lease must go without a keep-alive before its broker counts as silent: four
    heartbeats, at least :data:`MIN_SILENCE_S`. Pure."""
    return max(MIN_SILENCE_S, math.ceil(4 * heartbeat_interval_ms / 1000))


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (default ports filled in), lower case: how a peer URL is matched
    to a registration. Pure."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "http").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


async def connection_refused(url: str) -> bool:
    """Whether a TCP connection to ``url``'s host and port is refused (not: connected, timed out, or failed
    otherwise: those prove nothing about the process). Never raises."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "http").lower()
    port = parts.port or (443 if scheme == "https" else 80)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(parts.hostname, port)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


@dataclass
class _Suspicion:
    reported_at: float
    reports: int = 1


class FailureDetector:
    """Suspects brokers on peers' evidence, confirms against the store and fences (see the module doc).

    :meth:`suspect` is synchronous and safe to call from any code on the event loop (it only records);
    :meth:`start` runs the checking task and the watching task, which :meth:`close` cancels and awaits.
    ``brokers`` answers the live registrations as this broker's cache knows them (to map a URL to a broker
    id); ``watched`` the ids whose addresses to try every :data:`WATCH_INTERVAL_S` (none by default).
    Event-loop only.
    """

    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        brokers: Callable[[], dict[int, BrokerRegistration]],
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        watched: Callable[[], Iterable[int]] = tuple,
        metrics: Metrics | None = None,
        probe: Probe = connection_refused,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self._brokers = brokers
        self._watched = watched
        self.silence_limit_s = silence_limit_s(heartbeat_interval_ms)
        self.suspicion_s = session_timeout_ms / 1000
        self._probe = probe
        self._monotonic = monotonic
        self._suspects: dict[int, _Suspicion] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.fenced = 0  # leases this broker revoked
        self._metrics = metrics
        if metrics is not None:
            metrics.describe(
                "tierlog_broker_suspects", "gauge", "Brokers this broker suspects of being gone (checking)"
            )
            metrics.describe(
                "tierlog_brokers_fenced_total",
                "counter",
                "Brokers this broker fenced (revoked their lease) before their session expired, by reason "
                "(refused, silent)",
            )
            metrics.add_collector(self._collect)

    @property
    def suspects(self) -> frozenset[int]:
        return frozenset(self._suspects)

    def suspect_url(self, url: str) -> None:
        """A call to ``url`` was refused, reset or not answered in time: suspect the broker registered at
        that address (nothing when none is, or it is this broker). Never raises."""
        wanted = origin(url)
        for broker_id, registration in self._brokers().items():
            if origin(registration.url) == wanted:
                self.suspect(broker_id)
                return

    def suspect(self, broker_id: int) -> None:
        """Suspect ``broker_id`` (again) for ``broker.session.timeout.ms`` from now. Never raises."""
        if broker_id == self.broker_id or self._closed:
            return
        found = self._suspects.get(broker_id)
        if found is None:
            self._suspects[broker_id] = _Suspicion(self._monotonic())
            log.debug("broker %d suspects broker %d", self.broker_id, broker_id)
            self._wake.set()
        else:
            found.reported_at = self._monotonic()
            found.reports += 1

    async def start(self) -> None:
        """Start the checking and watching tasks. Idempotent."""
        if not self._tasks and not self._closed:
            self._tasks = [
                asyncio.create_task(self._run(), name=f"tierlog-liveness-{self.broker_id}"),
                asyncio.create_task(self._watch(), name=f"tierlog-liveness-watch-{self.broker_id}"),
            ]

    async def close(self) -> None:
        """Cancel and await both tasks. Idempotent; never raises."""
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def watch_once(self) -> None:
        """Try the address of every watched broker once; suspect those that refuse. Never raises."""
        registrations = self._brokers()
        targets = [
            (b, registrations[b].url) for b in self._watched() if b != self.broker_id and b in registrations
        ]
        refused = await asyncio.gather(*(self._probe(url) for _, url in targets))
        for (broker_id, _), was_refused in zip(targets, refused, strict=True):
            if was_refused:
                self.suspect(broker_id)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                await self.watch_once()
            except Exception:
                log.exception("broker %d: watching its peers failed", self.broker_id)

    async def _run(self) -> None:
        while True:
            await wait_signalled(self._wake, CHECK_INTERVAL_S if self._suspects else None)
            self._wake.clear()
            now = self._monotonic()
            for broker_id, suspicion in list(self._suspects.items()):
                if now - suspicion.reported_at > self.suspicion_s:
                    log.debug("broker %d no longer suspects broker %d", self.broker_id, broker_id)
                    del self._suspects[broker_id]
                    continue
                try:
                    if await self.check(broker_id):
                        self._suspects.pop(broker_id, None)
                except MetadataStoreError as err:
                    log.info("broker %d cannot check broker %d yet: %s", self.broker_id, broker_id, err)
                except Exception:
                    log.exception("broker %d: checking broker %d failed", self.broker_id, broker_id)

    async def check(self, broker_id: int) -> bool:
        """One confirmation round for ``broker_id`` (the checking task's step; tests call it): fence it when
        its address refuses connections or its lease is silent. True when the suspicion is settled (fenced,
        or no registration left), False when it stands unconfirmed. Raises MetadataStoreError."""
        kv = await self.store.get(broker_key(broker_id))
        if kv is None or not kv.lease:
            return True
        registration = BrokerRegistration.decode(kv.key, kv.value)
        if await self._probe(registration.url):
            await asyncio.sleep(REPROBE_S)
            if await self._probe(registration.url):
                await self._fence(registration, kv.lease, "refused", "refuses connections")
                return True
        try:
            lease = await self.store.lease_time(kv.lease)
        except LeaseExpiredError:
            return True
        if lease.silent_s >= self.silence_limit_s:
            why = f"has not renewed its session for over {lease.silent_s} s"
            await self._fence(registration, kv.lease, "silent", why)
            return True
        return False

    async def _fence(self, registration: BrokerRegistration, lease: int, reason: str, why: str) -> None:
        log.warning(
            "broker %d fences broker %d (%s): it %s; revoking its lease %d so its partitions fail over",
            self.broker_id, registration.broker_id, registration.url, why, lease,
        )  # fmt: skip
        await self.store.revoke_lease(lease)
        self.fenced += 1
        if self._metrics is not None:
            self._metrics.inc("tierlog_brokers_fenced_total", reason=reason)

    def _collect(self) -> Iterable[Sample]:
        return [Sample("tierlog_broker_suspects", float(len(self._suspects)))]
