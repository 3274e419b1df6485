"""The reading family of Kafka APIs: Fetch (key 1), ListOffsets (key 2) and OffsetForLeaderEpoch (key 23),
over the same partitions and domain calls as the native fetch, the native ``offsets`` route and the
replication ``epochs`` route. Importing this package registers all three.

* :mod:`.partitions`: finding the partition a request names, fencing by the client's leader epoch;
* :mod:`.fetch`: Fetch, with the long poll over every requested partition and the byte limits;
* :mod:`.replicas`: KIP-392, consumers reading followers and the leader's preferred read replica;
* :mod:`.list_offsets`: ListOffsets (earliest, latest, by time, max timestamp, earliest local, latest
  tiered);
* :mod:`.leader_epochs`: OffsetForLeaderEpoch.
"""

from tierlog.service.kafka.handlers.fetching import fetch, leader_epochs, list_offsets

__all__ = ["fetch", "leader_epochs", "list_offsets"]
