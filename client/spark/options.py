"""The options of the ``tierlog`` Spark data source, parsed once on the driver into plain values.

Pure: no I/O, no Spark import, nothing async. Option names are case-insensitive (Spark passes them in a
case-insensitive map) and follow Spark's Kafka source where one exists, so a Kafka job ports by changing
the format name:

============================  =====================================================================
``uri``                       ``s3://bucket/prefix`` (``s3a://`` too), ``file:///dir`` or a plain path
``topic`` / ``subscribe``     one topic, or several separated by commas
``assign``                    ``{"events":[0,2]}``: exactly these partitions
``partitions``                ``0,2``: only these partition numbers (of every topic)
``startingOffsets``           ``earliest`` (batch default), ``latest`` (stream default) or
                              ``{"events":{"0":23,"1":-2}}`` (-2 earliest, -1 latest)
``endingOffsets``             ``latest`` (default) or ``{"events":{"0":50,"1":-1}}`` (exclusive)
``startingTimestamp``         ms; start at the first record whose timestamp is >= it
``endingTimestamp``           ms; stop before the first record whose timestamp is >= it
``startingOffsetsByTimestamp``  ``{"events":{"0":1700000000000}}``; ``endingOffsetsByTimestamp`` too
``failOnDataLoss``            ``true``: a requested offset below what the archive holds is an error
``includeHeaders``            ``true`` (default): the ``headers`` column is part of the schema
``onCorruption``              ``fail`` (default) or ``skip`` (skip the rest of a corrupt object, count it)
``maxBytesPerPartition``      split segments larger than this into byte ranges (default 128 MiB)
``readChunkBytes``            size of each ranged GET (default 8 MiB)
``maxRowsPerBatch``           rows per Arrow record batch (default 10000)
``maxOffsetsPerTrigger``      streaming: at most this many offsets per micro-batch
``s3.endpoint.url``           else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, else AWS
``s3.region``, ``s3.access.key.id``, ``s3.secret.access.key``, ``s3.session.token``: override the
                              standard AWS credential chain; ``s3.path.style``: ``true``/``false``
============================  =====================================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tierlog.tiering.remote.layout import validate_topic
from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Bound",
    "S3Settings",
    "StoreLocation",
    "ScanOptions",
    "parse_options",
    "parse_store_location",
]

EARLIEST = -2
LATEST = -1
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class S3Settings:
    """How to reach S3. ``None`` fields fall back to the standard AWS chain (environment, profile, role)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    path_style: bool | None = None

    def resolved_endpoint(self) -> str | None:
        """The explicit endpoint, else ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``, else AWS."""
        return (
            self.endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where the archive is: ``scheme`` ``s3`` (``location`` = bucket) or ``file`` (``location`` = a
    directory); ``prefix`` is the key prefix inside the bucket ("" for none), without slashes at the ends.
    """

    scheme: str
    location: str
    prefix: str
    s3: S3Settings = field(default_factory=S3Settings)

    def key(self, relative: str) -> str:
        """The full object key (or relative file path) of a key relative to the prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def display(self, relative: str) -> str:
        """A URI naming one object, for error messages."""
        if self.scheme == "s3":
            return f"s3://{self.location}/{self.key(relative)}"
        return str(Path(self.location, *relative.split("/")))


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of the range to read in one partition: an offset (``EARLIEST``/``LATEST`` or >= 0) or a
    timestamp (ms). A timestamp bound wins over an offset bound, as in Spark's Kafka source.
    """

    offset: int
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """Every option, validated. Picklable (it travels to the executors inside the reader)."""

    store: StoreLocation
    topics: tuple[str, ...]
    assign: dict[str, tuple[int, ...]] | None
    partitions: frozenset[int] | None
    starting: dict[str, dict[int, Bound]]
    starting_default: Bound
    ending: dict[str, dict[int, Bound]]
    ending_default: Bound
    fail_on_data_loss: bool
    include_headers: bool
    skip_corrupt: bool
    max_bytes_per_partition: int
    read_chunk_bytes: int
    max_rows_per_batch: int
    max_offsets_per_trigger: int | None

    def start_bound(self, topic: str, partition: int) -> Bound:
        return self.starting.get(topic, {}).get(partition, self.starting_default)

    def end_bound(self, topic: str, partition: int) -> Bound:
        return self.ending.get(topic, {}).get(partition, self.ending_default)

    def selects(self, topic: str, partition: int) -> bool:
        """Whether ``topic``-``partition`` is to be read at all."""
        if self.assign is not None and partition not in self.assign.get(topic, ()):
            return False
        return self.partitions is None or partition in self.partitions


def parse_store_location(uri: str, s3: S3Settings | None = None) -> StoreLocation:
    """Split ``s3://bucket/prefix``, ``file:///dir`` or a plain path. Pure; raises
    :class:`InvalidRequestError` for an empty URI, a bucket-less S3 URI or another scheme.
    """
    if not uri:
        raise InvalidRequestError("option 'uri' is required (s3://bucket/prefix or a directory)")
    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise InvalidRequestError(f"uri {uri!r} names no bucket")
        return StoreLocation("s3", parts.netloc, unquote(parts.path).strip("/"), s3 or S3Settings())
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidRequestError(f"file uri {uri!r} must be local (file:///path)")
        return StoreLocation("file", str(Path(unquote(parts.path)).resolve()), "")
    if parts.scheme == "":
        return StoreLocation("file", str(Path(uri).expanduser().resolve()), "")
    raise InvalidRequestError(f"uri scheme {parts.scheme!r} is not supported (s3, s3a, file)")


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return None if value is None else str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidRequestError(f"option {name!r} must be true or false, not {raw!r}")


def _int(options: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidRequestError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < low:
        raise InvalidRequestError(f"option {name!r} must be >= {low}, not {value}")
    return value


def _json(options: Mapping[str, str], name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as err:
        raise InvalidRequestError(f"option {name!r} is not valid JSON: {err}") from None


def _per_partition(name: str, value: Any) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": n}}`` -> ``{"topic": {0: n}}``, validated."""
    if not isinstance(value, dict):
        raise InvalidRequestError(f"option {name!r} must be a JSON object of topics")
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in value.items():
        validate_topic(topic)
        if not isinstance(partitions, dict):
            raise InvalidRequestError(f"option {name!r}: topic {topic!r} must map partitions to numbers")
        inner: dict[int, int] = {}
        for key, number in partitions.items():
            if not str(key).isdigit() or isinstance(number, bool) or not isinstance(number, int):
                raise InvalidRequestError(f"option {name!r}: bad entry {key!r}: {number!r}")
            inner[int(key)] = number
        out[topic] = inner
    return out


def _offset_word(name: str, raw: str, *, allow_earliest: bool) -> int | None:
    word = raw.strip().lower()
    if word == "latest":
        return LATEST
    if word == "earliest":
        if not allow_earliest:
            raise InvalidRequestError(f"option {name!r} cannot be 'earliest'")
        return EARLIEST
    return None


def _bounds(
    options: Mapping[str, str], which: str, default_offset: int
) -> tuple[dict[str, dict[int, Bound]], Bound]:
    """Resolve ``<which>OffsetsByTimestamp`` > ``<which>Timestamp`` > ``<which>Offsets``."""
    by_ts_name, ts_name, off_name = f"{which}OffsetsByTimestamp", f"{which}Timestamp", f"{which}Offsets"
    starting = which == "starting"
    by_ts = _get(options, by_ts_name)
    if by_ts is not None:
        table = _per_partition(by_ts_name, _json(options, by_ts_name, by_ts))
        for topic, partitions in table.items():
            for partition, ts in partitions.items():
                if ts < 0:
                    raise InvalidRequestError(
                        f"option {by_ts_name!r}: negative timestamp for {topic}-{partition}"
                    )
        return (
            {t: {p: Bound(LATEST, ts) for p, ts in ps.items()} for t, ps in table.items()},
            Bound(EARLIEST if starting else LATEST),
        )
    ts_all = _int(options, ts_name, None, 0)
    if ts_all is not None:
        return {}, Bound(LATEST, ts_all)
    raw = _get(options, off_name)
    if raw is None:
        return {}, Bound(default_offset)
    word = _offset_word(off_name, raw, allow_earliest=starting)
    if word is not None:
        return {}, Bound(word)
    table = _per_partition(off_name, _json(options, off_name, raw))
    bounds: dict[str, dict[int, Bound]] = {}
    for topic, partitions in table.items():
        for partition, offset in partitions.items():
            if offset < EARLIEST or (offset == EARLIEST and not starting):
                raise InvalidRequestError(
                    f"option {off_name!r}: invalid offset {offset} for {topic}-{partition}"
                )
        bounds[topic] = {p: Bound(o) for p, o in partitions.items()}
    # Partitions a JSON table leaves out: earliest to latest (Spark requires them all; we are lenient).
    return bounds, Bound(EARLIEST if starting else LATEST)


def _topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]] | None]:
    assign_raw = _get(options, "assign")
    if assign_raw is not None:
        value = _json(options, "assign", assign_raw)
        if not isinstance(value, dict) or not value:
            raise InvalidRequestError("option 'assign' must be a JSON object of topic -> [partitions]")
        assign: dict[str, tuple[int, ...]] = {}
        for topic, parts in value.items():
            validate_topic(topic)
            if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
                raise InvalidRequestError(f"option 'assign': topic {topic!r} needs a list of partitions")
            assign[topic] = tuple(sorted(set(parts)))
        return tuple(sorted(assign)), assign
    raw = _get(options, "topic") or _get(options, "subscribe")
    if not raw:
        raise InvalidRequestError("one of the options 'topic', 'subscribe' or 'assign' is required")
    topics = tuple(dict.fromkeys(validate_topic(t.strip()) for t in raw.split(",") if t.strip()))
    if not topics:
        raise InvalidRequestError("option 'topic' names no topic")
    return topics, None


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> ScanOptions:
    """Validate every option (see the module docstring). Pure, thread-safe and idempotent.

    Raises:
        InvalidRequestError: a missing ``uri`` or topic, a malformed value; the message names the option.
    """
    s3 = S3Settings(
        endpoint_url=_get(options, "s3.endpoint.url"),
        region=_get(options, "s3.region"),
        access_key_id=_get(options, "s3.access.key.id"),
        secret_access_key=_get(options, "s3.secret.access.key"),
        session_token=_get(options, "s3.session.token"),
        path_style=None if _get(options, "s3.path.style") is None else _bool(options, "s3.path.style", True),
    )
    store = parse_store_location(_get(options, "uri") or _get(options, "path") or "", s3)
    topics, assign = _topics(options)
    partitions_raw = _get(options, "partitions")
    partitions: frozenset[int] | None = None
    if partitions_raw is not None:
        try:
            partitions = frozenset(int(p) for p in partitions_raw.split(",") if p.strip())
        except ValueError:
            raise InvalidRequestError(
                f"option 'partitions' must be numbers, not {partitions_raw!r}"
            ) from None
        if any(p < 0 for p in partitions):
            raise InvalidRequestError("option 'partitions' must not hold negative numbers")
    starting, starting_default = _bounds(options, "starting", LATEST if streaming else EARLIEST)
    ending, ending_default = _bounds(options, "ending", LATEST)
    mode = (_get(options, "onCorruption") or "fail").strip().lower()
    if mode not in ("fail", "skip"):
        raise InvalidRequestError(f"option 'onCorruption' must be 'fail' or 'skip', not {mode!r}")
    return ScanOptions(
        store=store,
        topics=topics,
        assign=assign,
        partitions=partitions,
        starting=starting,
        starting_default=starting_default,
        ending=ending,
        ending_default=ending_default,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", True),
        skip_corrupt=mode == "skip",
        max_bytes_per_partition=_int(options, "maxBytesPerPartition", 128 * MIB, 1) or 128 * MIB,
        read_chunk_bytes=_int(options, "readChunkBytes", 8 * MIB, 1024) or 8 * MIB,
        max_rows_per_batch=_int(options, "maxRowsPerBatch", 10_000, 1) or 10_000,
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
    )
