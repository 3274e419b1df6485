"""The native binary API (``/native/v1``): raw Kafka v2 record batches in and out, no JSON or base64 per
record; the Python client's data path (``docs/native-api.md``).

* :mod:`.routes`: produce, fetch, offsets and metadata routes;
* :mod:`.producers`: producer ids for idempotent producers;
* :mod:`.openapi`: the OpenAPI entries of these routes.

The content type and header names are the wire contract in :mod:`tierlog.wire.native`, shared with the
client, the cluster proxy and replication. This package imports neither ``rest_v2`` nor ``admin_v3``.
"""
