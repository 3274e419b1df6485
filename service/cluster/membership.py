"""Broker membership: a broker is in the cluster while its registration, under its lease, is in the store.

``brokers/<id>`` holds the broker's :class:`~tierlog.service.cluster.model.BrokerRegistration`, attached to a
lease of ``ceil(broker.session.timeout.ms / 1000)`` seconds that a keep-alive task renews every
``broker.heartbeat.interval.ms``. A broker that stops renewing (a crash, a long pause, a partition from the
store) loses its lease, the store deletes its registration, and the controller sees it gone: the session
semantics of Kafka's broker heartbeats, with etcd's lease as the session.

When the keep-alive finds the lease gone, :attr:`Membership.lost` is set (the controller stops acting at
once on it) and the task registers again under a new lease; the registration is the same record, so the
cluster sees the broker leave and come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from tierlog.service.cluster.metadata_store import (
    Compare,
    LeaseExpiredError,
    MetadataStore,
    MetadataStoreError,
    Put,
)
from tierlog.service.cluster.model import BrokerRegistration, broker_key
from tierlog.service.metrics import Metrics, Sample
from tierlog.wire.errors import InvalidConfigError

__all__ = ["Membership", "lease_ttl_seconds"]

log = logging.getLogger("tierlog.cluster.membership")

Listener = Callable[[], None]


def lease_ttl_seconds(session_timeout_ms: int) -> int:
    """The lease TTL for a session timeout: whole seconds, rounded up, at least 1. Pure."""
    return max(1, math.ceil(session_timeout_ms / 1000))


class Membership:
    """This broker's registration in the cluster and the lease that keeps it alive.

    Event-loop only. :meth:`start` and :meth:`close` must not run concurrently with each other;
    :meth:`heartbeat` is safe to call concurrently with the keep-alive task (one round at a time).
    """

    def __init__(
        self,
        store: MetadataStore,
        registration: BrokerRegistration,
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.registration = registration
        self.session_timeout_s = session_timeout_ms / 1000
        self._monotonic = monotonic
        self._renewed_at = monotonic()  # when the store last confirmed the lease
        self.ttl_seconds = lease_ttl_seconds(session_timeout_ms)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.lease = 0
        self.registered = asyncio.Event()
        self.lost = asyncio.Event()
        self.sessions = 0  # registrations made (1 after start, +1 per re-registration)
        self._listeners: list[Listener] = []
        self._round = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._metrics = metrics
        if metrics is not None:
            metrics.describe(
                "tierlog_broker_registered", "gauge", "1 while this broker's registration is live"
            )
            metrics.describe(
                "tierlog_broker_session_losses_total",
                "counter",
                "Leases this broker found expired (sessions lost)",
            )
            metrics.add_collector(self._collect)

    @property
    def broker_id(self) -> int:
        return self.registration.broker_id

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener()`` (synchronously, on the event loop) whenever :attr:`registered` or
        :attr:`lost` changes. It must not raise."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Register under a new lease and start the keep-alive task.

        Raises:
            InvalidConfigError: another live broker holds this id ("broker.id N is already registered by
                <url>"); nothing is left registered.
            MetadataStoreError: the store failed; nothing is left registered.
            RuntimeError: already started.
        """
        if self._task is not None or self._closed:
            raise RuntimeError("membership already started")
        self.lease = await self._register_new_lease()
        self._set_registered()
        log.info("broker %d registered (lease %d, ttl %d s)", self.broker_id, self.lease, self.ttl_seconds)
        self._task = asyncio.create_task(self._keep_alive_loop(), name=f"membership-{self.broker_id}")

    async def close(self, *, revoke: bool = True) -> None:
        """Stop the keep-alive task; with ``revoke`` (the default) revoke the lease so the registration (and a
        controller record under it) disappears at once. ``revoke=False`` leaves the lease to expire, as a
        crash would. Idempotent. Never raises: a store failure while revoking is logged (the lease then
        expires on its own)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        lease, self.lease = self.lease, 0
        self.registered.clear()
        if revoke and lease:
            try:
                await self.store.revoke_lease(lease)
            except MetadataStoreError as err:
                log.warning(
                    "broker %d: could not revoke lease %d (it will expire): %s", self.broker_id, lease, err
                )

    async def heartbeat(self) -> None:
        """One keep-alive round: renew the lease or, when it is gone, set :attr:`lost` and register again
        under a new lease (clearing :attr:`lost` once registered). The keep-alive task calls this every
        heartbeat interval; tests call it directly.

        Raises MetadataStoreError when the store cannot be reached (the next round tries again). A
        re-registration refused because another live broker took the id meanwhile is logged and retried on
        the next round (:attr:`lost` stays set). Does nothing after :meth:`close`.
        """
        async with self._round:
            if self._closed:
                return
            if self.lease and not self.lost.is_set():
                try:
                    # one round never outlasts the interval: a hung call must not eat the whole session
                    async with asyncio.timeout(max(self.heartbeat_interval_ms / 1000, 0.5)):
                        await self.store.keep_alive(self.lease)
                    self._renewed_at = self._monotonic()
                    return
                except TimeoutError as err:
                    raise MetadataStoreError(f"lease {self.lease} keep-alive did not answer in time") from err
                except LeaseExpiredError:
                    self._set_lost()
                except MetadataStoreError:
                    # The store cannot confirm the session. The broker keeps serving what it leads (as a
                    # Kafka broker cut off from its quorum does): the controller, if it still reaches the
                    # store, moves leadership, and this broker learns it and steps down when it reconnects.
                    # With etcd itself down, every broker keeps serving. :attr:`unconfirmed_s` says how long.
                    raise
            await self._reregister()

    async def _keep_alive_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.heartbeat()
            except MetadataStoreError as err:
                log.warning("broker %d: keep-alive failed, retrying: %s", self.broker_id, err)
            except Exception:
                log.exception("broker %d: keep-alive round failed, retrying", self.broker_id)

    async def _reregister(self) -> None:
        try:
            lease = await self._register_new_lease()
        except InvalidConfigError as err:
            log.error("broker %d lost its session and cannot register again: %s", self.broker_id, err)
            return
        self.lease = lease
        self._set_registered()
        log.warning(
            "broker %d registered again under lease %d after losing its session", self.broker_id, lease
        )

    async def _register_new_lease(self) -> int:
        lease = await self.store.grant_lease(self.ttl_seconds)
        try:
            await self._register(lease)
        except BaseException:
            with contextlib.suppress(MetadataStoreError):
                await self.store.revoke_lease(lease)
            raise
        return lease

    async def _register(self, lease: int) -> None:
        key = broker_key(self.broker_id)
        put = Put(key, self.registration.encode(), lease=lease)
        # A registration seen and then gone before the commit (its lease just expired) is retried once more.
        for _ in range(3):
            if await self.store.commit([Compare(key, 0)], [put]) is not None:
                return
            existing = await self.store.get(key)
            if existing is not None:
                holder = BrokerRegistration.decode(key, existing.value)
                raise InvalidConfigError(f"broker.id {self.broker_id} is already registered by {holder.url}")
        raise MetadataStoreError(f"could not register broker.id {self.broker_id}: the key keeps changing")

    @property
    def unconfirmed_s(self) -> float:
        """Seconds since the store last confirmed this broker's lease (0 right after a renewal)."""
        return max(0.0, self._monotonic() - self._renewed_at)

    def _set_registered(self) -> None:
        self._renewed_at = self._monotonic()
        self.sessions += 1
        self.lost.clear()
        self.registered.set()
        self._notify()

    def _set_lost(self) -> None:
        log.warning("broker %d: lease %d expired, its session is lost", self.broker_id, self.lease)
        self.registered.clear()
        self.lost.set()
        if self._metrics is not None:
            self._metrics.inc("tierlog_broker_session_losses_total")
        self._notify()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def _collect(self) -> Iterable[Sample]:
        return [Sample("tierlog_broker_registered", 1.0 if self.registered.is_set() else 0.0)]
