"""The Kafka API handlers, one module per family; importing this package registers them all."""

from tierlog.service.kafka.handlers import api_versions, groups, metadata

__all__ = ["api_versions", "groups", "metadata"]
