"""KIP-392, fetch from the closest replica: which replica a consumer's Fetch may read, and which one the
leader points it to.

* :func:`serving_partition`: a consumer's Fetch v11+ (which carries ``rack_id``, maybe empty) may read a
  follower of the partition, up to the follower's high watermark, as Kafka allows; older versions and
  replicas that follow no known leader epoch answer what the leader lookup answers
  (NOT_LEADER_OR_FOLLOWER with the leader's hint). A fetch past the follower's log end offset answers
  OFFSET_OUT_OF_RANGE, upon which KIP-392's consumers go back to the leader rather than reset.
* :func:`preferred_read_replica`: with ``replica.selector.class=rack-aware``, the leader answers a
  consumer in another rack with no records and the id of an in-sync follower in the consumer's rack
  whose log holds the fetch offset (the most caught up when several do), Kafka's
  ``RackAwareReplicaSelector``; -1 when the leader is in the consumer's rack or no follower fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tierlog.service.kafka.handlers.fetching.partitions import check_leader_epoch, leader_partition
from tierlog.wire.errors import TierlogError

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.partition import Partition

__all__ = ["CLIENT_RACK_VERSION", "RACK_AWARE", "preferred_read_replica", "select", "serving_partition"]

CLIENT_RACK_VERSION = 11  # Fetch v11+: the consumer says its rack (KIP-392)
RACK_AWARE = "rack-aware"
NO_REPLICA = -1


def serving_partition(
    broker: Broker, topic: str, index: int, current_leader_epoch: int, *, follower_reads: bool
) -> tuple[Partition, bool]:
    """The replica here that serves a consumer's fetch of ``topic``/``index`` and whether it is a
    follower: the leader, or with ``follower_reads`` a follower that knows its leader epoch. Raises what
    :func:`~.partitions.leader_partition` raises."""
    try:
        return leader_partition(broker, topic, index, current_leader_epoch), False
    except TierlogError:
        local = broker.topic(topic).local(index) if follower_reads else None
        if local is None or not local.serves_follower_reads:
            raise
    check_leader_epoch(local, current_leader_epoch)
    return local, True


def select(client_rack: str, leader: int, replicas: Sequence[tuple[int, str | None, int]]) -> int:
    """Kafka's RackAwareReplicaSelector over ``replicas`` (``(broker id, rack, log end offset)``, the
    leader among them): the leader when it is in ``client_rack`` or no replica is; else the replica in
    the rack with the highest log end offset (the lowest id on a tie). Pure."""
    in_rack = [(broker_id, leo) for broker_id, rack, leo in replicas if rack == client_rack]
    if not client_rack or not in_rack or any(broker_id == leader for broker_id, _ in in_rack):
        return leader
    return min(in_rack, key=lambda r: (-r[1], r[0]))[0]


def preferred_read_replica(broker: Broker, partition: Partition, client_rack: str, offset: int) -> int:
    """The follower a consumer in ``client_rack`` fetching ``offset`` should read instead of this leader;
    -1 for this leader itself (or not leading here). Pure lookup, no I/O."""
    leader = partition.leader
    if leader is None or not client_rack:
        return NO_REPLICA
    view = broker.cluster_view()
    own = broker.broker_id
    replicas: list[tuple[int, str | None, int]] = [
        (own, broker.settings.broker_rack, partition.log_end_offset)
    ]
    for follower in leader.isr:
        registration = view.broker(follower)
        if follower == own or registration is None or not registration.kafka:
            continue
        progress = leader.progress(follower)
        if progress.log_end_offset >= offset:
            replicas.append((follower, registration.rack, progress.log_end_offset))
    chosen = select(client_rack, own, replicas)
    return NO_REPLICA if chosen == own else chosen
