"""The Kafka API handlers, one module per family; importing this package registers them all."""

from tierlog.service.kafka.handlers import (
    acls,
    admin,
    api_versions,
    fetching,
    groups,
    metadata,
    produce,
    records,
    sasl,
    scram_users,
)

__all__ = [
    "acls",
    "admin",
    "api_versions",
    "fetching",
    "groups",
    "metadata",
    "produce",
    "records",
    "sasl",
    "scram_users",
]
