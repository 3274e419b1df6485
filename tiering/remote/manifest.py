"""The per-partition remote manifest: which segments are in the bucket, in which state, and the
partition's log start offset. Pure codec and pure operations: no I/O, nothing async (Spark reads it).

Encoding (format 1): one JSON object in canonical form, UTF-8 (in fact ASCII), no whitespace, keys sorted,
integers in decimal, one trailing newline::

    {"crc32c":3808858755,"format":1,"log_start_offset":0,"partition":3,
     "segments":[{"base_offset":0,"base_timestamp":1700000000000,"created_ms":1700000000500,
                  "indexes":[96,144],"last_offset":99,"leader_epochs":[[0,0],[2,57]],
                  "max_timestamp":1700000000999,
                  "segment_uuid":"5f0c2a8e-...","size_bytes":16384,"state":"copy_finished"}],
     "leader_epoch":2,"topic":"orders","version":7}

    crc32c            uint32  CRC-32C of the canonical encoding of the object *without* this field
    format            int     1; a reader rejects a format it does not know
    topic, partition          the partition this manifest describes
    version           int     >= 1; equals the version in the object's key (see layout.manifest_key)
    log_start_offset  int     records below it are gone from the whole log (retention / deleteRecords)
    leader_epoch      int     leader epoch of the writer of this version; -1: unfenced (an embedded
                              broker). A writer with a lower epoch is fenced (see manifest_store)
    segments          list    sorted by (base_offset, created_ms, segment_uuid)
      base_offset, last_offset   int     first and last offset in the segment (inclusive)
      base_timestamp             int|null  first batch's base timestamp, when known
      max_timestamp              int     largest record timestamp in the segment (-1 if none)
      size_bytes                 int     bytes of the .log object
      segment_uuid               str     canonical lowercase UUID, part of the object keys
      state                      str     copy_started | copy_finished | delete_started | deleted
      created_ms                 int     wall-clock ms when the upload began
      leader_epochs              list    ``[epoch, start offset]`` pairs: the leader epochs of the segment's
                                         batches, from the one in force at base_offset (its start given as
                                         base_offset) on, both strictly ascending; [] when unknown
      indexes                    list|null  ``[offset index bytes, time index bytes]``: the segment's indexes
                                         are one packed ``.indexes`` object holding that many bytes of
                                         each (see packed_indexes); null: separate ``.index`` and
                                         ``.timeindex`` objects (uploads before the packed layout)

``leader_epoch``, ``leader_epochs`` and ``indexes`` are additive fields of format 1: always written (so the
canonical form of a manifest does not depend on who wrote it), read as -1, [] and null when absent (older
writers). A reader that does not know ``indexes`` finds no ``.index`` object for a packed segment and
scans it from its start: slower, still correct.

Segment states follow Kafka's KIP-405: ``copy_started`` is written *before* the objects go up (so an
orphan can be found and deleted after a crash), ``copy_finished`` after all its objects exist (only
these segments are read), ``delete_started`` before objects are deleted, ``deleted`` after. Unknown keys
are ignored by readers (additive changes keep format 1); any other change bumps ``format``.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import crc32c as _crc32c

from tierlog.tiering.remote.layout import MAX_OFFSET, validate_topic
from tierlog.wire.errors import ConflictError, CorruptRecordError, InvalidRequestError, NotFoundError

__all__ = [
    "FORMAT_VERSION",
    "SegmentState",
    "RemoteSegment",
    "Manifest",
    "encode",
    "decode",
    "empty",
    "add_segment",
    "transition",
    "set_log_start_offset",
    "prune_deleted",
    "readable_segments",
    "ManifestSummary",
    "segment_for_offset",
    "segment_for_timestamp",
    "find_segment",
]

FORMAT_VERSION = 1
NO_TIMESTAMP = -1
_MAX_INDEX_BYTES = 2**32 - 1  # what the packed object's header can hold


class SegmentState(enum.StrEnum):
    """KIP-405 lifecycle of a remote segment."""

    COPY_STARTED = "copy_started"
    COPY_FINISHED = "copy_finished"
    DELETE_STARTED = "delete_started"
    DELETED = "deleted"


_ALLOWED: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.COPY_STARTED: frozenset({SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED}),
    SegmentState.COPY_FINISHED: frozenset({SegmentState.DELETE_STARTED}),
    SegmentState.DELETE_STARTED: frozenset({SegmentState.DELETED}),
    SegmentState.DELETED: frozenset(),
}
# Readable segments: their offset ranges must not overlap (upload attempts and deletions may).
_COMMITTED = frozenset({SegmentState.COPY_FINISHED})


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One remote segment as the manifest records it (see the module docstring for the fields)."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int
    segment_uuid: uuid.UUID
    state: SegmentState
    created_ms: int
    base_timestamp: int | None = None
    leader_epochs: tuple[tuple[int, int], ...] = ()
    indexes: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.base_offset <= self.last_offset <= MAX_OFFSET:
            raise InvalidRequestError(f"segment offsets {self.base_offset}..{self.last_offset} are invalid")
        if self.size_bytes < 0 or self.created_ms < 0 or self.max_timestamp < NO_TIMESTAMP:
            raise InvalidRequestError("segment size, creation time and max timestamp must not be negative")
        for epoch, start in self.leader_epochs:
            if epoch < 0 or not self.base_offset <= start <= self.last_offset:
                raise InvalidRequestError(
                    f"segment leader epoch ({epoch}, {start}) is outside "
                    f"{self.base_offset}..{self.last_offset}"
                )
        for (epoch, start), (next_epoch, next_start) in itertools.pairwise(self.leader_epochs):
            if next_epoch <= epoch or next_start <= start:
                raise InvalidRequestError("segment leader epochs are not strictly ascending")
        if self.indexes is not None and (
            len(self.indexes) != 2 or not all(0 <= n <= _MAX_INDEX_BYTES for n in self.indexes)
        ):
            raise InvalidRequestError(f"segment index sizes {self.indexes!r} are invalid")

    def contains(self, offset: int) -> bool:
        """Whether ``offset`` falls in ``[base_offset, last_offset]``."""
        return self.base_offset <= offset <= self.last_offset


def _sort_key(segment: RemoteSegment) -> tuple[int, int, str]:
    return segment.base_offset, segment.created_ms, str(segment.segment_uuid)


@dataclass(frozen=True, slots=True)
class Manifest:
    """An immutable manifest. ``version`` 0 means "never written" (see :func:`empty`)."""

    topic: str
    partition: int
    version: int
    log_start_offset: int
    segments: tuple[RemoteSegment, ...] = field(default=())
    leader_epoch: int = -1

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        if self.partition < 0 or self.version < 0 or not 0 <= self.log_start_offset <= MAX_OFFSET:
            raise InvalidRequestError("manifest partition, version and log start offset must not be negative")
        if self.leader_epoch < -1:
            raise InvalidRequestError(f"manifest leader epoch {self.leader_epoch} is invalid")
        if list(self.segments) != sorted(self.segments, key=_sort_key):
            raise InvalidRequestError("manifest segments are not sorted by base offset")
        uuids = [s.segment_uuid for s in self.segments]
        if len(set(uuids)) != len(uuids):
            raise InvalidRequestError("manifest lists a segment uuid twice")
        committed = [s for s in self.segments if s.state in _COMMITTED]
        for before, after in itertools.pairwise(committed):
            if after.base_offset <= before.last_offset:
                raise InvalidRequestError(
                    f"copy_finished segments {before.segment_uuid} and {after.segment_uuid} overlap"
                )

    def segment(self, segment_uuid: uuid.UUID) -> RemoteSegment:
        """The segment with this UUID; raises :class:`NotFoundError` if the manifest has none."""
        for segment in self.segments:
            if segment.segment_uuid == segment_uuid:
                return segment
        raise NotFoundError(f"segment {segment_uuid} is not in the manifest of {self.topic}-{self.partition}")


# -- codec ---------------------------------------------------------------------------------------


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def _segment_dict(s: RemoteSegment) -> dict[str, Any]:
    return {
        "base_offset": s.base_offset,
        "last_offset": s.last_offset,
        "base_timestamp": s.base_timestamp,
        "max_timestamp": s.max_timestamp,
        "size_bytes": s.size_bytes,
        "segment_uuid": str(s.segment_uuid),
        "state": s.state.value,
        "created_ms": s.created_ms,
        "leader_epochs": [[epoch, start] for epoch, start in s.leader_epochs],
        "indexes": None if s.indexes is None else list(s.indexes),
    }


def encode(manifest: Manifest) -> bytes:
    """The canonical bytes of ``manifest`` (deterministic: equal manifests give equal bytes). Pure."""
    body: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "topic": manifest.topic,
        "partition": manifest.partition,
        "version": manifest.version,
        "log_start_offset": manifest.log_start_offset,
        "segments": [_segment_dict(s) for s in manifest.segments],
        "leader_epoch": manifest.leader_epoch,
    }
    body["crc32c"] = _crc32c.crc32c(_canonical(body))
    return _canonical(body) + b"\n"


def _int(obj: dict[str, Any], name: str, *, nullable: bool = False) -> Any:
    value = obj.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptRecordError(f"manifest field {name!r} is not an integer")
    return value


def _str(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise CorruptRecordError(f"manifest field {name!r} is not a string")
    return value


def _leader_epochs(raw: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    value = raw.get("leader_epochs", [])
    if not isinstance(value, list):
        raise CorruptRecordError("manifest field 'leader_epochs' is not a list")
    pairs = []
    for pair in value:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in pair)
        ):
            raise CorruptRecordError(
                "manifest field 'leader_epochs' holds an entry that is not [epoch, offset]"
            )
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def _indexes(raw: dict[str, Any]) -> tuple[int, int] | None:
    value = raw.get("indexes")
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    ):
        raise CorruptRecordError("manifest field 'indexes' is not null or [offset bytes, time bytes]")
    return value[0], value[1]


def _decode_segment(raw: Any) -> RemoteSegment:
    if not isinstance(raw, dict):
        raise CorruptRecordError("manifest segment entry is not an object")
    try:
        segment_uuid = uuid.UUID(_str(raw, "segment_uuid"))
        state = SegmentState(_str(raw, "state"))
    except ValueError as err:
        raise CorruptRecordError(f"manifest segment entry is invalid: {err}") from err
    try:
        return RemoteSegment(
            base_offset=_int(raw, "base_offset"),
            last_offset=_int(raw, "last_offset"),
            base_timestamp=_int(raw, "base_timestamp", nullable=True),
            max_timestamp=_int(raw, "max_timestamp"),
            size_bytes=_int(raw, "size_bytes"),
            segment_uuid=segment_uuid,
            state=state,
            created_ms=_int(raw, "created_ms"),
            leader_epochs=_leader_epochs(raw),
            indexes=_indexes(raw),
        )
    except InvalidRequestError as err:
        raise CorruptRecordError(f"manifest segment entry is invalid: {err}") from err


def decode(data: bytes) -> Manifest:
    """Parse and validate manifest bytes. Pure.

    Raises :class:`CorruptRecordError` for anything malformed: not UTF-8 JSON, a checksum mismatch, a
    missing or mistyped field, an unknown format, unsorted or overlapping segments.
    """
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CorruptRecordError("manifest is not valid UTF-8 JSON") from err
    if not isinstance(obj, dict):
        raise CorruptRecordError("manifest is not a JSON object")
    fmt = _int(obj, "format")
    if fmt != FORMAT_VERSION:
        raise CorruptRecordError(
            f"manifest format {fmt} is not supported (this reader knows {FORMAT_VERSION})"
        )
    stored_crc = _int(obj, "crc32c")
    body = {k: v for k, v in obj.items() if k != "crc32c"}
    try:
        actual_crc = _crc32c.crc32c(_canonical(body))
    except ValueError as err:  # NaN/Infinity cannot be canonical
        raise CorruptRecordError("manifest holds a non-finite number") from err
    if stored_crc != actual_crc:
        raise CorruptRecordError(f"manifest checksum mismatch (stored {stored_crc}, computed {actual_crc})")
    raw_segments = obj.get("segments")
    if not isinstance(raw_segments, list):
        raise CorruptRecordError("manifest field 'segments' is not a list")
    try:
        return Manifest(
            topic=_str(obj, "topic"),
            partition=_int(obj, "partition"),
            version=_int(obj, "version"),
            log_start_offset=_int(obj, "log_start_offset"),
            segments=tuple(_decode_segment(s) for s in raw_segments),
            leader_epoch=_int(obj, "leader_epoch") if "leader_epoch" in obj else -1,
        )
    except InvalidRequestError as err:
        raise CorruptRecordError(f"manifest is inconsistent: {err}") from err


# -- pure operations -----------------------------------------------------------------------------


def empty(topic: str, partition: int) -> Manifest:
    """The manifest of a partition with nothing uploaded yet (version 0: never stored)."""
    return Manifest(topic=topic, partition=partition, version=0, log_start_offset=0)


def _with_segments(manifest: Manifest, segments: Iterable[RemoteSegment]) -> Manifest:
    try:
        return replace(manifest, segments=tuple(sorted(segments, key=_sort_key)))
    except InvalidRequestError as err:
        raise ConflictError(str(err)) from err


def add_segment(manifest: Manifest, segment: RemoteSegment) -> Manifest:
    """Record the start of an upload. ``segment.state`` must be ``copy_started``.

    Idempotent: adding an identical entry again returns ``manifest`` unchanged. Raises
    :class:`ConflictError` if another entry has the same UUID, :class:`InvalidRequestError` for a wrong state.
    """
    if segment.state is not SegmentState.COPY_STARTED:
        raise InvalidRequestError(f"a new remote segment must be copy_started, not {segment.state}")
    for existing in manifest.segments:
        if existing.segment_uuid == segment.segment_uuid:
            if existing == segment:
                return manifest
            raise ConflictError(f"segment {segment.segment_uuid} is already in the manifest")
    return _with_segments(manifest, (*manifest.segments, segment))


def transition(manifest: Manifest, segment_uuid: uuid.UUID, state: SegmentState) -> Manifest:
    """Move a segment to ``state`` along copy_started -> copy_finished -> delete_started -> deleted
    (or copy_started -> delete_started for an abandoned upload).

    Idempotent: a segment already in ``state`` is left as is. Raises :class:`NotFoundError` for an
    unknown UUID, :class:`ConflictError` for a move the lifecycle forbids or a copy_finished segment
    that would overlap another copy_finished one.
    """
    current = manifest.segment(segment_uuid)
    if current.state is state:
        return manifest
    if state not in _ALLOWED[current.state]:
        raise ConflictError(f"segment {segment_uuid} cannot go from {current.state} to {state}")
    updated = replace(current, state=state)
    return _with_segments(manifest, (updated if s is current else s for s in manifest.segments))


def set_log_start_offset(manifest: Manifest, offset: int) -> Manifest:
    """Raise the log start offset. Idempotent; never lowers it (a lower value is ignored)."""
    if offset <= manifest.log_start_offset:
        return manifest
    if offset > MAX_OFFSET:
        raise InvalidRequestError(f"log start offset {offset} is out of range")
    return replace(manifest, log_start_offset=offset)


def prune_deleted(manifest: Manifest) -> Manifest:
    """Drop ``deleted`` entries (their objects are gone). Idempotent."""
    return replace(
        manifest, segments=tuple(s for s in manifest.segments if s.state is not SegmentState.DELETED)
    )


def readable_segments(manifest: Manifest) -> tuple[RemoteSegment, ...]:
    """``copy_finished`` segments holding offsets at or above the log start offset, by base offset."""
    return tuple(
        s
        for s in manifest.segments
        if s.state is SegmentState.COPY_FINISHED and s.last_offset >= manifest.log_start_offset
    )


def segment_for_offset(manifest: Manifest, offset: int) -> RemoteSegment | None:
    """The readable segment containing ``offset``; ``None`` if none does or it is below the log start."""
    if offset < manifest.log_start_offset:
        return None
    segments = readable_segments(manifest)
    index = bisect.bisect_right([s.base_offset for s in segments], offset) - 1
    if index >= 0 and segments[index].contains(offset):
        return segments[index]
    return None


def segment_for_timestamp(manifest: Manifest, timestamp: int) -> RemoteSegment | None:
    """The first readable segment (by offset) whose ``max_timestamp`` is at or after ``timestamp``:
    where Kafka's ListOffsets-by-time would start looking. ``None`` if no segment qualifies.
    """
    for segment in readable_segments(manifest):
        if segment.max_timestamp >= timestamp:
            return segment
    return None


def find_segment(manifest: Manifest, segment_uuid: uuid.UUID) -> RemoteSegment | None:
    """The entry with ``segment_uuid`` in any state, or ``None``."""
    for segment in manifest.segments:
        if segment.segment_uuid == segment_uuid:
            return segment
    return None


@dataclass(frozen=True, slots=True)
class ManifestSummary:
    """What the hot paths ask of a manifest, computed once per manifest: the remote next offset and start
    offset (None: nothing readable), the readable bytes, and whether an upload or deletion is unfinished."""

    manifest: Manifest
    next_offset: int | None
    start_offset: int | None
    readable_bytes: int
    unfinished: bool

    @classmethod
    def of(cls, manifest: Manifest) -> ManifestSummary:
        finished = [s.last_offset for s in manifest.segments if s.state is SegmentState.COPY_FINISHED]
        readable = readable_segments(manifest)
        return cls(
            manifest,
            max(finished) + 1 if finished else None,
            max(readable[0].base_offset, manifest.log_start_offset) if readable else None,
            sum(s.size_bytes for s in readable),
            any(s.state is not SegmentState.COPY_FINISHED for s in manifest.segments),
        )
