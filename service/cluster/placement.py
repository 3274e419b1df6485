"""Replica placement: which brokers hold each partition of a new topic, or of partitions added to one.

The assignment follows Kafka's (``broker.rack`` and the replica assignment of ``kafka-topics --create``):

* **Rack-unaware** (some broker has no rack): brokers sorted by id; partition ``p``'s first replica (its
  preferred leader) is broker ``(p + start) % B``; the followers come after it at a distance
  ``1 + (shift + j) % (B - 1)`` for the ``j``-th follower, where ``shift`` grows by one every ``B``
  partitions. Leaders are therefore spread evenly (their counts differ by at most one), a partition's
  replicas are distinct brokers, and the followers of one broker's partitions are spread over the others
  instead of always landing on its neighbour.
* **Rack-aware** (every broker has a rack): the brokers are first interleaved rack by rack (racks sorted,
  brokers of a rack sorted by id: ``a1, b1, c1, a2, b2, ...``), then the same walk runs over that list,
  skipping a broker whose rack already holds a replica of the partition while some rack holds none, and a
  broker that already holds one while some broker holds none. A partition's replicas therefore sit on
  distinct racks while racks last, and on distinct brokers always.

``start_index`` fixes both the first leader's position and the initial follower shift (Kafka's
``fixedStartIndex``); ``None`` picks them at random, so that topics created one after the other do not all
put partition 0 on the same broker. Adding partitions to a topic passes ``first_partition`` (the current
count) and ``start_index`` (the position of partition 0's first replica in the broker list) so the new
partitions continue the same pattern. Unlike Kafka, the follower shift then also counts the rounds of
partitions already placed, so partitions ``6..9`` added to a topic of six get the replicas they would have had
had the topic been created with ten.

Pure apart from the random start when ``start_index`` is ``None``; safe to call concurrently.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tierlog.wire.errors import InvalidConfigError

__all__ = ["assign_replicas", "rack_alternated"]


def assign_replicas(
    brokers: Sequence[tuple[int, str | None]],
    partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start_index: int | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``first_partition .. first_partition + partitions - 1``, each with its
    preferred leader first. ``brokers`` are ``(broker_id, rack)`` pairs in any order (duplicates of one id
    count once; the rack seen last wins).

    Raises:
        InvalidConfigError: ``partitions`` < 1, ``replication_factor`` < 1, or more replicas than brokers
            ("Replication factor: R larger than available brokers: B.").
    """
    racks = {broker_id: rack for broker_id, rack in brokers}
    if partitions <= 0:
        raise InvalidConfigError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidConfigError("Replication factor must be larger than 0.")
    if replication_factor > len(racks):
        raise InvalidConfigError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(racks)}."
        )
    if all(rack is not None for rack in racks.values()):
        known = {broker_id: rack for broker_id, rack in racks.items() if rack is not None}
        ordered = rack_alternated(known)
        rack_of: dict[int, str] | None = known
    else:
        ordered = sorted(racks)
        rack_of = None
    start = random.randrange(len(ordered)) if start_index is None else start_index
    shift = random.randrange(len(ordered)) if start_index is None else start_index
    return _walk(ordered, rack_of, partitions, replication_factor, max(0, first_partition), start, shift)


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Broker ids interleaved rack by rack: racks in name order, brokers of each rack in id order, one
    broker of each rack in turn until every broker is listed. Pure."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(column) for column in columns)
    return [column[row] for row in range(depth) for column in columns if row < len(column)]


def _walk(
    ordered: list[int],
    rack_of: dict[int, str] | None,
    partitions: int,
    replication_factor: int,
    first_partition: int,
    start: int,
    shift: int,
) -> list[tuple[int, ...]]:
    count = len(ordered)
    # Rack-aware, the shift moves in whole rounds of racks so followers keep alternating racks.
    step = 1 if rack_of is None else len(set(rack_of.values()))
    # Rounds already placed count too, so added partitions get the followers a bigger topic would have had.
    shift += first_partition // count
    result: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + partitions):
        if partition > first_partition and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        if rack_of is None:
            followers = [ordered[_follower(first, shift, j, count)] for j in range(replication_factor - 1)]
            result.append((ordered[first], *followers))
        else:
            result.append(_rack_aware_replicas(ordered, rack_of, first, shift * step, replication_factor))
    return result


def _follower(first: int, shift: int, j: int, count: int) -> int:
    """The index of the ``j``-th follower: never ``first`` itself (the distance is 1 .. count-1)."""
    return (first + 1 + (shift + j) % (count - 1)) % count


def _rack_aware_replicas(
    ordered: list[int], rack_of: dict[int, str], first: int, shift: int, replication_factor: int
) -> tuple[int, ...]:
    leader = ordered[first]
    replicas = [leader]
    used_racks = {rack_of[leader]}
    all_racks = len(set(rack_of.values()))
    j = 0
    while len(replicas) < replication_factor:
        broker = ordered[_follower(first, shift, j, len(ordered))]
        j += 1
        rack_free = rack_of[broker] not in used_racks or len(used_racks) == all_racks
        if rack_free and broker not in replicas:
            replicas.append(broker)
            used_racks.add(rack_of[broker])
    return tuple(replicas)
