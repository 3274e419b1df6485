"""Consumer groups over Kafka's protocol (the classic protocol with client-side assignment, and KIP-848's
consumer groups with broker-side assignment): finding the coordinator, membership, committed offsets and
the group admin APIs; importing this package registers them."""

from tierlog.service.kafka.handlers.groups import admin, consumer, coordinator, membership, offsets

__all__ = ["admin", "consumer", "coordinator", "membership", "offsets"]
