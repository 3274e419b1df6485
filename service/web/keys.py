"""Typed keys for the state shared through the aiohttp application.

Every route module reads the broker, the metrics registry and the settings through these keys, never
through module globals, so two apps (two brokers in one test) never share state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from tierlog.service.metrics import Metrics
    from tierlog.service.security.tls import ServerTls
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.broker import Broker

__all__ = ["BROKER", "METRICS", "SERVER_TLS", "SETTINGS"]

BROKER: web.AppKey[Broker] = web.AppKey("tierlog.broker")
METRICS: web.AppKey[Metrics] = web.AppKey("tierlog.metrics")
SETTINGS: web.AppKey[Settings] = web.AppKey("tierlog.settings")
#: The HTTPS listener's TLS (set by ``tierlog serve``): the Kafka listener serves handshakes from the same
#: context, so a SIGHUP reload renews both.
SERVER_TLS: web.AppKey[ServerTls] = web.AppKey("tierlog.server_tls")
