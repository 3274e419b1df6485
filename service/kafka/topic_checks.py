"""What CreateTopics and CreatePartitions refuse before calling the broker, with Kafka's error codes, sans
I/O.

The broker's own checks (:mod:`tierlog.service.topics.rules`) refuse every bad topic change with one
error, INVALID_CONFIG on this listener. Kafka's clients tell the cases apart by code, so these functions
find the case first, with Kafka's code and message: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST, and
POLICY_VIOLATION for tierlog's own rule that names starting with ``__`` are internal. What passes them
is checked again by the broker (configs, and anything that changed in between).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.topics.data_dir import topic_name_problem
from tierlog.service.topics.rules import MAX_PARTITIONS

__all__ = ["Refusal", "Wanted", "check_assignments", "check_create", "check_partition_growth"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A Kafka error code and message for one topic of a request."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a create asks of the broker: the partition count and replication factor (None: default)."""

    partitions: int | None
    replication_factor: int | None


def check_create(
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignments: Sequence[tuple[int, Sequence[int]]],
    *,
    existing: Collection[str],
    live_brokers: Sequence[int],
    single_broker: bool,
) -> Wanted | Refusal:
    """A CreateTopics entry checked as Kafka checks it: the name, then existence and collisions, then the
    partition count, the replication factor and the manual assignment (``(partition, broker ids)``).
    ``-1`` asks for the broker's default. Pure."""
    problem = topic_name_problem(name)
    if problem is not None:
        return Refusal(ErrorCode.invalid_topic_exception, problem)
    if name in existing:
        return Refusal(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    folded = name.replace(".", "_")
    for other in sorted(existing):
        if other.replace(".", "_") == folded:
            return Refusal(
                ErrorCode.invalid_topic_exception, f"Topic '{name}' collides with existing topic: {other}"
            )
    if name.startswith("__"):
        return Refusal(
            ErrorCode.policy_violation,
            f"Topic name {name!r} is reserved: names starting with '__' are internal",
        )
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            return Refusal(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        indexes = [index for index, _ in assignments]
        if indexes != list(range(len(assignments))):
            return Refusal(
                ErrorCode.invalid_replica_assignment,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        refused = check_assignments(
            [brokers for _, brokers in assignments], live_brokers, single_broker=single_broker
        )
        if refused is not None:
            return refused
        return Wanted(len(assignments), len(assignments[0][1]))
    if num_partitions == 0 or num_partitions < -1:
        return Refusal(
            ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
        )
    if num_partitions > MAX_PARTITIONS:
        return Refusal(
            ErrorCode.invalid_partitions,
            f"Number of partitions must be an integer between 1 and {MAX_PARTITIONS}.",
        )
    if replication_factor == 0 or replication_factor < -1:
        return Refusal(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if replication_factor > len(live_brokers):
        return Refusal(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: {len(live_brokers)}.",
        )
    return Wanted(
        None if num_partitions == -1 else num_partitions,
        None if replication_factor == -1 else replication_factor,
    )


def check_assignments(
    assignments: Sequence[Sequence[int]], live_brokers: Sequence[int], *, single_broker: bool
) -> Refusal | None:
    """Manual replica assignments (one broker list per partition): Kafka's rules (the same non-zero
    length, no broker twice, live brokers only), then tierlog's: the cluster places replicas itself, so
    only a single broker's one possible assignment (itself for every partition) is taken. Pure."""
    sizes = {len(brokers) for brokers in assignments}
    if 0 in sizes:
        return Refusal(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    if len(sizes) > 1:
        return Refusal(
            ErrorCode.invalid_replica_assignment, "All partitions should have the same number of replicas."
        )
    for brokers in assignments:
        if len(set(brokers)) != len(brokers):
            return Refusal(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a duplicate broker: {list(brokers)}",
            )
        unknown = [b for b in brokers if b not in live_brokers]
        if unknown:
            return Refusal(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {unknown[0]}, which is not a live broker.",
            )
    if not single_broker:
        return Refusal(
            ErrorCode.invalid_replica_assignment,
            "tierlog places replicas itself: create the topic with a partition count and replication factor",
        )
    return None


def check_partition_growth(
    name: str,
    current: int,
    count: int,
    assignments: Sequence[Sequence[int]] | None,
    *,
    live_brokers: Sequence[int],
    single_broker: bool,
) -> Refusal | None:
    """A CreatePartitions entry: the new ``count`` must be above the ``current`` one (INVALID_PARTITIONS,
    as Kafka says for an equal count too), within the limit, with one assignment per new partition when
    assignments are given. Pure."""
    if count < current:
        return Refusal(
            ErrorCode.invalid_partitions,
            f"Topic currently has {current} partitions, which is higher than the requested {count}.",
        )
    if count == current:
        return Refusal(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    if count > MAX_PARTITIONS:
        return Refusal(
            ErrorCode.invalid_partitions,
            f"Number of partitions must be an integer between 1 and {MAX_PARTITIONS}.",
        )
    if assignments is not None:
        if len(assignments) != count - current:
            return Refusal(
                ErrorCode.invalid_replica_assignment,
                f"Increasing the number of partitions by {count - current} but {len(assignments)} "
                f"assignments provided for topic {name}.",
            )
        return check_assignments(assignments, live_brokers, single_broker=single_broker)
    return None
