"""The remote tier's storage layer: one narrow object-store interface, its backends and its wrappers,
the bucket layout and the per-partition manifest.

``layout`` and ``manifest`` are pure (no I/O, nothing async) so Spark executors can import them without
the broker's dependencies; importing this package does not import aiobotocore (``S3ObjectStore`` lives in
``tiering.remote.s3`` and is loaded by :func:`open_object_store` on demand).
"""

from tiering.remote.caching import CacheStats, CachingStore
from tiering.remote.factory import open_object_store, parse_store_uri
from tiering.remote.faults import FaultInjectingStore
from tiering.remote.instrumented import InstrumentedStore
from tiering.remote.local import LocalObjectStore
from tiering.remote.manifest_store import ManifestStore
from tiering.remote.prefixed import PrefixedStore
from tiering.remote.retrying import RetryingStore, RetryPolicy
from tiering.remote.store import ObjectInfo, ObjectStore, validate_key

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
