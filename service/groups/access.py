"""What the Kafka listener's group handlers reach in the app: the coordinator shards, whether groups are
ready, and the loader of ``__consumer_offsets`` partitions. Kept apart from :mod:`.state` so that the
Kafka API imports none of the REST consumer layer (the HTTP APIs and the Kafka listener stay
independent)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tierlog.service.groups.shards import CoordinatorShards

__all__ = ["GROUP_ACCESS", "GroupAccess", "Loader"]


class Loader(Protocol):
    async def ensure_topic(self) -> None: ...

    async def ensure_loaded(self, index: int) -> None: ...


@dataclass(frozen=True)
class GroupAccess:
    shards: CoordinatorShards
    ready: asyncio.Event
    loader: Loader


GROUP_ACCESS: web.AppKey[GroupAccess] = web.AppKey("tierlog.group_access", GroupAccess)
