"""Wiring the Kafka protocol listener into the app: one cleanup context that binds it before the broker
opens (so a cluster member registers its Kafka endpoint) and closes it when the app stops."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from tierlog.service.kafka.server import KafkaListener
from tierlog.service.web.keys import BROKER, METRICS, SETTINGS

__all__ = ["KAFKA_LISTENER", "setup_kafka_listener"]

log = logging.getLogger("tierlog.kafka")

KAFKA_LISTENER: web.AppKey[KafkaListener] = web.AppKey("tierlog.kafka_listener", KafkaListener)


def setup_kafka_listener(app: web.Application) -> None:
    """Serve Kafka's protocol on ``kafka.listener`` (nothing when it is ``none``). Call before the
    broker's own cleanup context is added, so the listener is bound before the broker registers.

    A broker with authentication or TLS configured does not start the listener: the listener has neither
    yet, and serving it would open a door around them; the log says so once.
    """
    settings = app[SETTINGS]
    address = settings.kafka_listener
    if address is None:
        return
    security = settings.security
    if security.authentication_methods or security.tls:
        log.warning(
            "the Kafka protocol listener (kafka.listener=%s:%d) is not started: this broker has "
            "authentication or TLS configured, which the Kafka listener does not support yet; "
            "set kafka.listener=none to silence this",
            *address,
        )
        return

    async def kafka_ctx(app: web.Application) -> AsyncIterator[None]:
        listener = KafkaListener(app[BROKER], settings, app[METRICS], address)
        listener.app = app
        await listener.start()
        app[KAFKA_LISTENER] = listener
        host, port = listener.advertised
        app[BROKER].kafka_endpoint = f"{host}:{port}"
        try:
            yield
        finally:
            await listener.close()

    app.cleanup_ctx.append(kafka_ctx)
