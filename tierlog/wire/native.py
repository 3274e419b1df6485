"""The names the native API puts on the wire: its content type, its headers and its route prefixes.

The broker's routes (:mod:`tierlog.service.native_api.routes`, the group, producer and replication routes),
the
Python client's transport, the cluster's proxy to a partition leader and the replication client all read
them from here, so a name cannot differ between the side that writes it and the side that reads it. The
contract itself (bodies, parameters, answers) is ``docs/native-api.md``. Constants and pure path builders
only.
"""

from __future__ import annotations

from urllib.parse import quote

__all__ = [
    "HTTP_ON_TLS_PORT",
    "BATCHES_TYPE",
    "HIGH_WATERMARK",
    "LOG_START_OFFSET",
    "LOG_END_OFFSET",
    "LOCAL_LOG_START_OFFSET",
    "LEADER_EPOCH",
    "EARLIEST",
    "LATEST",
    "PREFIX",
    "TOPIC_ROUTE",
    "PARTITION_ROUTE",
    "METADATA_PATH",
    "PRODUCERS_PATH",
    "GROUPS_PREFIX",
    "REPLICATION_PREFIX",
    "REPLICA_PARTITION_ROUTE",
    "ALTER_PARTITION_PATH",
    "topic_path",
    "partition_path",
    "group_path",
    "replica_partition_path",
]

# The plain-text body a TLS port answers a plain HTTP request with (issue 35); the client recognises it.
HTTP_ON_TLS_PORT = "This is tierlog's TLS port: use https://{host}:{port}/ (the broker speaks HTTPS here).\n"

# Produce bodies and fetch answers: whole Kafka v2 record batches, concatenated.
BATCHES_TYPE = "application/vnd.tierlog.batches"

# Headers of a fetch answer (the partition's offsets when the answer was made).
HIGH_WATERMARK = "Tierlog-High-Watermark"
LOG_START_OFFSET = "Tierlog-Log-Start-Offset"  # the whole log's, remote tier included
LOG_END_OFFSET = "Tierlog-Log-End-Offset"
LOCAL_LOG_START_OFFSET = "Tierlog-Local-Log-Start-Offset"  # replica fetches only
LEADER_EPOCH = "Tierlog-Leader-Epoch"  # replica fetches only

# The ``timestamp`` of an offsets request that asks for the log start or the log end (Kafka's ListOffsets).
EARLIEST = -2
LATEST = -1

PREFIX = "/native/v1"
# aiohttp route patterns; topic_path and partition_path build the same paths for one topic.
TOPIC_ROUTE = PREFIX + "/topics/{topic}"
PARTITION_ROUTE = TOPIC_ROUTE + "/partitions/{partition}"
METADATA_PATH = PREFIX + "/metadata"
PRODUCERS_PATH = PREFIX + "/producers"
GROUPS_PREFIX = PREFIX + "/groups"
REPLICATION_PREFIX = PREFIX + "/replication"
# Broker to broker: a follower's replica fetch and epoch query, a leader's ISR change to the controller.
REPLICA_PARTITION_ROUTE = REPLICATION_PREFIX + "/topics/{topic}/partitions/{partition}"
ALTER_PARTITION_PATH = REPLICATION_PREFIX + "/alter-partition"


def topic_path(topic: str) -> str:
    """The path of ``topic`` (:data:`TOPIC_ROUTE`), the name escaped as one path segment. Pure."""
    return f"{PREFIX}/topics/{quote(topic, safe='')}"


def partition_path(topic: str, partition: int) -> str:
    """The path of one partition (:data:`PARTITION_ROUTE`); ``/batches`` and ``/offsets`` follow it. Pure."""
    return f"{topic_path(topic)}/partitions/{partition}"


def group_path(group: str) -> str:
    """The path of a consumer group (``GROUPS_PREFIX/{group}``), the id escaped as one path segment. Pure."""
    return f"{GROUPS_PREFIX}/{quote(group, safe='')}"


def replica_partition_path(topic: str, partition: int) -> str:
    """The replication path of one partition (:data:`REPLICA_PARTITION_ROUTE`); ``/batches`` and
    ``/epochs/{epoch}`` follow it. Pure."""
    return f"{REPLICATION_PREFIX}/topics/{quote(topic, safe='')}/partitions/{partition}"
