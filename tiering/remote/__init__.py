"""The remote tier's storage layer: one narrow object-store interface, its backends and its wrappers,
the bucket layout and the per-partition manifest.

``layout`` and ``manifest`` are pure (no I/O, nothing async, no S3 client) so Spark executors can import
them without the broker's dependencies. This package's names are therefore loaded lazily: importing
``tierlog.tiering.remote.manifest`` does not import botocore, aiobotocore or asyncio-based modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tierlog.tiering.remote.factory import open_object_store, parse_store_uri
    from tierlog.tiering.remote.faults import FaultInjectingStore
    from tierlog.tiering.remote.instrumented import InstrumentedStore
    from tierlog.tiering.remote.local import LocalObjectStore
    from tierlog.tiering.remote.manifest_store import ManifestStore
    from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore, validate_key
    from tierlog.tiering.remote.prefixed import PrefixedStore
    from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy

_EXPORTS = {
    "FaultInjectingStore": "tierlog.tiering.remote.faults",
    "InstrumentedStore": "tierlog.tiering.remote.instrumented",
    "LocalObjectStore": "tierlog.tiering.remote.local",
    "ManifestStore": "tierlog.tiering.remote.manifest_store",
    "ObjectInfo": "tierlog.tiering.remote.object_store",
    "ObjectStore": "tierlog.tiering.remote.object_store",
    "PrefixedStore": "tierlog.tiering.remote.prefixed",
    "RetryPolicy": "tierlog.tiering.remote.retrying",
    "RetryingStore": "tierlog.tiering.remote.retrying",
    "open_object_store": "tierlog.tiering.remote.factory",
    "parse_store_uri": "tierlog.tiering.remote.factory",
    "validate_key": "tierlog.tiering.remote.object_store",
}

__all__ = [
    "FaultInjectingStore",
    "InstrumentedStore",
    "LocalObjectStore",
    "ManifestStore",
    "ObjectInfo",
    "ObjectStore",
    "PrefixedStore",
    "RetryPolicy",
    "RetryingStore",
    "open_object_store",
    "parse_store_uri",
    "validate_key",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tierlog.tiering.remote' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
