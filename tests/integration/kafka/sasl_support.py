"""What the SASL tests of the Kafka listener share: a broker whose security store holds given users, and
a librdkafka configuration that authenticates as one of them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.integration.broker import BrokerThread, broker_settings
from tierlog.service.security.scram import make_credential
from tierlog.service.security.security_store import SecurityStore

__all__ = ["sasl", "start_with_users"]


def start_with_users(
    data_dir: Path, users: Mapping[str, tuple[str, str]], settings: Mapping[str, str]
) -> BrokerThread:
    """A broker on ``data_dir`` started with ``settings``, its store holding ``users`` (name -> (password,
    SCRAM mechanism)) first. The caller closes it."""

    async def put() -> None:
        store = SecurityStore.offline(data_dir)
        await store.start()
        try:
            for name, (password, mechanism) in users.items():
                await store.put_user(name, make_credential(password, mechanism))
        finally:
            await store.close()

    asyncio.run(put())
    return BrokerThread(broker_settings(data_dir, settings))


def sasl(broker: BrokerThread, mechanism: str, user: tuple[str, str], **extra: Any) -> dict[str, Any]:
    """librdkafka's configuration for ``user`` (name, password) over SASL_PLAINTEXT with ``mechanism``."""
    return {
        "bootstrap.servers": broker.kafka_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user[0],
        "sasl.password": user[1],
        **extra,
    }
