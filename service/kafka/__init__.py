"""Kafka's wire protocol: a listener in every broker serving Kafka's clients and tools over the same topics,
partitions, groups and producer state as the HTTP APIs (docs/kafka-protocol.md).

* :mod:`.frames`: request and response framing and headers (sans I/O);
* :mod:`.messages`: message bodies through kio's schemas (generated from Kafka's definitions), and
  :func:`~.messages.shape`, which builds any version's answer from one description (sans I/O);
* :mod:`.apis`: the registry of served API keys and versions; :mod:`.handlers`: one module per family;
* :mod:`.server`: the TCP listener; :mod:`.setup`: its place in the app.

This package is an API beside ``rest_v2``, ``admin_v3`` and ``native_api`` and imports none of them.
"""
