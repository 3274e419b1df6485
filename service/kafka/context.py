"""What a Kafka API handler is given besides the request body: the request's header, the broker and
this listener's own address, and who is asking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.service.kafka.frames import RequestHeader
    from tierlog.service.kafka.server import KafkaListener
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.broker import Broker

__all__ = ["KafkaRequest"]


@dataclass(slots=True)
class KafkaRequest:
    """One request on one connection. ``peer`` is the client's ``(host, port)``."""

    header: RequestHeader
    listener: KafkaListener
    peer: tuple[str, int]

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def broker(self) -> Broker:
        return self.listener.broker

    @property
    def settings(self) -> Settings:
        return self.listener.settings
