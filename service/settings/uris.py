"""The two settings whose value is a structured URI: ``remote.uri`` (:class:`RemoteUri`) and ``metadata.uri``
(:class:`MetadataUri`), with their parsers. Pure; every parser raises ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["MetadataUri", "RemoteUri", "optional_metadata_uri", "parse_metadata_uri", "parse_remote_uri"]

_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class RemoteUri:
    """Where the remote tier lives: a local directory or ``s3://bucket/prefix``."""

    scheme: str
    path: Path | None = None
    bucket: str = ""
    prefix: str = ""

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return str(self.path)


@dataclass(frozen=True, slots=True)
class MetadataUri:
    """Where the cluster metadata lives: an etcd cluster's client endpoints and a key prefix, or (scheme
    ``file``) one local metadata file for a cluster of a single broker without etcd."""

    scheme: str  # "etcd" or "file"
    endpoints: tuple[tuple[str, int], ...]
    prefix: str  # etcd: keys live under "/<prefix>/"; never empty
    path: Path | None = None  # file: the metadata file

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        hosts = ",".join(f"{host}:{port}" for host, port in self.endpoints)
        return f"{self.scheme}://{hosts}/{self.prefix}"


def parse_metadata_uri(raw: str) -> MetadataUri:
    """``etcd://host:port[,host:port...][/prefix]`` (prefix default ``tierlog``), or ``file:///path``: the
    local metadata store persisted in one file (one broker, no etcd). Pure.

    Raises: ValueError naming what is wrong (scheme, host, port, prefix characters, path).
    """
    parts = urlsplit(raw.strip())
    if parts.scheme == "file":
        absolute = parts.path.startswith("/") and not parts.path.endswith("/")
        if parts.netloc not in ("", "localhost") or not absolute:
            raise ValueError("expected file:///absolute/path/of/the/metadata/file")
        if parts.query or parts.fragment:
            raise ValueError("a file:// URI takes no query or fragment")
        return MetadataUri("file", (), "", Path(parts.path))
    if parts.scheme != "etcd":
        raise ValueError("expected etcd://host:port[,host:port...]/prefix or file:///path")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("an etcd:// URI takes no credentials, query or fragment")
    endpoints: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {item!r} is not host:port")
        endpoints.append((host.strip("[]"), int(port)))
    prefix = parts.path.strip("/") or "tierlog"
    if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", prefix):
        raise ValueError(f"prefix {prefix!r} may hold only letters, digits, '.', '_', '-' and '/'")
    return MetadataUri("etcd", tuple(endpoints), prefix)


def optional_metadata_uri(raw: str) -> MetadataUri | None:
    """:func:`parse_metadata_uri`, or None for a blank value (one broker on local metadata)."""
    return parse_metadata_uri(raw) if raw.strip() else None


def parse_remote_uri(raw: str) -> RemoteUri | None:
    """A directory, ``file:///path`` or ``s3://bucket/prefix``; None for a blank value (the default under
    ``data.dir``, which a cross-field rule fills in). Pure.

    Raises: ValueError naming what is wrong (scheme, bucket name, credentials, query), never echoing what
    may be credentials.
    """
    if not raw.strip():
        return None
    raw = raw.strip()
    parts = urlsplit(raw)
    if parts.scheme == "s3":
        bucket = parts.netloc
        if "@" in bucket:  # never echo what may be credentials
            raise ValueError("an s3:// URI takes no credentials: use the AWS_* environment or a profile")
        if not _S3_BUCKET.match(bucket) or ".." in bucket:
            raise ValueError(f"invalid S3 bucket name {bucket!r}")
        if parts.query or parts.fragment:
            raise ValueError("an s3:// URI takes no query or fragment")
        return RemoteUri("s3", bucket=bucket, prefix=parts.path.strip("/"))
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ValueError("expected file:///absolute/path")
        return RemoteUri("file", path=Path(parts.path))
    if parts.scheme and len(parts.scheme) > 1:
        raise ValueError(f"unsupported scheme {parts.scheme!r}: use a directory or s3://bucket/prefix")
    return RemoteUri("file", path=Path(raw).absolute())
