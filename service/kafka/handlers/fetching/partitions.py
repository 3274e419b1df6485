"""What the reading APIs share: the partition a request names (the same lookup the HTTP routes make, so a
partition another broker leads answers NOT_LEADER_OR_FOLLOWER), the check of the client's
``current_leader_epoch`` (KIP-320) and the Kafka error code of a refusal."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from tierlog.wire.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    TierlogError,
    UnknownLeaderEpochError,
)

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.partition import Partition

__all__ = ["check_leader_epoch", "error_answer", "leader_partition", "milliseconds"]

NO_EPOCH = -1


def leader_partition(broker: Broker, topic: str, index: int, current_leader_epoch: int) -> Partition:
    """The partition this broker serves ``topic``/``index`` from, checked against the client's leader
    epoch (-1: not checked). Pure lookup. Raises UnknownTopicError / UnknownPartitionError,
    NotLeaderOrFollowerError / LeaderNotAvailableError (another broker leads it, or none does),
    FencedLeaderEpochError / UnknownLeaderEpochError (see :func:`check_leader_epoch`), UnavailableError
    while the broker opens."""
    partition = broker.topic(topic).partition(index)
    check_leader_epoch(partition, current_leader_epoch)
    return partition


def check_leader_epoch(partition: Partition, requested: int) -> None:
    """Kafka's fencing of a client by its ``current_leader_epoch``: an older epoch than the partition's
    raises FencedLeaderEpochError (the client's metadata is stale), a newer one UnknownLeaderEpochError
    (this broker's is behind); a negative one is not checked. Pure."""
    if requested < 0:
        return
    current = partition.leader_epoch
    if requested < current:
        raise FencedLeaderEpochError(
            f"leader epoch {requested} of the request is older than {current}, the epoch {partition.label} "
            "is led in"
        )
    if requested > current:
        raise UnknownLeaderEpochError(
            f"leader epoch {requested} of the request is newer than {current}, the epoch {partition.label} "
            "is led in (this broker's metadata is behind)"
        )


def error_answer(err: TierlogError) -> dict[str, Any]:
    """The per-partition fields of a refusal: the Kafka error code, and for NOT_LEADER_OR_FOLLOWER the
    leader hint (``current_leader``, Fetch v12's tagged field) when the error names one. Pure."""
    answer: dict[str, Any] = {"error_code": err.kafka_error().code}
    if isinstance(err, NotLeaderOrFollowerError) and err.leader_id >= 0:
        answer["current_leader"] = {"leader_id": err.leader_id, "leader_epoch": err.leader_epoch}
    return answer


def milliseconds(value: datetime.timedelta | int) -> int:
    """A kio duration field (a timedelta) or a plain int, in whole milliseconds. Pure."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)
