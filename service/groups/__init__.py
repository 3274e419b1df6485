"""Consumer groups: the coordinator, committed offsets, REST v2 consumer instances and their routes.

The coordinator (:mod:`.coordinator`, :mod:`.assignors`, :mod:`.offsets`) keeps Kafka's group semantics;
group shards are led like partitions (:mod:`.shards`, :mod:`.leadership`) and requests for a group another
broker coordinates are forwarded there (:mod:`.routing`). The HTTP faces are :mod:`.rest` (Confluent REST
v2 consumers), :mod:`.native` (the Python client's group calls) and :mod:`.admin` (v3 group views);
:mod:`.setup` wires them into the app. Design: ``docs/design/0006-consumer-groups.md``.
"""
