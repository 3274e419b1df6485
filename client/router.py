"""Each partition's requests go to its leader: the client's metadata cache and its broker connections.

A :class:`Router` fetches ``GET /native/v1/metadata`` from any reachable broker (the bootstrap list first
time, then every broker it has learned), keeps the answer as an immutable
:class:`~tierlog.client.metadata.ClusterMetadata` snapshot and hands out one pooled
:class:`~tierlog.client.transport.BrokerClient` per broker URL. Callers ask :meth:`Router.leader_for` before a
produce, fetch or offsets request and report a failure with :meth:`Router.note_error`:

* ``NotLeaderOrFollowerError`` naming a leader with a newer leader epoch than the snapshot's: that leader is
  used at once (a new snapshot, no metadata request);
* otherwise ``NotLeaderOrFollowerError``, ``LeaderNotAvailableError``, ``BrokerUnavailableError`` or
  ``RequestTimeoutError``: the snapshot is stale and the next :meth:`Router.leader_for` refreshes it.

At most one refresh is in flight; everyone who needs one joins it. Refreshes caused by errors wait a capped,
jittered exponential backoff (``retry_backoff_ms`` to ``retry_backoff_max_ms``) after the previous one;
refreshes for a topic the snapshot does not know yet do not wait. A snapshot older than
``metadata_max_age_ms`` is refreshed in the background while it keeps being used (Kafka's
``metadata.max.age.ms``); a failed background refresh leaves it in use.

**A leader that stops answering** (a paused or frozen process: its connections accept, nothing comes back)
must not hold a produce for the whole ``request_timeout_ms``. :meth:`Router.unless_moved` awaits such a
request and, while it is unanswered past :data:`LEADER_CHECK_S`, refreshes the metadata from the other
brokers every :data:`LEADER_CHECK_S`; once they name another leader for the partition (the cluster fenced
the silent one, docs/cluster.md#failure-detection), the request is abandoned and fails with
:class:`LeaderMovedError` (a retriable NOT_LEADER), so the batch goes to the new leader at once. A slow
leader that is still the leader keeps its request: nothing is cut short on a timer. Metadata requests
themselves wait at most :data:`METADATA_TIMEOUT_MS` per broker before the next broker is asked.

A broker without the metadata route (older than cluster mode, 404 with 40400) is the leader of everything,
as the client assumed before routing existed.

Everything runs on the client's event loop; not thread-safe. ``close`` is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import CommonConfig
from tierlog.client.errors import BrokerUnavailableError, ClientClosedError, RequestTimeoutError
from tierlog.client.metadata import ClusterMetadata, PartitionLeader, decode_metadata, legacy_metadata
from tierlog.client.security import ClientSecurity
from tierlog.client.transport import BrokerClient, Params, TopicMetadata
from tierlog.client.types import TopicPartition
from tierlog.tiering.log.topic_names import topic_name_problem
from tierlog.wire.errors import (
    BadRequestError,
    LeaderNotAvailableError,
    NoSuchRouteError,
    NotLeaderOrFollowerError,
    TierlogError,
    UnknownPartitionError,
    UnknownTopicError,
)
from tierlog.wire.native import METADATA_PATH

__all__ = [
    "LEADER_CHECK_S",
    "METADATA_TIMEOUT_MS",
    "AnyBroker",
    "LeaderMovedError",
    "Requester",
    "Router",
    "is_routing_error",
]

log = logging.getLogger("tierlog.client.metadata")
T = TypeVar("T")
LEADER_CHECK_S = 0.5  # a leader's request unanswered this long has the metadata checked (and again as long)
METADATA_TIMEOUT_MS = 2_000  # one broker's metadata answer is awaited this long at most
_MAX_QUERY = 4096  # bytes of ``topic=`` parameters in one metadata request (servers cap a line at 8 KiB)
_ROUTING_ERRORS = (
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    BrokerUnavailableError,
    RequestTimeoutError,
)


class LeaderMovedError(NotLeaderOrFollowerError):
    """A request to a partition's leader went unanswered and the other brokers now name another leader:
    the request was abandoned (it may still be applied by the old leader, which the cluster fenced).
    Retriable, at once."""


def is_routing_error(err: BaseException) -> bool:
    """Whether ``err`` means the request may have gone to the wrong or a gone broker (refresh metadata)."""
    return isinstance(err, _ROUTING_ERRORS)


class Requester(Protocol):
    """What group, commit and admin requests need of a broker connection: :class:`BrokerClient` (one broker)
    or :class:`AnyBroker` (whichever broker answers)."""

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        params: Params = None,
        headers: dict[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> tuple[int, bytes, dict[str, str]]: ...

    async def json(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Params = None,
        timeout_ms: int | None = None,
    ) -> Any: ...

    async def topic_metadata(self, topic: str) -> TopicMetadata: ...


class Router:
    """The metadata cache and the connection pool of one client (see the module docstring)."""

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        connections: int = 100,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 300_000,
        security: ClientSecurity | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not bootstrap:
            raise ValueError("a router needs at least one bootstrap URL")
        self.bootstrap = tuple(url.rstrip("/") for url in bootstrap)
        self.security = ClientSecurity() if security is None else security
        self.request_timeout_ms = request_timeout_ms
        self._connections = connections
        self._backoff = (retry_backoff_ms, retry_backoff_max_ms)
        self._max_age = metadata_max_age_ms / 1000
        self._clock = clock
        self._clients: dict[str, BrokerClient] = {}
        self._snapshot: ClusterMetadata | None = None
        self._version = 0
        self._topics: set[str] = set()
        self._stale = False
        self._refresh: asyncio.Task[ClusterMetadata] | None = None
        self._attempt = 0
        self._next_refresh = float("-inf")
        self._down: dict[str, float] = {}
        self._preferred: str | None = None
        self._closed = False
        self.refreshes = 0
        self.any = AnyBroker(self)

    @classmethod
    def from_config(cls, config: CommonConfig) -> Router:
        """A router with the bootstrap list, timeouts, backoff, metadata age and security of ``config``."""
        return cls(
            config.bootstrap_list,
            request_timeout_ms=config.request_timeout_ms,
            connections=config.connections_max,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            security=config.security,
        )

    @property
    def snapshot(self) -> ClusterMetadata | None:
        """The current metadata (None before the first refresh). Lock-free: snapshots never change."""
        return self._snapshot

    # -- connections ----------------------------------------------------------------------------

    def client(self, url: str) -> BrokerClient:
        """The pooled client of the broker at ``url`` (opened on first use, on the running loop).

        Raises ClientClosedError after :meth:`close`.
        """
        if self._closed:
            raise ClientClosedError("the client is closed")
        url = url.rstrip("/")
        client = self._clients.get(url)
        if client is None:
            client = BrokerClient(
                url,
                request_timeout_ms=self.request_timeout_ms,
                connections=self._connections,
                security=self.security,
            )
            self._clients[url] = client
        client.open()
        return client

    def candidates(self) -> list[str]:
        """Broker URLs to ask for metadata or a group request, best first: the last one that answered, the
        live brokers of the snapshot, the bootstrap list; brokers that recently refused go last."""
        order = [self._preferred] if self._preferred else []
        if self._snapshot is not None:
            order += [b.url for b in self._snapshot.brokers]
        order += self.bootstrap
        unique = list(dict.fromkeys(order))
        now = self._clock()
        return [u for u in unique if self._down.get(u, now) <= now] + [
            u for u in unique if self._down.get(u, now) > now
        ]

    def mark_down(self, url: str) -> None:
        """``url`` refused a connection: ask it last for ``retry_backoff_max_ms``."""
        self._down[url] = self._clock() + self._backoff[1] / 1000
        if self._preferred == url:
            self._preferred = None

    def mark_up(self, url: str) -> None:
        """``url`` answered: prefer it for requests any broker may serve."""
        self._down.pop(url, None)
        self._preferred = url

    # -- leaders --------------------------------------------------------------------------------

    async def leader_for(self, tp: TopicPartition) -> BrokerClient:
        """The client of ``tp``'s leader, refreshing metadata first when it is stale or lacks the topic.

        Raises:
            UnknownTopicError / UnknownPartitionError: the cluster says the topic or partition does not exist.
            LeaderNotAvailableError: the partition has no live leader now (retriable).
            BrokerUnavailableError: no broker answered the metadata request (retriable).
        """
        meta = await self._current(tp.topic)
        info = meta.leader(tp)
        if info is None and tp.topic in meta.topics:
            meta = await self.refresh(urgent=True)
            info = meta.leader(tp)
        meta.check_topic(tp.topic)
        if info is None:
            raise UnknownPartitionError(
                f"topic {tp.topic} has {meta.partition_count(tp.topic)} partitions; "
                f"partition {tp.partition} does not exist"
            )
        if not info.url:
            self._stale = True
            raise LeaderNotAvailableError(
                f"partition {tp.topic}-{tp.partition} has no live leader (leader epoch {info.leader_epoch})"
            )
        return self.client(info.url)

    def cached_leader(self, tp: TopicPartition) -> str:
        """The URL of ``tp``'s leader in the current snapshot, "" when it names none. Lock-free, no I/O."""
        meta = self._snapshot
        leader = meta.leader(tp) if meta is not None else None
        return leader.url if leader is not None else ""

    async def partition_count(self, topic: str) -> int:
        """The partition count of ``topic`` from the metadata (refreshed when it lacks the topic).

        Raises UnknownTopicError, and the retriable errors of :meth:`refresh`.
        """
        meta = await self._current(topic)
        meta.check_topic(topic)
        count = meta.partition_count(topic)
        assert count is not None
        return count

    def note_error(self, tp: TopicPartition, err: BaseException, url: str | None = None) -> bool:
        """Learn from a failed request for ``tp`` sent to ``url``. Answers True when a NOT_LEADER hint named
        a newer leader, now in the snapshot (retry at once); else marks the snapshot stale for a routing
        error (see :func:`is_routing_error`) and answers False. Never raises."""
        if isinstance(err, NotLeaderOrFollowerError) and err.leader_url and self._snapshot is not None:
            known = self._snapshot.leader(tp)
            if known is not None and err.leader_epoch > known.leader_epoch:
                hinted = self._snapshot.with_leader(
                    tp, err.leader_id, err.leader_url.rstrip("/"), err.leader_epoch
                )
                log.debug("%s-%d: leader %s at epoch %d (hint)", tp.topic, tp.partition, err.leader_url,
                          err.leader_epoch)  # fmt: skip
                self._publish(hinted)
                return True
        if isinstance(err, BrokerUnavailableError) and url is not None:
            self.mark_down(url)
        if is_routing_error(err):
            self._stale = True
        return False

    async def on_leader(self, tp: TopicPartition, call: Callable[[BrokerClient], Awaitable[T]]) -> T:
        """``call`` on ``tp``'s leader, following leadership moves: routing errors are retried (at once
        after a leader hint, else with backoff) within ``request_timeout_ms``. Idempotent when ``call`` is.

        Raises the last error when time is up, and any other error of ``call`` at once.
        """
        deadline = self._clock() + self.request_timeout_ms / 1000
        attempt = 0
        while True:
            url: str | None = None
            try:
                client = await self.leader_for(tp)
                url = client.base_url
                return await call(client)
            except TierlogError as err:
                if not is_routing_error(err) or isinstance(err, RequestTimeoutError):
                    raise
                hinted = self.note_error(tp, err, url)
                wait = 0.0 if hinted else backoff_seconds(attempt, *self._backoff)
                if self._clock() + wait >= deadline:
                    raise
                attempt += 1
                await asyncio.sleep(wait)

    async def unless_moved(self, tp: TopicPartition, url: str, call: Awaitable[T]) -> T:
        """``call`` (a request for ``tp`` sent to its leader at ``url``), abandoned once the metadata names
        another leader for ``tp`` while it is unanswered (see the module doc).

        Raises LeaderMovedError (``call`` cancelled; retriable), and whatever ``call`` raises.
        """
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=LEADER_CHECK_S)
                if done:
                    return task.result()
                moved = await self._leader_moved(tp, url)
                if moved is not None and not task.done():
                    raise LeaderMovedError(
                        f"{tp.topic}-{tp.partition}: {url} did not answer and the cluster now names "
                        f"{moved.url} the leader (leader epoch {moved.leader_epoch})",
                        leader_id=moved.leader,
                        leader_url=moved.url,
                        leader_epoch=moved.leader_epoch,
                    )
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _leader_moved(self, tp: TopicPartition, url: str) -> PartitionLeader | None:
        """The leader of ``tp`` per metadata fresh from brokers other than ``url``, when it is not ``url``.
        None when it still is, names none, or no metadata could be had within :data:`LEADER_CHECK_S`."""
        self.mark_down(url)  # asked last for metadata: it is not answering
        try:
            async with asyncio.timeout(LEADER_CHECK_S):
                meta = await self.refresh(urgent=True)
        except (TimeoutError, TierlogError) as err:
            log.debug("%s-%d: no metadata while %s is silent: %s", tp.topic, tp.partition, url, err)
            return None
        leader = meta.leader(tp)
        if leader is None or not leader.url or leader.url == url:
            return None
        return leader

    # -- refreshing -----------------------------------------------------------------------------

    async def _current(self, topic: str) -> ClusterMetadata:
        """The snapshot to route ``topic`` with: the current one while it is fresh and has the topic, else a
        new one (at once for a topic it lacks or says does not exist, after the backoff when stale)."""
        if topic not in self._topics:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise BadRequestError(problem)
            self._topics.add(topic)
        for _ in range(3):
            meta = self._snapshot
            if meta is not None and not self._stale and topic in meta.topics:
                if self._clock() - meta.fetched_at >= self._max_age:
                    self._start_refresh(urgent=False)
                return meta
            meta = await self.refresh(urgent=meta is None or topic not in meta.topics)
            if meta.knows(topic):
                return meta
        raise LeaderNotAvailableError(f"no metadata for topic {topic} yet")

    async def refresh(self, *, urgent: bool = False) -> ClusterMetadata:
        """Fetch metadata for every topic in use, joining a refresh already in flight. An ``urgent`` refresh
        starts without the error backoff. Answers the new snapshot.

        Raises:
            BrokerUnavailableError (retriable): no broker answered; the last error is its ``__cause__``.
            CorruptRecordError: a broker's answer had the wrong shape.
            ClientClosedError: the router is closed.
        """
        return await asyncio.shield(self._start_refresh(urgent=urgent))

    def _start_refresh(self, *, urgent: bool) -> asyncio.Task[ClusterMetadata]:
        if self._closed:
            raise ClientClosedError("the client is closed")
        task = self._refresh
        if task is None or task.done():
            task = asyncio.create_task(self._do_refresh(urgent), name="tierlog metadata refresh")
            task.add_done_callback(_retrieve)
            self._refresh = task
        return task

    async def _do_refresh(self, urgent: bool) -> ClusterMetadata:
        wait = self._next_refresh - self._clock()
        if not urgent and wait > 0:
            await asyncio.sleep(wait)
        was_stale, self._stale = self._stale, False
        self.refreshes += 1
        try:
            fresh = await self._fetch(sorted(self._topics))
        except BaseException as err:
            # A failed refresh keeps the snapshot as it was: stale only if it was (or became) so already.
            self._stale = self._stale or was_stale
            self._schedule_next(changed=False)
            if isinstance(err, TierlogError) and not err.retriable and self._snapshot is not None:
                self._topics &= set(self._snapshot.topics) | self._snapshot.unknown_topics
            raise
        previous = self._snapshot
        merged = fresh if previous is None else previous.merged(fresh, version=0)
        self._schedule_next(changed=previous is None or dict(previous.topics) != dict(merged.topics))
        return self._publish(merged)

    def _schedule_next(self, *, changed: bool) -> None:
        now = self._clock()
        if changed or now > self._next_refresh + 2 * self._backoff[1] / 1000:
            self._attempt = 0
        self._next_refresh = now + backoff_seconds(self._attempt, *self._backoff)
        self._attempt += 1

    def _publish(self, meta: ClusterMetadata) -> ClusterMetadata:
        self._version += 1
        self._snapshot = replace(meta, version=self._version)
        return self._snapshot

    async def _fetch(self, topics: list[str]) -> ClusterMetadata:
        # Too many names for one request line: ask for every topic instead (the answer is a superset).
        params = [("topic", t) for t in topics] if sum(len(t) + 7 for t in topics) <= _MAX_QUERY else []
        last: TierlogError | None = None
        tried = self.candidates()
        for url in tried:
            client = self.client(url)
            try:
                timeout_ms = min(self.request_timeout_ms, METADATA_TIMEOUT_MS)
                doc = await client.json("GET", METADATA_PATH, params=params, timeout_ms=timeout_ms)
            except NoSuchRouteError:
                return await self._legacy(client, topics)
            except TierlogError as err:
                if not err.retriable:
                    raise
                log.debug("metadata from %s failed: %s", url, err)
                self.mark_down(url)
                last = err
                continue
            self.mark_up(url)
            meta = decode_metadata(doc, answered_by=url, fetched_at=self._clock())
            if not params:  # an answer for every topic: a topic in use that it lacks does not exist
                meta = replace(meta, unknown_topics=meta.unknown_topics | (set(topics) - set(meta.topics)))
            return meta
        raise BrokerUnavailableError(
            f"no broker answered the metadata request (tried {', '.join(tried)}): {last}"
        ) from last

    async def _legacy(self, client: BrokerClient, topics: list[str]) -> ClusterMetadata:
        counts: dict[str, int] = {}
        unknown: list[str] = []

        async def one(topic: str) -> None:
            try:
                counts[topic] = (await client.topic_metadata(topic)).partition_count
            except UnknownTopicError:
                unknown.append(topic)

        await asyncio.gather(*(one(t) for t in topics))
        self.mark_up(client.base_url)
        return legacy_metadata(client.base_url, counts, unknown, fetched_at=self._clock(), version=0)

    async def close(self) -> None:
        """Stop a refresh in flight and close every broker connection. Idempotent."""
        self._closed = True
        task, self._refresh = self._refresh, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients))


def _retrieve(task: asyncio.Task[ClusterMetadata]) -> None:
    """Mark a refresh's failure as seen: a background refresh has no awaiter, its callers retry."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("metadata refresh failed: %s", task.exception())


class AnyBroker:
    """Requests any broker may serve (groups, commits, topic admin and descriptions): sent to the broker that
    last answered, and on a refused connection to the next one the router knows. Concurrent calls are safe.
    A request is sent again to another broker only when the connection failed (``BrokerUnavailableError``),
    as the producer's retries would."""

    def __init__(self, router: Router) -> None:
        self._router = router

    @property
    def base_url(self) -> str:
        """The URL the next request goes to first."""
        return self._router.candidates()[0]

    @property
    def request_timeout_ms(self) -> int:
        return self._router.request_timeout_ms

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        params: Params = None,
        headers: dict[str, str] | None = None,
        timeout_ms: int | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        """:meth:`BrokerClient.call` on the first broker that accepts the connection. Raises as that, with
        BrokerUnavailableError only when no broker accepted."""
        last: BrokerUnavailableError | None = None
        for url in self._router.candidates():
            try:
                answer = await self._router.client(url).call(
                    method, path, body=body, data=data, params=params, headers=headers, timeout_ms=timeout_ms
                )
            except BrokerUnavailableError as err:
                self._router.mark_down(url)
                last = err
                continue
            self._router.mark_up(url)
            return answer
        assert last is not None
        raise last

    async def json(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Params = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """:meth:`call` and decode a JSON answer (None for an empty one)."""
        _, raw, _ = await self.call(method, path, body=body, params=params, timeout_ms=timeout_ms)
        return json.loads(raw) if raw.strip() else None

    async def topic_metadata(self, topic: str) -> TopicMetadata:
        """Partition count and offsets of ``topic`` as one broker reports them. Raises UnknownTopicError."""
        last: BrokerUnavailableError | None = None
        for url in self._router.candidates():
            try:
                answer = await self._router.client(url).topic_metadata(topic)
            except BrokerUnavailableError as err:
                self._router.mark_down(url)
                last = err
                continue
            self._router.mark_up(url)
            return answer
        assert last is not None
        raise last
