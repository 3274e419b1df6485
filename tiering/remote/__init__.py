"""The remote tier's storage layer: one narrow object-store interface, its backends and its wrappers,
the bucket layout and the per-partition manifest.

``layout`` and ``manifest`` are pure (no I/O, nothing async, no S3 client) so Spark executors can import
them without the broker's dependencies. This package's names are therefore loaded lazily: importing
``tiering.remote.manifest`` does not import botocore, aiobotocore or asyncio-based modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiering.remote.caching import CacheStats, CachingStore
    from tiering.remote.factory import open_object_store, parse_store_uri
    from tiering.remote.faults import FaultInjectingStore
    from tiering.remote.instrumented import InstrumentedStore
    from tiering.remote.local import LocalObjectStore
    from tiering.remote.manifest_store import ManifestStore
    from tiering.remote.prefixed import PrefixedStore
    from tiering.remote.retrying import RetryingStore, RetryPolicy
    from tiering.remote.store import ObjectInfo, ObjectStore, validate_key

_EXPORTS = {
    "CacheStats": "tiering.remote.caching",
    "CachingStore": "tiering.remote.caching",
    "FaultInjectingStore": "tiering.remote.faults",
    "InstrumentedStore": "tiering.remote.instrumented",
    "LocalObjectStore": "tiering.remote.local",
    "ManifestStore": "tiering.remote.manifest_store",
    "ObjectInfo": "tiering.remote.store",
    "ObjectStore": "tiering.remote.store",
    "PrefixedStore": "tiering.remote.prefixed",
    "RetryPolicy": "tiering.remote.retrying",
    "RetryingStore": "tiering.remote.retrying",
    "open_object_store": "tiering.remote.factory",
    "parse_store_uri": "tiering.remote.factory",
    "validate_key": "tiering.remote.store",
}

__all__ = [
    "CacheStats",
    "CachingStore",
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
        raise AttributeError(f"module 'tiering.remote' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
