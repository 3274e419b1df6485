"""Reaching a partition's leader from any broker: the per-partition proxy behind the REST v2 routes.

A REST proxy in front of a Kafka cluster sends each partition's requests to that partition's leader; a
tierlog broker does the same for its REST v2 routes. :func:`routed_partition` answers the partition a
route works on as a :class:`RoutedPartition`: the local one when this broker leads it
(:class:`LocalPartition`), else a :class:`LeaderPartition` that does the same operation on the leader
through its native API (``docs/native-api.md``), over the broker's one peer client
(:class:`~tierlog.service.cluster.peers.PeerClient`, which the app owns; :data:`LEADER_CLIENT` is the
proxy's thin user of it, set by :func:`setup_proxy`).

Errors from the leader come back as the same :class:`~tierlog.wire.errors.TierlogError` classes its
answer names (by ``error_code``; a not-leader answer keeps the leader it names, an out-of-range one the
valid range). A leader that cannot be reached is :class:`LeaderNotAvailableError` (50311, retriable) and
one that does not answer in time :class:`UnavailableError` (50301, retriable): never a wrong answer.

The leader is called as this broker (the peer client's identity: its TLS trust and certificate, its own
``Authorization``), never with the client's credentials: the broker that received the request has already
authorized its user, and the leader's native API checks only that the caller is a broker (a super user).

Timeouts (the peer client's default budget): connecting gets ``broker.session.timeout.ms`` (a broker that
cannot accept within its session is as good as gone), the whole exchange ``request.read.timeout.ms`` plus
any long-poll wait asked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web

from tierlog.service.cluster.peers import PEERS, PeerClient
from tierlog.service.web.keys import BROKER
from tierlog.tiering.log.types import AppendInfo, ReadResult
from tierlog.wire.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnavailableError,
)
from tierlog.wire.native import (
    BATCHES_TYPE,
    EARLIEST,
    HIGH_WATERMARK,
    LATEST,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    partition_path,
)

if TYPE_CHECKING:
    from tierlog.service.topics.partition import Partition

__all__ = [
    "LEADER_CLIENT",
    "LeaderClient",
    "LeaderPartition",
    "LocalPartition",
    "Offsets",
    "RoutedPartition",
    "routed_partition",
    "setup_proxy",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Offsets:
    """A partition's log start offset and high watermark (what a REST offsets answer shows)."""

    log_start_offset: int
    high_watermark: int


class RoutedPartition(Protocol):
    """One partition, wherever its leader is. Every method is safe to call concurrently.

    Each raises what the leader's partition raises (UnknownTopicError, OffsetOutOfRangeError,
    RecordTooLargeError, CorruptRecordError, NotLeaderOrFollowerError when leadership moved meanwhile)
    and, through a proxy, LeaderNotAvailableError / UnavailableError when the leader cannot be reached.
    """

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    async def append(self, batches: bytes, *, acks: int = 1) -> AppendInfo:
        """Append whole v2 batches. Not idempotent: a retry appends again."""
        ...

    async def read(
        self, offset: int, max_bytes: int, *, max_wait_ms: int = 0, min_bytes: int = 1
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, long-polling up to ``max_wait_ms``. Idempotent."""
        ...

    async def read_then(
        self,
        offset: int,
        max_bytes: int,
        then: Callable[[ReadResult], T],
        *,
        then_up_to: int,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> tuple[ReadResult, T | None]:
        """:meth:`read`, and ``then`` (pure CPU work, never answering None) run on a result of at most
        ``then_up_to`` bytes in the worker thread that read it where that is possible (a local read); the
        second item is None when it did not run, and the caller runs it. Idempotent."""
        ...

    async def offsets(self) -> Offsets:
        """Log start offset and high watermark. Idempotent."""
        ...

    async def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first batch at or after ``ts``, else None. Idempotent."""
        ...


class LocalPartition:
    """A partition this broker leads: the calls go straight to it."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    @property
    def topic(self) -> str:
        return self.partition.topic

    @property
    def index(self) -> int:
        return self.partition.index

    async def append(self, batches: bytes, *, acks: int = 1) -> AppendInfo:
        return await self.partition.append(batches, acks=acks)

    async def read(
        self, offset: int, max_bytes: int, *, max_wait_ms: int = 0, min_bytes: int = 1
    ) -> ReadResult:
        return await self.partition.read(offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes)

    async def read_then(
        self,
        offset: int,
        max_bytes: int,
        then: Callable[[ReadResult], T],
        *,
        then_up_to: int,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> tuple[ReadResult, T | None]:
        return await self.partition.read_then(
            offset, max_bytes, then, then_up_to=then_up_to, max_wait_ms=max_wait_ms, min_bytes=min_bytes
        )

    async def offsets(self) -> Offsets:
        return Offsets(self.partition.log_start_offset, self.partition.high_watermark)

    async def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        return await self.partition.offset_for_timestamp(ts)


class LeaderClient:
    """The proxy's calls to the native API of the other brokers, over the broker's :class:`PeerClient`.

    Safe to use concurrently while the peer client is open (the app's cleanup context opens and closes
    it).
    """

    def __init__(self, peers: PeerClient) -> None:
        self._peers = peers

    async def request(
        self,
        leader: LeaderPartition,
        method: str,
        path: str,
        *,
        params: dict[str, str],
        accept: str,
        data: bytes | None = None,
        wait_ms: int = 0,
    ) -> tuple[bytes, Mapping[str, str]]:
        """One exchange with the leader: the body and headers of a 2xx answer.

        Raises:
            TierlogError: the error the leader answered (its class by ``error_code``).
            LeaderNotAvailableError: (50311) the leader cannot be reached.
            UnavailableError: (50301) the leader did not answer within the timeout, or this broker is
                not serving.
        """
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = BATCHES_TYPE
        answer = await self._peers.call(
            method,
            leader.url + path,
            peer=f"the leader of {leader.label} (broker {leader.leader_id} at {leader.url})",
            params=params,
            headers=headers,
            data=data,
            wait_ms=wait_ms,
            unreachable=LeaderNotAvailableError,
        )
        return answer.body, answer.headers


class LeaderPartition:
    """A partition another broker leads: every call is the same operation on its native API."""

    def __init__(self, client: LeaderClient, topic: str, index: int, *, leader_id: int, url: str) -> None:
        self._client = client
        self._topic = topic
        self._index = index
        self.leader_id = leader_id
        self.url = url.rstrip("/")
        self._path = partition_path(topic, index)

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def index(self) -> int:
        return self._index

    @property
    def label(self) -> str:
        return f"{self._topic}-{self._index}"

    async def append(self, batches: bytes, *, acks: int = 1) -> AppendInfo:
        params = {"acks": "all" if acks == -1 else str(max(acks, 1))}
        body, _ = await self._exchange(
            "POST", "/batches", params=params, accept="application/json", data=batches
        )
        doc = _json_object(body)
        return AppendInfo(
            base_offset=int(doc["base_offset"]),
            last_offset=int(doc["last_offset"]),
            record_count=int(doc["record_count"]),
            batch_base_offsets=[int(o) for o in doc["batch_base_offsets"]],
            log_append_time=int(doc["log_append_time"]),
        )

    async def read(
        self, offset: int, max_bytes: int, *, max_wait_ms: int = 0, min_bytes: int = 1
    ) -> ReadResult:
        params = {
            "offset": str(offset),
            "max_bytes": str(max_bytes),
            "max_wait_ms": str(max_wait_ms),
            "min_bytes": str(min_bytes),
        }
        body, headers = await self._exchange(
            "GET", "/batches", params=params, accept=BATCHES_TYPE, wait_ms=max_wait_ms
        )
        return ReadResult(
            data=body,
            high_watermark=_header(headers, HIGH_WATERMARK),
            log_start_offset=_header(headers, LOG_START_OFFSET),
            log_end_offset=_header(headers, LOG_END_OFFSET),
        )

    async def read_then(
        self,
        offset: int,
        max_bytes: int,
        then: Callable[[ReadResult], T],
        *,
        then_up_to: int,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> tuple[ReadResult, T | None]:
        """:meth:`read`; ``then`` is left to the caller (the bytes were read by the leader)."""
        return await self.read(offset, max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes), None

    async def offsets(self) -> Offsets:
        earliest, latest = await asyncio.gather(self._list_offset(EARLIEST), self._list_offset(LATEST))
        return Offsets(earliest[0], latest[0])

    async def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        offset, at = await self._list_offset(ts)
        return None if offset < 0 else (offset, at)

    async def _exchange(
        self,
        method: str,
        suffix: str,
        *,
        params: dict[str, str],
        accept: str,
        data: bytes | None = None,
        wait_ms: int = 0,
    ) -> tuple[bytes, Mapping[str, str]]:
        """One request to the leader; when it answers that another broker now leads the partition (50310,
        refused before anything was read or appended), once more to that one. Raises as
        :meth:`LeaderClient.request`."""
        path = self._path + suffix
        try:
            return await self._client.request(
                self, method, path, params=params, accept=accept, data=data, wait_ms=wait_ms
            )
        except NotLeaderOrFollowerError as err:
            moved = err.leader_url.rstrip("/")
            if err.leader_id < 0 or not moved or moved == self.url:
                raise
            self.leader_id, self.url = err.leader_id, moved
        return await self._client.request(
            self, method, path, params=params, accept=accept, data=data, wait_ms=wait_ms
        )

    async def _list_offset(self, timestamp: int) -> tuple[int, int]:
        body, _ = await self._exchange(
            "GET",
            "/offsets",
            params={"timestamp": str(timestamp)},
            accept="application/json",
        )
        doc = _json_object(body)
        return int(doc["offset"]), int(doc["timestamp"])


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise UnavailableError(f"the leader answered a body that is not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise UnavailableError("the leader answered a JSON body that is not an object")
    return doc


def _header(headers: Mapping[str, str], name: str) -> int:
    raw = headers.get(name)
    if raw is None or not raw.lstrip("-").isdigit():
        raise UnavailableError(f"the leader's fetch answer has no valid {name} header")
    return int(raw)


LEADER_CLIENT: web.AppKey[LeaderClient] = web.AppKey("tierlog.cluster.leader_client", LeaderClient)


def setup_proxy(app: web.Application) -> None:
    """Give ``app`` its :class:`LeaderClient`, a user of the app's :class:`PeerClient` (:data:`PEERS`, set
    up first by the app factory). Call once per app, before it starts (the REST v2 routes' setup does)."""
    app[LEADER_CLIENT] = LeaderClient(app[PEERS])


def routed_partition(app: web.Application, topic: str, index: int) -> RoutedPartition:
    """Partition ``index`` of ``topic``, local when this broker leads it, else proxied to its leader.

    Pure lookup (no I/O); safe to call concurrently. The answer is valid for one request: leadership may
    move, and then the leader answers NotLeaderOrFollowerError (50310, retriable).

    Raises:
        UnknownTopicError: (40401) no such topic. UnknownPartitionError: (40402) no such partition.
        LeaderNotAvailableError: (50311, retriable) the partition has no live leader now.
        UnavailableError: (50301) the broker is not open.
    """
    found = app[BROKER].topic(topic)
    try:
        return LocalPartition(found.partition(index))
    except NotLeaderOrFollowerError as err:
        if err.leader_id < 0 or not err.leader_url:
            raise LeaderNotAvailableError(f"partition {topic}-{index} has no live leader now") from None
        return LeaderPartition(app[LEADER_CLIENT], topic, index, leader_id=err.leader_id, url=err.leader_url)
