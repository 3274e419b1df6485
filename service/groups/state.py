"""Typed application keys for the consumer-group machinery."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from tierlog.wire.errors import UnavailableError

if TYPE_CHECKING:
    from tierlog.service.groups.consumers import ConsumerManager
    from tierlog.service.groups.leadership import ShardLoader
    from tierlog.service.groups.shards import CoordinatorShards

__all__ = ["COORDINATOR", "CONSUMERS", "GROUPS_READY", "LOADER", "require_ready"]

COORDINATOR: web.AppKey[CoordinatorShards] = web.AppKey("tierlog.coordinator")
LOADER: web.AppKey[ShardLoader] = web.AppKey("tierlog.groups_loader")
CONSUMERS: web.AppKey[ConsumerManager] = web.AppKey("tierlog.consumers")
GROUPS_READY: web.AppKey[asyncio.Event] = web.AppKey("tierlog.groups_ready", asyncio.Event)


def require_ready(request: web.Request) -> None:
    """Raises UnavailableError (503, retriable) until committed offsets are restored."""
    ready = request.app.get(GROUPS_READY)
    if ready is None or not ready.is_set():
        raise UnavailableError("consumer groups are not ready: committed offsets are being restored")
