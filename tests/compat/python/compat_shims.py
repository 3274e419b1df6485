"""Patches that let Python 2 era REST Proxy clients import and run on Python 3.11, applied by the drivers
before they import a client. They change the clients' environment, never what goes on the wire.

Runs in the compat venv (tests/compat/install.py), not in the project's venv.
"""

from __future__ import annotations

import collections
import collections.abc
import json
import sys
import types
import urllib.parse
from typing import Any

__all__ = ["patch_kafka_rest", "patch_kafka_rest_client"]


def patch_kafka_rest() -> None:
    """PyPI ``kafka-rest`` 0.0.12: tornado 4.5 reads the ABCs from ``collections`` (moved to
    ``collections.abc`` in 3.3, removed in 3.10), and avro_json_serializer imports ``AvroTypeException`` from
    ``avro.io``, where avro 1.7 had it (avro >= 1.10 keeps it in ``avro.errors``)."""
    for name in ("Mapping", "MutableMapping", "Sequence", "MutableSequence", "Callable", "Iterable", "Set"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))
    import avro.errors
    import avro.io

    if not hasattr(avro.io, "AvroTypeException"):
        avro.io.AvroTypeException = avro.errors.AvroTypeException


def _json_loads_py2(text: str | bytes, *_py2_positional: Any, **kwargs: Any) -> Any:
    """``json.loads(s, 'utf-8')``: Python 2 took ``encoding`` positionally; Python 3 rejects it."""
    return json.loads(text, **kwargs)


def patch_kafka_rest_client() -> None:
    """PyPI ``kafka-rest-client`` 0.8.0: imports the Python 2 module ``urlparse``, and decodes binary values
    with ``json.loads(message, 'utf-8')``. Imports the client module to patch its ``json``."""
    sys.modules.setdefault("urlparse", urllib.parse)
    from proofpoint.kafka import KafkaRestConsumer as module

    module.json = types.SimpleNamespace(loads=_json_loads_py2, dumps=json.dumps)
