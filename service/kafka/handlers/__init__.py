"""The Kafka API handlers, one module per family; importing this package registers them all."""

from tierlog.service.kafka.handlers import admin, api_versions, fetching, groups, metadata, produce, sasl

__all__ = ["admin", "api_versions", "fetching", "groups", "metadata", "produce", "sasl"]
