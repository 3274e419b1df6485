"""Consumer groups over Kafka's protocol (the classic protocol with client-side assignment): finding the
coordinator, membership, committed offsets and the group admin APIs; importing this package registers
them."""

from tierlog.service.kafka.handlers.groups import admin, coordinator, membership, offsets

__all__ = ["admin", "coordinator", "membership", "offsets"]
