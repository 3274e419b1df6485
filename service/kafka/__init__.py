"""Kafka's wire protocol: a listener in every broker serving Kafka's clients and tools over the same topics,
partitions, groups and producer state as the HTTP APIs (docs/kafka-protocol.md).

* :mod:`.frames`: request and response framing and headers (sans I/O);
* :mod:`.messages`: message bodies through kio's schemas (generated from Kafka's definitions), and
  :func:`~.messages.shape`, which builds any version's answer from one description (sans I/O);
* :mod:`.apis`: the registry of served API keys and versions; :mod:`.handlers`: one module per family;
* :mod:`.server`: the TCP listener; :mod:`.setup`: its place in the app.

This package is an API beside ``rest_v2``, ``admin_v3`` and ``native_api`` and imports none of them.
"""

from __future__ import annotations

import sys


def _load_kio_without_hypothesis() -> None:
    """Import kio's base types with Hypothesis hidden, before any module of this package imports kio.

    kio registers a Hypothesis strategy for each of its primitive types at import when Hypothesis can be
    imported (it can in a development venv): that imports all of Hypothesis and builds strategies, more
    than half a second of a broker's start-up for nothing the broker uses. A process that has imported
    Hypothesis already (a test run that uses it) keeps kio's hooks."""
    if "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # None in sys.modules: ImportError
    try:
        import kio.static._phantom  # noqa: F401 - imported with Hypothesis hidden on purpose
    finally:
        del sys.modules["hypothesis"]


_load_kio_without_hypothesis()
