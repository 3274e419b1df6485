"""Typed application keys for the consumer-group machinery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from service.groups.consumers import ConsumerManager
    from service.groups.coordinator import GroupCoordinator

__all__ = ["COORDINATOR", "CONSUMERS"]

COORDINATOR: web.AppKey[GroupCoordinator] = web.AppKey("tierlog.coordinator")
CONSUMERS: web.AppKey[ConsumerManager] = web.AppKey("tierlog.consumers")
