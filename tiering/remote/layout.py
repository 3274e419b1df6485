"""Where the remote tier puts things in the bucket. Pure: no I/O, nothing async (Spark executors import it).

::

    <prefix>/<topic>/<partition>/<base offset, 20 digits>-<segment uuid>.log        segment data
    <prefix>/<topic>/<partition>/<base offset, 20 digits>-<segment uuid>.indexes    offset and time index
    <prefix>/<topic>/<partition>/<base offset, 20 digits>-<segment uuid>.index      offset index (older)
    <prefix>/<topic>/<partition>/<base offset, 20 digits>-<segment uuid>.timeindex  time index (older)
    <prefix>/<topic>/<partition>/manifest/<version, 20 digits>.json                 manifest versions

Example: ``archive/orders/3/00000000000000012345-5f0c...e1.log``. The 20-digit zero-padded base offset
makes a plain listing sort segments by offset, as Kafka's file names do; the UUID (lowercase hex with
dashes) makes every upload attempt a fresh key, so a retried or concurrent upload never overwrites
bytes a reader may be using. ``<prefix>`` is the store's prefix (``s3://bucket/<prefix>``) and is not
part of the keys built here.

A segment's indexes are either one packed ``.indexes`` object (see :mod:`.packed_indexes`; what uploads
write) or the ``.index`` and ``.timeindex`` objects that uploads before it wrote; its manifest entry says
which (``RemoteSegment.indexes``).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal

from tierlog.tiering.log.topic_names import topic_name_problem
from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "SEGMENT_SUFFIXES",
    "PACKED_OBJECTS",
    "SEPARATE_OBJECTS",
    "SegmentKind",
    "SegmentObjectKey",
    "partition_prefix",
    "segment_key",
    "segment_keys",
    "parse_segment_key",
    "manifest_prefix",
    "manifest_key",
    "parse_manifest_key",
    "validate_topic",
]

SegmentKind = Literal["log", "index", "timeindex", "indexes"]
SEGMENT_SUFFIXES: tuple[SegmentKind, ...] = ("log", "index", "timeindex", "indexes")
# The objects of one complete upload, in either index layout.
PACKED_OBJECTS: frozenset[SegmentKind] = frozenset({"log", "indexes"})
SEPARATE_OBJECTS: frozenset[SegmentKind] = frozenset({"log", "index", "timeindex"})
OFFSET_DIGITS = 20
MAX_OFFSET = 2**63 - 1

# Kafka's legal topic names: ASCII letters, digits, '.', '_' and '-', at most 249 characters.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SEGMENT_NAME = re.compile(
    r"(?P<base>\d{20})-(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"\.(?P<kind>log|index|timeindex|indexes)"
)
_MANIFEST_NAME = re.compile(r"(?P<version>\d{20})\.json")


def validate_topic(topic: str) -> str:
    """Return ``topic`` if Kafka would accept it (and it is not ``.`` or ``..``), else raise
    :class:`InvalidRequestError`.
    """
    problem = topic_name_problem(topic)
    if problem is not None:
        raise InvalidRequestError(f"invalid topic name {topic!r}: {problem}")
    return topic


def _check_partition(partition: int) -> int:
    if not isinstance(partition, int) or partition < 0:
        raise InvalidRequestError(f"invalid partition {partition!r}")
    return partition


def _check_offset(offset: int) -> int:
    if not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise InvalidRequestError(f"invalid offset {offset!r}")
    return offset


def partition_prefix(topic: str, partition: int) -> str:
    """``<topic>/<partition>/``: the listing prefix of one partition's objects."""
    return f"{validate_topic(topic)}/{_check_partition(partition)}/"


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """The parts of a segment object's key."""

    topic: str
    partition: int
    base_offset: int
    segment_uuid: uuid.UUID
    kind: SegmentKind


def segment_key(
    topic: str, partition: int, base_offset: int, segment_uuid: uuid.UUID, kind: SegmentKind = "log"
) -> str:
    """The key of one segment object. Pure; raises :class:`InvalidRequestError` on invalid parts."""
    if kind not in SEGMENT_SUFFIXES:
        raise InvalidRequestError(f"invalid segment object kind {kind!r}")
    base = _check_offset(base_offset)
    return f"{partition_prefix(topic, partition)}{base:0{OFFSET_DIGITS}d}-{segment_uuid}.{kind}"


def segment_keys(
    topic: str, partition: int, base_offset: int, segment_uuid: uuid.UUID
) -> dict[SegmentKind, str]:
    """The keys of every object a segment may have: ``.log``, ``.indexes`` and the older ``.index`` and
    ``.timeindex`` (deleting all four is right in either layout)."""
    return {kind: segment_key(topic, partition, base_offset, segment_uuid, kind) for kind in SEGMENT_SUFFIXES}


def parse_segment_key(key: str) -> SegmentObjectKey | None:
    """Parse a key relative to the store prefix; ``None`` if it is not a segment object key. Pure."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not _TOPIC.fullmatch(parts[0]):
        return None
    match = _SEGMENT_NAME.fullmatch(parts[2])
    if match is None or int(match["base"]) > MAX_OFFSET:
        return None
    kind: SegmentKind = match["kind"]  # type: ignore[assignment]
    return SegmentObjectKey(parts[0], int(parts[1]), int(match["base"]), uuid.UUID(match["uuid"]), kind)


def manifest_prefix(topic: str, partition: int) -> str:
    """``<topic>/<partition>/manifest/``: the listing prefix of a partition's manifest versions."""
    return f"{partition_prefix(topic, partition)}manifest/"


def manifest_key(topic: str, partition: int, version: int) -> str:
    """The key of manifest version ``version`` (>= 1) of a partition."""
    if not isinstance(version, int) or not 1 <= version <= MAX_OFFSET:
        raise InvalidRequestError(f"invalid manifest version {version!r}")
    return f"{manifest_prefix(topic, partition)}{version:0{OFFSET_DIGITS}d}.json"


def parse_manifest_key(key: str) -> tuple[str, int, int] | None:
    """``(topic, partition, version)`` of a manifest key, or ``None`` if ``key`` is not one. Pure."""
    parts = key.split("/")
    if len(parts) != 4 or parts[2] != "manifest" or not parts[1].isdigit() or not _TOPIC.fullmatch(parts[0]):
        return None
    match = _MANIFEST_NAME.fullmatch(parts[3])
    if match is None or int(match["version"]) < 1:
        return None
    return parts[0], int(parts[1]), int(match["version"])
