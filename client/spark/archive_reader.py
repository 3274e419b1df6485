"""Synchronous, read-only access to the archive for Spark: plain botocore for S3, plain files for a local
directory. No asyncio, no broker: Spark's driver and executors (Python workers) call it directly.

Both backends offer the same four reads: list keys under a prefix, list "sub-directories" (the
partitions of a topic), whole-object GET and ranged GET with half-open ``[start, end)`` ranges (the
object-store convention of ``tierlog.tiering.remote.object_store``). Vendor errors become
:mod:`tierlog.wire.errors` kinds through :func:`tierlog.tiering.remote.translate.translating`, so a missing
object is ``NotFoundError`` and a throttled request that outlived botocore's retries is ``UnavailableError``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from tierlog.client.spark.options import S3Settings, StoreLocation
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, manifest_prefix, parse_manifest_key
from tierlog.tiering.remote.translate import translating
from tierlog.wire.errors import CorruptRecordError, InvalidRequestError, NotFoundError, UnavailableError

__all__ = ["ArchiveReader", "open_archive", "load_manifest", "list_partitions"]

_MANIFEST_ATTEMPTS = 5


class ArchiveReader(Protocol):
    """Read-only view of one archive (bucket + prefix, or directory). Keys are relative to the prefix.
    Implementations are safe to call from several threads; every method is idempotent (reads only).
    Store failures raise :mod:`tierlog.wire.errors` kinds: ``NotFoundError``, ``UnauthorizedError``,
    ``UnavailableError`` (after botocore's own retries of throttling and 5xx), ``InvalidRequestError``.
    """

    location: StoreLocation

    def list_keys(self, prefix: str) -> Iterator[str]:
        """Keys starting with ``prefix``, in UTF-8 byte order."""
        ...

    def list_children(self, prefix: str) -> list[str]:
        """Names of the "directories" directly under ``prefix`` (which ends with ``/``), sorted."""
        ...

    def get(self, key: str) -> bytes:
        """The whole object. Raises :class:`NotFoundError` if absent."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """``object[start:end]`` (clamped at the object's end). Raises :class:`NotFoundError` if absent."""
        ...


class LocalArchive:
    """The archive in a local directory (``LocalObjectStore``'s layout: key ``a/b`` is ``<root>/a/b``).
    Thread-safe: every read opens its own descriptor.
    """

    def __init__(self, location: StoreLocation) -> None:
        self.location = location
        self._root = Path(location.location)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise InvalidRequestError(f"invalid object key {key!r}")
        return self._root.joinpath(*parts)

    def list_keys(self, prefix: str) -> Iterator[str]:
        base_parts = prefix.split("/")[:-1]
        base = self._root.joinpath(*base_parts) if base_parts else self._root
        keys: list[str] = []
        with translating("list", prefix):
            if not base.is_dir():
                return iter(())
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = [d for d in dirnames if not d.startswith(".tierlog")]
                rel = Path(dirpath).relative_to(self._root).as_posix()
                for name in filenames:
                    key = name if rel == "." else f"{rel}/{name}"
                    if key.startswith(prefix):
                        keys.append(key)
        return iter(sorted(keys))

    def list_children(self, prefix: str) -> list[str]:
        with translating("list", prefix):
            base = self._root.joinpath(*prefix.strip("/").split("/"))
            if not base.is_dir():
                return []
            return sorted(entry.name for entry in base.iterdir() if entry.is_dir())

    def get(self, key: str) -> bytes:
        with translating("get", key):
            return self._path(key).read_bytes()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with translating("get_range", key):
            fd = os.open(self._path(key), os.O_RDONLY)
            try:
                return os.pread(fd, end - start, start)
            finally:
                os.close(fd)


_CLIENTS: dict[tuple[str | None, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _s3_client(s3: S3Settings) -> Any:
    """One botocore client per settings per process (Spark reuses Python workers across tasks)."""
    endpoint = s3.resolved_endpoint()
    path_style = (endpoint is not None) if s3.path_style is None else s3.path_style
    cache_key = (
        endpoint,
        s3.region,
        s3.access_key_id,
        s3.secret_access_key,
        s3.session_token,
        str(path_style),
    )
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(cache_key)
        if client is None:
            import botocore.session
            from botocore.config import Config

            config = Config(
                s3={"addressing_style": "path" if path_style else "auto"},
                retries={"mode": "standard", "total_max_attempts": 5},
                max_pool_connections=16,
                connect_timeout=10,
                read_timeout=60,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            credentials = {
                k: v
                for k, v in {
                    "aws_access_key_id": s3.access_key_id,
                    "aws_secret_access_key": s3.secret_access_key,
                    "aws_session_token": s3.session_token,
                }.items()
                if v is not None
            }
            with translating("connect"):
                client = botocore.session.get_session().create_client(
                    "s3", endpoint_url=endpoint, region_name=s3.region, config=config, **credentials
                )
            _CLIENTS[cache_key] = client
        return client


class S3Archive:
    """The archive in an S3 bucket under a prefix, read with a synchronous botocore client (botocore
    clients are thread-safe; one is shared per settings per process). Ranged GETs use HTTP ``Range``.
    """

    def __init__(self, location: StoreLocation) -> None:
        self.location = location
        self._bucket = location.location
        self._client = _s3_client(location.s3)

    def list_keys(self, prefix: str) -> Iterator[str]:
        full = self.location.key(prefix)
        strip = len(self.location.key(""))
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": full}
            if token:
                kwargs["ContinuationToken"] = token
            with translating("list", full):
                page = self._client.list_objects_v2(**kwargs)
            for item in page.get("Contents", ()):
                yield item["Key"][strip:]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list_children(self, prefix: str) -> list[str]:
        full = self.location.key(prefix)
        names: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": full, "Delimiter": "/"}
            if token:
                kwargs["ContinuationToken"] = token
            with translating("list", full):
                page = self._client.list_objects_v2(**kwargs)
            names.extend(p["Prefix"][len(full) :].rstrip("/") for p in page.get("CommonPrefixes", ()))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return sorted(names)

    def get(self, key: str) -> bytes:
        full = self.location.key(key)
        with translating("get", full):
            response = self._client.get_object(Bucket=self._bucket, Key=full)
            return bytes(response["Body"].read())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        full = self.location.key(key)
        try:
            with translating("get_range", full):
                response = self._client.get_object(
                    Bucket=self._bucket, Key=full, Range=f"bytes={start}-{end - 1}"
                )
                return bytes(response["Body"].read())
        except InvalidRequestError:
            # 416: the range starts at or past the end of the object (clamped, as the store contract says)
            return b""


def open_archive(location: StoreLocation) -> ArchiveReader:
    """The reader for ``location``. Creating an S3 reader does no network I/O."""
    if location.scheme == "s3":
        return S3Archive(location)
    return LocalArchive(location)


def list_partitions(archive: ArchiveReader, topic: str) -> list[int]:
    """The partition numbers of ``topic`` that have objects in the archive, ascending."""
    return sorted(int(name) for name in archive.list_children(f"{topic}/") if name.isdigit())


def load_manifest(archive: ArchiveReader, topic: str, partition: int) -> mf.Manifest:
    """The newest manifest of a partition (``manifest.empty`` if none), as ``ManifestStore.load`` reads it:
    list the versions, read the highest, list again if it vanished meanwhile.

    Raises:
        CorruptRecordError: the newest version does not decode or describes another partition (the error
            names the object; never falls back to an older version).
        UnavailableError: versions kept vanishing; or the store is unreachable.
    """
    for _ in range(_MANIFEST_ATTEMPTS):
        versions = sorted(
            parsed[2]
            for key in archive.list_keys(manifest_prefix(topic, partition))
            if (parsed := parse_manifest_key(key)) is not None
        )
        if not versions:
            return mf.empty(topic, partition)
        key = manifest_key(topic, partition, versions[-1])
        try:
            data = archive.get(key)
        except NotFoundError:
            continue
        try:
            manifest = mf.decode(data)
        except CorruptRecordError as err:
            raise CorruptRecordError(f"corrupt manifest {archive.location.display(key)}: {err}") from err
        if (manifest.topic, manifest.partition, manifest.version) != (topic, partition, versions[-1]):
            raise CorruptRecordError(f"manifest {archive.location.display(key)} describes another partition")
        return manifest
    raise UnavailableError(f"manifest of {topic}-{partition} kept changing while being read")
