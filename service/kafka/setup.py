"""Wiring the Kafka protocol listener into the app: one cleanup context that binds it before the broker
opens (so a cluster member registers its Kafka endpoint) and closes it when the app stops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from tierlog.service.kafka.server import KafkaListener
from tierlog.service.security.authn import AUTHENTICATOR
from tierlog.service.security.authz import AUTHORIZER
from tierlog.service.security.tls import ServerTls, server_context
from tierlog.service.web.keys import BROKER, METRICS, SERVER_TLS, SETTINGS

__all__ = ["KAFKA_LISTENER", "setup_kafka_listener"]

log = logging.getLogger("tierlog.kafka")

KAFKA_LISTENER: web.AppKey[KafkaListener] = web.AppKey("tierlog.kafka_listener", KafkaListener)


def setup_kafka_listener(app: web.Application) -> None:
    """Serve Kafka's protocol on ``kafka.listener`` (nothing when it is ``none``). Call before the
    broker's own cleanup context is added, so the listener is bound before the broker registers.

    The listener speaks what the HTTP listener does: TLS when ``ssl.certfile`` is set (the same context,
    so a SIGHUP reload renews both; built here when the app was not started by ``tierlog serve``), and
    SASL when ``authentication.methods`` has ``basic`` (PLAIN and SCRAM against the security store) or
    ``bearer`` (OAUTHBEARER with the JWT checks); ``mtls`` maps a client certificate to its user as on
    HTTP. A broker whose authentication methods give the listener no way to authenticate (``mtls``
    without TLS) does not start it; the log says so once.
    """
    settings = app[SETTINGS]
    address = settings.kafka_listener
    if address is None:
        return
    security = settings.security
    methods = security.authentication_methods
    if security.enabled and not (
        "basic" in methods or "bearer" in methods or ("mtls" in methods and security.tls)
    ):
        log.warning(
            "the Kafka protocol listener (kafka.listener=%s:%d) is not started: authentication.methods=%s "
            "gives it no way to authenticate a client (it serves SASL PLAIN/SCRAM for basic, OAUTHBEARER "
            "for bearer, and client certificates for mtls over TLS only); "
            "set kafka.listener=none to silence this",
            *address,
            ",".join(methods),
        )
        return

    async def kafka_ctx(app: web.Application) -> AsyncIterator[None]:
        tls = app.get(SERVER_TLS)
        if tls is None and security.tls:
            tls = ServerTls(await asyncio.to_thread(server_context, security))
        listener = KafkaListener(
            app[BROKER],
            settings,
            app[METRICS],
            address,
            tls=tls,
            authenticator=app[AUTHENTICATOR],
            authorizer=app[AUTHORIZER],
        )
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
