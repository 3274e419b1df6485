"""tierlog's wire contract: what the broker, the storage engine and the client must agree on.

Every layer may import this package (:mod:`tierlog.service`, :mod:`tierlog.tiering`, :mod:`tierlog.client`,
the Spark source and the CLI), and it imports nothing from any of them, so the broker and its clients read
one definition of each error code and of each name the native protocol puts on the wire.

- :mod:`tierlog.wire.errors`: the one table of error classes: our code, HTTP status, kind, retriable flag and
  Kafka error code of each.
- :mod:`tierlog.wire.errors_doc`: that table rendered as ``docs/errors.md``.
- :mod:`tierlog.wire.native`: the native API's content type, header names and route prefixes.
"""
