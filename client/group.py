"""Consumer group membership over the native group API, run by one background task per consumer.

The loop: join (the broker computes the assignment and answers when the generation forms) -> hand the
partitions to the consumer -> heartbeat every ``heartbeat_interval_ms`` until the broker says the group is
rebalancing (409/40910), the generation is stale (409/40911) or the member was removed (404/40410) -> hand
the partitions back (the consumer commits if auto-commit is on and runs the revoke callback) -> join again
(with an empty member id after a removal). ``leave`` ends membership at once so the others rebalance without
waiting for the session timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ConsumerConfig
from tierlog.client.router import Requester
from tierlog.client.types import TopicPartition
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    IllegalGenerationError,
    RebalanceInProgressError,
    TierlogError,
    UnknownMemberError,
)
from tierlog.wire.native import group_path

__all__ = ["GroupMembership", "Subscription"]

log = logging.getLogger("tierlog.client.consumer")
PartitionsHook = Callable[[set[TopicPartition]], Awaitable[None]]


class Subscription:
    """Topics or a topic pattern (a regular expression matched against whole topic names)."""

    def __init__(self, topics: list[str] | None = None, pattern: str | None = None) -> None:
        self.topics = sorted(set(topics or []))
        self.pattern = pattern

    def body(self) -> dict[str, Any]:
        return {"pattern": self.pattern} if self.pattern is not None else {"topics": self.topics}


class GroupMembership:
    """One member of one group: ``run`` is the membership task; its ``generation`` fences commits."""

    def __init__(
        self,
        broker: Requester,
        config: ConsumerConfig,
        subscription: Subscription,
        on_assigned: PartitionsHook,
        on_revoked: PartitionsHook,
    ) -> None:
        assert config.group_id is not None
        self._broker = broker
        self._config = config
        self._path = group_path(config.group_id)
        self.subscription = subscription
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self.member_id = ""
        self.generation = -1
        self.assignment: set[TopicPartition] = set()
        self.error: TierlogError | None = None
        self._rejoin = asyncio.Event()

    def resubscribe(self, subscription: Subscription) -> None:
        """Change the subscription; the member joins again with it. Safe to call at any time."""
        self.subscription = subscription
        self._rejoin.set()

    async def run(self) -> None:
        """Join, heartbeat and rejoin until cancelled. Stores a non-retriable error in ``error`` and ends."""
        attempt = 0
        while True:
            try:
                await self._join()
                attempt = 0
            except UnknownMemberError:
                self.member_id = ""
                continue
            except RebalanceInProgressError:
                continue
            except TierlogError as err:
                if not err.retriable:
                    log.error("group %s: join failed: %s", self._config.group_id, err)
                    self.error = err
                    return
                wait = backoff_seconds(
                    attempt, self._config.retry_backoff_ms, self._config.retry_backoff_max_ms
                )
                attempt += 1
                await asyncio.sleep(wait)
                continue
            reason = await self._heartbeat_until_rebalance()
            revoked, self.assignment = self.assignment, set()
            await self._on_revoked(revoked)
            if reason == "removed":
                self.member_id = ""
                self.generation = -1

    async def _join(self) -> None:
        config = self._config
        body = {
            "member_id": self.member_id,
            "client_id": config.client_id,
            "session_timeout_ms": config.session_timeout_ms,
            "rebalance_timeout_ms": config.max_poll_interval_ms,
            "strategy": config.partition_assignment_strategy,
            **self.subscription.body(),
        }
        self._rejoin.clear()
        timeout = config.max_poll_interval_ms + config.request_timeout_ms
        answer = await self._broker.json("POST", self._path + "/join", body=body, timeout_ms=timeout)
        self.member_id = answer["member_id"]
        self.generation = int(answer["generation"])
        self.assignment = {TopicPartition(p["topic"], int(p["partition"])) for p in answer["assignment"]}
        log.info(
            "group %s: member %s generation %d assigned %s",
            config.group_id, self.member_id, self.generation, sorted(self.assignment),
        )  # fmt: skip
        await self._on_assigned(set(self.assignment))

    async def _heartbeat_until_rebalance(self) -> str:
        interval = self._config.heartbeat_interval_ms / 1000
        attempt = 0
        while True:
            await wait_signalled(self._rejoin, interval)
            if self._rejoin.is_set():
                return "resubscribed"
            try:
                await self._broker.call(
                    "POST",
                    self._path + "/heartbeat",
                    body={"member_id": self.member_id, "generation": self.generation},
                )
                attempt = 0
            except (RebalanceInProgressError, IllegalGenerationError):
                return "rebalance"
            except UnknownMemberError:
                return "removed"
            except TierlogError as err:
                if not err.retriable:
                    self.error = err
                    return "removed"
                attempt += 1
                log.warning(
                    "group %s: heartbeat failed (%s), attempt %d", self._config.group_id, err, attempt
                )

    async def leave(self) -> None:
        """Leave the group (idempotent on the broker). Errors are logged, never raised."""
        if not self.member_id:
            return
        try:
            await self._broker.call("POST", self._path + "/leave", body={"member_id": self.member_id})
        except TierlogError as err:
            log.warning("group %s: leave failed: %s", self._config.group_id, err)
        self.member_id = ""
        self.generation = -1
