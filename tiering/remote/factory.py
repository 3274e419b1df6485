"""Open an object store from a URI: ``s3://bucket[/prefix]``, ``file:///path`` or a plain path.

The result is the backend, wrapped in a :class:`PrefixedStore` when the URI has a prefix and in a
:class:`RetryingStore` unless ``retry=None``. Instrumentation is stacked by the caller (the broker owns
its metrics)::

    store = InstrumentedStore(open_object_store("s3://archive/tierlog"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy
from tierlog.wire.errors import InvalidRequestError

__all__ = ["open_object_store", "parse_store_uri"]

_DEFAULT_RETRY = RetryPolicy()


def parse_store_uri(uri: str) -> tuple[str, str, str]:
    """Split a store URI into ``(scheme, location, prefix)``: ``("s3", bucket, prefix)`` or
    ``("file", absolute_path, "")``. Pure; raises :class:`InvalidRequestError` for anything else.
    """
    if not uri:
        raise InvalidRequestError("object store URI is empty")
    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise InvalidRequestError(f"object store URI {uri!r} names no bucket")
        if parts.query or parts.fragment:
            raise InvalidRequestError(f"object store URI {uri!r} must not have a query or fragment")
        return "s3", parts.netloc, unquote(parts.path).strip("/")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidRequestError(f"file URI {uri!r} must be local (file:///path)")
        return "file", str(Path(unquote(parts.path)).resolve()), ""
    if parts.scheme == "" or (len(parts.scheme) == 1 and uri[1:3] in (":\\", ":/")):
        return "file", str(Path(uri).expanduser().resolve()), ""
    raise InvalidRequestError(f"object store URI scheme {parts.scheme!r} is not supported (s3, file)")


def open_object_store(
    uri: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    path_style: bool | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    retry: RetryPolicy | None = _DEFAULT_RETRY,
    fsync: bool = True,
    **s3_options: Any,
) -> ObjectStore:
    """Build the store a URI names. Does no I/O for S3 (the client connects on first use); creates the
    directory for a local store. ``s3_options`` go to :class:`S3ObjectStore` (``part_size``,
    ``multipart_threshold``, ``upload_concurrency``, ``page_size``, timeouts).

    Raises :class:`InvalidRequestError` for a malformed URI or options. Call ``close()`` on the result.
    """
    scheme, location, prefix = parse_store_uri(uri)
    store: ObjectStore
    if scheme == "s3":
        from tierlog.tiering.remote.s3 import S3ObjectStore  # keeps aiobotocore out of local-only processes

        store = S3ObjectStore(
            location,
            endpoint_url=endpoint_url,
            region=region,
            path_style=path_style,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
            **s3_options,
        )
    else:
        if s3_options:
            raise InvalidRequestError(f"options {sorted(s3_options)} apply to s3:// stores only")
        store = LocalObjectStore(location, fsync=fsync)
    if retry is not None:
        store = RetryingStore(store, retry)
    if prefix:
        store = PrefixedStore(store, prefix)
    return store
