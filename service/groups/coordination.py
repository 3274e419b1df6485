"""What the group routes and the REST consumer instances need of a coordinator.

:class:`~tierlog.service.groups.coordinator.GroupCoordinator` (one set of groups) and
:class:`~tierlog.service.groups.shards.CoordinatorShards` (a broker's groups, one coordinator per
``__consumer_offsets`` partition it leads) both satisfy it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tierlog.service.groups.assignors import TopicPartition
from tierlog.service.groups.coordinator import GroupDescription, JoinResult
from tierlog.service.groups.offsets import CommittedOffset

__all__ = ["Coordination"]


class Coordination(Protocol):
    async def join(
        self,
        group_id: str,
        member_id: str = "",
        *,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        client_id: str = "consumer",
        session_timeout_ms: int = ...,
        rebalance_timeout_ms: int = ...,
        strategy: str | None = None,
        auto_rejoin: bool = False,
    ) -> JoinResult: ...

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None: ...

    def assignment(self, group_id: str, member_id: str, generation: int) -> list[TopicPartition]: ...

    def leave(self, group_id: str, member_id: str) -> None: ...

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        member_id: str = "",
        generation: int = -1,
    ) -> None: ...

    def committed(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, CommittedOffset]: ...

    def describe(self, group_id: str) -> GroupDescription: ...

    def group_ids(self) -> list[str]: ...

    def metadata_changed(self) -> None: ...

    async def tick(self) -> None: ...

    def close(self) -> None: ...
