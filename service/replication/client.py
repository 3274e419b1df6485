"""The HTTP calls one broker makes to its peers for replication: one pooled aiohttp session per broker.

Three exchanges, each the client side of a route in :mod:`tierlog.service.replication.routes`:

=====================  ===========================================================================
:meth:`fetch`          a follower's replica fetch from the leader (raw batches and the leader's offsets)
:meth:`epoch_end_offset` a follower asks the leader where an epoch ends (Kafka's OffsetsForLeaderEpoch)
:meth:`alter_partition`  a leader asks the controller to change the ISR (Kafka's AlterPartition, KIP-497)
=====================  ===========================================================================

Error answers come back as the broker's typed errors
(:func:`~tierlog.wire.errors.error_from_answer`, so a 41602 keeps its ``local_log_start_offset`` and a
50310 the leader it names); a peer that cannot be reached or does not answer in time is an
:class:`~tierlog.wire.errors.UnavailableError` naming the URL (retriable).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from tierlog.client.security import ClientSecurity
from tierlog.service.cluster.model import AlterPartitionRequest, PartitionState
from tierlog.wire.errors import CorruptRecordError, TierlogError, UnavailableError, error_from_answer
from tierlog.wire.native import (
    ALTER_PARTITION_PATH,
    BATCHES_TYPE,
    HIGH_WATERMARK,
    LEADER_EPOCH,
    LOCAL_LOG_START_OFFSET,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    replica_partition_path,
)

__all__ = ["ReplicaFetch", "ReplicationClient"]


@dataclass(frozen=True)
class ReplicaFetch:
    """A leader's answer to a replica fetch: whole batches from the fetch offset, and the leader's offsets."""

    data: bytes
    high_watermark: int
    log_start_offset: int  # the whole log's (remote included)
    local_log_start_offset: int
    log_end_offset: int
    leader_epoch: int


class ReplicationClient:
    """One broker's client to its peers' replication routes (one keep-alive session, opened lazily).

    Requests may run concurrently from the event loop. Each has ``timeout_s`` plus its long-poll wait to
    complete. :meth:`close` ends the session for good: a request that comes later (a task still winding
    down) fails with UnavailableError instead of opening a session nobody would close. ``security``: how
    this broker reaches and authenticates to its peers (default: plaintext, no credentials).
    """

    def __init__(self, *, broker_id: int, timeout_s: float, security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        self._security = security if security is not None else ClientSecurity()
        self._session: aiohttp.ClientSession | None = None
        self._open_lock = asyncio.Lock()
        self._closed = False

    async def fetch(
        self,
        url: str,
        topic: str,
        partition: int,
        *,
        offset: int,
        leader_epoch: int,
        max_bytes: int,
        max_wait_ms: int,
    ) -> ReplicaFetch:
        """Fetch batches from ``offset`` of the leader at ``url`` as replica ``broker_id``.

        Idempotent (a read). Raises:
            NotLeaderOrFollowerError (50310), FencedLeaderEpochError (50315), UnknownLeaderEpochError
                (50316): the leader's view of the partition differs from ``leader_epoch``.
            OffsetMovedToTieredStorageError (41602): ``offset`` is below the leader's local log start and in
                the remote tier (``local_log_start_offset`` says where to fetch from).
            OffsetOutOfRangeError (41601): ``offset`` is outside the leader's log (the range is carried).
            UnknownTopicError / UnknownPartitionError: the leader has no such partition, or this broker is
                not one of its replicas (40402).
            UnavailableError: the leader cannot be reached or did not answer in time.
        """
        params = {
            "replica_id": str(self.broker_id),
            "offset": str(offset),
            "leader_epoch": str(leader_epoch),
            "max_bytes": str(max_bytes),
            "max_wait_ms": str(max_wait_ms),
        }
        path = f"{replica_partition_path(topic, partition)}/batches"
        body, headers = await self._exchange(
            "GET", url, path, params=params, accept=BATCHES_TYPE, wait_ms=max_wait_ms
        )
        try:
            return ReplicaFetch(
                data=body,
                high_watermark=int(headers[HIGH_WATERMARK]),
                log_start_offset=int(headers[LOG_START_OFFSET]),
                local_log_start_offset=int(headers[LOCAL_LOG_START_OFFSET]),
                log_end_offset=int(headers[LOG_END_OFFSET]),
                leader_epoch=int(headers[LEADER_EPOCH]),
            )
        except (KeyError, ValueError) as err:
            raise UnavailableError(
                f"the replica fetch answer of {url} lacks offset headers: {err!r}"
            ) from err

    async def epoch_end_offset(
        self, url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """``(epoch, end offset)`` the leader at ``url`` answers for ``epoch``: the largest epoch it knows
        at or below ``epoch`` and where that one ends (``(-1, -1)`` when it knows none that low).

        Idempotent. Raises: the leader and epoch errors of :meth:`fetch`, UnavailableError.
        """
        params = {"replica_id": str(self.broker_id), "leader_epoch": str(leader_epoch)}
        path = f"{replica_partition_path(topic, partition)}/epochs/{epoch}"
        body, _ = await self._exchange("GET", url, path, params=params, accept="application/json")
        doc = _json(url, body)
        try:
            return int(doc["leader_epoch"]), int(doc["end_offset"])
        except (KeyError, TypeError, ValueError) as err:
            raise UnavailableError(f"the epoch answer of {url} is malformed: {err!r}") from err

    async def alter_partition(self, url: str, request: AlterPartitionRequest) -> PartitionState:
        """Send ``request`` to the controller at ``url``; the partition state it committed.

        Not idempotent by itself: the partition epoch in the request makes a replay fail with
        InvalidUpdateVersionError (40904). Raises: NotControllerError (50317), FencedLeaderEpochError
        (50315), InvalidUpdateVersionError (40904), IneligibleReplicaError (40905), UnknownTopicError /
        UnknownPartitionError, UnavailableError.
        """
        body, _ = await self._exchange(
            "POST",
            url,
            ALTER_PARTITION_PATH,
            params={},
            accept="application/json",
            data=request.encode(),
        )
        try:
            return PartitionState.decode(f"alter-partition answer of {url}", body)
        except CorruptRecordError as err:
            raise UnavailableError(err.message) from err

    async def close(self) -> None:
        """Close the session and its connections. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _open(self) -> aiohttp.ClientSession:
        """The session, opened on first use. Its SSL context reads PEM files, so it is built in a worker
        thread, once even when several requests start together. Raises UnavailableError: closing, or the
        TLS files cannot be used (the message names the file)."""
        if self._session is not None:
            return self._session
        async with self._open_lock:
            if self._session is None:
                try:
                    ssl = await asyncio.to_thread(self._security.connector_ssl)
                except TierlogError as err:
                    raise UnavailableError(
                        f"broker {self.broker_id} cannot call its peers: {err.message}"
                    ) from err
                if self._closed:
                    raise UnavailableError(
                        f"broker {self.broker_id} is closing: it no longer calls its peers"
                    )
                self._session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=ssl),
                    headers=self._security.headers(),
                    raise_for_status=False,
                )
            return self._session

    async def _exchange(
        self,
        method: str,
        url: str,
        path: str,
        *,
        params: dict[str, str],
        accept: str,
        data: bytes | None = None,
        wait_ms: int = 0,
    ) -> tuple[bytes, Any]:
        """The body and headers of a 2xx answer to one request. Raises the answered error, or
        UnavailableError (naming the URL) when the peer cannot be reached or does not answer in time."""
        if self._closed:
            raise UnavailableError(f"broker {self.broker_id} is closing: it no longer calls its peers")
        session = await self._open()
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = "application/json"
        target = url.rstrip("/") + path
        timeout = aiohttp.ClientTimeout(total=self.timeout_s + wait_ms / 1000)
        try:
            async with session.request(
                method, target, params=params, data=data, headers=headers, timeout=timeout
            ) as response:
                body = await response.read()
                if response.status >= 300:
                    raise error_from_answer(response.status, body)
                return body, response.headers
        except TimeoutError:
            raise UnavailableError(f"{method} {target} got no answer within {timeout.total:.1f} s") from None
        except aiohttp.ClientError as err:
            raise UnavailableError(f"{method} {target} failed: {err}") from err


def _json(url: str, body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError as err:
        raise UnavailableError(f"the answer of {url} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise UnavailableError(f"the answer of {url} is not a JSON object")
    return doc
