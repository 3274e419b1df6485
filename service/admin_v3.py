"""Confluent REST v3 admin routes: clusters, topics, topic configs, partitions."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["OPENAPI_PATHS", "setup_routes"]

OPENAPI_PATHS: dict[str, Any] = {}


def setup_routes(app: web.Application) -> None:
    """Register the v3 admin routes."""
