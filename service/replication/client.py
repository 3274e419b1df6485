"""The HTTP calls one broker makes to its peers for replication, over the broker's one peer client.

Three exchanges, each the client side of a route in :mod:`tierlog.service.replication.routes`:

=====================  ===========================================================================
:meth:`fetch`          a follower's replica fetch from the leader (raw batches and the leader's offsets)
:meth:`epoch_end_offset` a follower asks the leader where an epoch ends (Kafka's OffsetsForLeaderEpoch)
:meth:`alter_partition`  a leader asks the controller to change the ISR (Kafka's AlterPartition, KIP-497)
=====================  ===========================================================================

The session, this broker's identity, the translation of answers and of an unreachable peer are the
:class:`~tierlog.service.cluster.peers.PeerClient`'s (one per broker, owned by the app); this module has
the request shapes only. Error answers come back as the broker's typed errors
(:func:`~tierlog.wire.errors.error_from_answer`, so a 41602 keeps its ``local_log_start_offset`` and a
50310 the leader it names); a peer that cannot be reached or does not answer in time is an
:class:`~tierlog.wire.errors.UnavailableError` naming the URL (retriable).

A replica fetch still unanswered :data:`OVERDUE_S` past its long poll is reported to the peer client as
unresponsive (and again every :data:`OVERDUE_S`) while it keeps waiting: the failure detector's weak
evidence of a paused leader (:mod:`tierlog.service.cluster.liveness`), which it confirms against the store.
The fetch itself is not cut short: a leader slow under load still answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.service.cluster.model import AlterPartitionRequest, PartitionState
from tierlog.service.cluster.peers import Budget, PeerAnswer, PeerClient
from tierlog.wire.errors import CorruptRecordError, UnavailableError
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

__all__ = ["OVERDUE_S", "ReplicaFetch", "ReplicationClient"]

OVERDUE_S = 1.0  # a replica fetch unanswered this long past its long poll makes its leader a suspect

_ACCEPT_BATCHES = {"Accept": BATCHES_TYPE}
_ACCEPT_JSON = {"Accept": "application/json"}
_SEND_JSON = {"Accept": "application/json", "Content-Type": "application/json"}


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
    """One broker's client to its peers' replication routes, over the broker's :class:`PeerClient`.

    Requests may run concurrently from the event loop. Each has ``timeout_s`` plus its long-poll wait to
    complete (Kafka's ``replica.socket.timeout.ms``). :meth:`close` ends this client's calls for good: a
    request that comes later (a task still winding down) fails with UnavailableError; the peer client
    itself is closed by its owner, the app.
    """

    def __init__(self, peers: PeerClient, *, broker_id: int, timeout_s: float) -> None:
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        self._peers = peers
        self._budget = Budget(timeout_s)
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
        answer = await self._watched(
            url,
            self._exchange("GET", url, path, params=params, headers=_ACCEPT_BATCHES, wait_ms=max_wait_ms),
            max_wait_ms / 1000 + OVERDUE_S,
        )
        headers = answer.headers
        try:
            return ReplicaFetch(
                data=answer.body,
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
        answer = await self._exchange("GET", url, path, params=params, headers=_ACCEPT_JSON)
        doc = _json(url, answer.body)
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
        answer = await self._exchange(
            "POST",
            url,
            ALTER_PARTITION_PATH,
            params={},
            headers=_SEND_JSON,
            data=request.encode(),
        )
        try:
            return PartitionState.decode(f"alter-partition answer of {url}", answer.body)
        except CorruptRecordError as err:
            raise UnavailableError(err.message) from err

    async def _watched(self, url: str, call: Awaitable[PeerAnswer], overdue_s: float) -> PeerAnswer:
        """``call``'s result; each ``overdue_s`` it is still pending, ``url`` is reported unresponsive."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=overdue_s)
                if done:
                    return task.result()
                self._peers.report_unresponsive(url)
                overdue_s = OVERDUE_S
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def close(self) -> None:
        """End this client's calls (the shared session stays with its owner). Idempotent."""
        self._closed = True

    async def _exchange(
        self,
        method: str,
        url: str,
        path: str,
        *,
        params: Mapping[str, str],
        headers: Mapping[str, str],
        data: bytes | None = None,
        wait_ms: int = 0,
    ) -> PeerAnswer:
        """The 2xx answer to one request. Raises the answered error, or UnavailableError (naming the URL)
        when the peer cannot be reached or does not answer in time."""
        if self._closed:
            raise UnavailableError(f"broker {self.broker_id} is closing: it no longer calls its peers")
        target = url.rstrip("/") + path
        return await self._peers.call(
            method,
            target,
            peer=target,
            params=params,
            headers=headers,
            data=data,
            wait_ms=wait_ms,
            budget=self._budget,
        )


def _json(url: str, body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError as err:
        raise UnavailableError(f"the answer of {url} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise UnavailableError(f"the answer of {url} is not a JSON object")
    return doc
