"""What the SASL tests of the Kafka listener share: a broker whose security store holds given users, a
librdkafka configuration that authenticates as one of them, and raw Kafka frames over a socket."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from tests.integration.broker import BrokerThread, broker_settings
from tierlog.service.security.scram import make_credential
from tierlog.service.security.security_store import SecurityStore

__all__ = ["connect", "frame", "request", "sasl", "start_with_users"]

WAIT_S = 15


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


def connect(broker: BrokerThread) -> socket.socket:
    """A plain TCP connection to the broker's Kafka listener."""
    host, port = broker.kafka_bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def frame(sock: socket.socket, payload: bytes) -> bytes:
    """Send one size-prefixed frame; the size-prefixed frame answered."""
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    return _read(sock, struct.unpack(">i", _read(sock, 4))[0])


def request(sock: socket.socket, key: int, version: int, body: Any, *, flexible: bool = False) -> Any:
    """Send kio request ``body`` as ``key`` v``version`` (``flexible``: header v2); the decoded answer."""
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    header = struct.pack(">hhih", key, version, 7, 4) + b"test" + (b"\0" if flexible else b"")
    data = frame(sock, header + buffer.getvalue())
    assert struct.unpack_from(">i", data)[0] == 7
    entity, _ = entity_reader(load_response_schema(key, version))(data, 5 if flexible else 4)
    return entity


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data
