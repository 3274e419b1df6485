"""Recovering a partition's remote state when its newest manifest versions fail their check.

A manifest version that fails its check (bad CRC, invalid UTF-8, an object describing another version) is
never used, and never silently treated as "no remote data": that would move the log start offset up to the
local one and make consumers from ``earliest`` skip everything below it. Instead :func:`recover_manifest`
starts from the newest version that passes, then re-derives what that version lacks from the segment
objects themselves. The upload protocol (:mod:`.uploader`) writes a segment's ``.log`` and ``.indexes``
objects (or, before the packed index layout, ``.log``, ``.index`` and ``.timeindex``) *before* a manifest
lists it ``copy_finished``, so a segment whose objects all exist and whose ``.log`` object is an unbroken
run of CRC-valid batches starting at its base offset holds exactly what a listed one would (an unsound
``.indexes`` object only costs scans: indexes are derived data). Segments are re-derived in offset order,
each one starting where the previous ends; a gap or an object that fails its check stops the chain (what
lies beyond stays local until uploaded again, and local retention keeps it: it is not covered).

What recovery cannot bring back it does not invent: a segment the good version lists but whose objects
are gone (deleted by a retention the damaged version recorded) is still listed, and reads there answer
corrupt data (500 / 50002) instead of skipping it; the log start offset never moves up because of damage.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from tierlog.tiering.codec.header import HEADER_SIZE, decode_header, verify_batch
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.layout import (
    PACKED_OBJECTS,
    SEPARATE_OBJECTS,
    SegmentKind,
    parse_segment_key,
    partition_prefix,
    segment_key,
)
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.wire.errors import CorruptRecordError, NotFoundError

__all__ = ["Recovery", "recover_manifest", "derive_segment"]

_CHUNK = 8 * 1024 * 1024  # bytes of a .log object read at a time while re-deriving it


@dataclass(frozen=True, slots=True)
class Recovery:
    """The outcome of :func:`recover_manifest`: ``manifest`` is the repaired state, numbered as the
    newest stored version (commit it on top with :meth:`ManifestStore.commit`)."""

    manifest: mf.Manifest
    fallback_version: int  # the newest version that passed its check (0: none did)
    damaged: tuple[tuple[int, str], ...]  # (version, why), newest first
    derived: tuple[mf.RemoteSegment, ...]  # entries re-derived from the segment objects

    def describe(self) -> str:
        """One line for logs, ``last_error`` and describe output."""
        versions = ", ".join(f"{v} ({why})" for v, why in self.damaged)
        end = max((s.last_offset + 1 for s in self.derived), default=None)
        derived = f"re-derived {len(self.derived)} segments from the segment objects" + (
            f" (up to offset {end})" if end is not None else ""
        )
        return (
            f"manifest versions failed their check: {versions}; fell back to version "
            f"{self.fallback_version} and {derived}"
        )


async def recover_manifest(
    store: ObjectStore, manifests: ManifestStore, topic: str, partition: int, *, now_ms: int
) -> Recovery | None:
    """Recover the remote state of a partition whose newest manifest version fails its check; ``None``
    when it passes (nothing to do). Reads only: the caller commits ``recovery.manifest``.

    Raises:
        UnavailableError: the store failed (nothing was changed; call again).
    """
    manifest, newest, damaged = await manifests.load_verified(topic, partition)
    if not damaged:
        return None
    fallback = manifest.version
    manifest = replace(manifest, version=newest)
    objects: dict[tuple[int, uuid.UUID], set[SegmentKind]] = {}
    async for info in store.list(partition_prefix(topic, partition)):
        parsed = parse_segment_key(info.key)
        if parsed is not None and (parsed.topic, parsed.partition) == (topic, partition):
            objects.setdefault((parsed.base_offset, parsed.segment_uuid), set()).add(parsed.kind)
    known = {s.segment_uuid: s for s in manifest.segments}
    finished = [s.last_offset for s in manifest.segments if s.state is mf.SegmentState.COPY_FINISHED]
    next_offset = max(finished) + 1 if finished else None
    derived: list[mf.RemoteSegment] = []
    # in offset order; of two uploads of one range the one the manifest lists (copy_started) first
    for base, segment_uuid in sorted(objects, key=lambda k: (k[0], k[1] not in known, k[1])):
        listed = known.get(segment_uuid)
        kinds = objects[(base, segment_uuid)]
        packed = kinds >= PACKED_OBJECTS
        if not packed and not kinds >= SEPARATE_OBJECTS:
            continue  # an upload that never finished writing its objects
        if listed is not None and listed.state is not mf.SegmentState.COPY_STARTED:
            continue
        if next_offset is not None and base != next_offset:
            if base > next_offset:
                break  # a gap: nothing after it can be chained
            continue  # already covered (an abandoned duplicate upload)
        entry = await derive_segment(
            store, topic, partition, base, segment_uuid, now_ms=now_ms, packed=packed
        )
        if entry is None or (listed is not None and listed.last_offset != entry.last_offset):
            continue
        if listed is None:
            manifest = mf.add_segment(manifest, entry)
        elif listed.indexes != entry.indexes:  # the objects decide (an older writer drops the field)
            manifest = _with_indexes(manifest, segment_uuid, entry.indexes)
        manifest = mf.transition(manifest, segment_uuid, mf.SegmentState.COPY_FINISHED)
        derived.append(mf.find_segment(manifest, segment_uuid) or entry)
        next_offset = entry.last_offset + 1
    return Recovery(manifest, fallback, tuple(damaged), tuple(derived))


async def derive_segment(
    store: ObjectStore,
    topic: str,
    partition: int,
    base: int,
    segment_uuid: uuid.UUID,
    *,
    now_ms: int,
    packed: bool = True,
) -> mf.RemoteSegment | None:
    """The ``copy_started`` manifest entry for the segment whose ``.log`` object is at ``base`` /
    ``segment_uuid``, read from the object (every batch CRC-checked, offsets contiguous from ``base``),
    or ``None`` if the object is missing, empty or fails a check. Reads the object in chunks of
    ``_CHUNK`` bytes (plus at most one batch). ``packed``: the segment's indexes are a ``.indexes`` object,
    whose header gives the entry's index sizes (``(0, 0)``, no index, if the object is unsound: reads of
    the segment then scan it); else the older separate objects. Idempotent.

    Raises:
        UnavailableError: the store failed.
    """
    indexes = None
    if packed:  # indexes are derived data: an unsound object costs scans, never the segment
        indexes = await _packed_sizes(store, topic, partition, base, segment_uuid) or (0, 0)
    key = segment_key(topic, partition, base, segment_uuid, "log")
    try:
        size = (await store.head(key)).size
    except NotFoundError:
        return None
    expected, max_timestamp, base_timestamp = base, -1, None
    buf, read = b"", 0
    try:
        while read < size or buf:
            if len(buf) < HEADER_SIZE or decode_header(buf).size > len(buf):
                if read >= size:
                    raise CorruptRecordError(f"{key} ends inside a batch")
                chunk = await store.get_range(key, read, min(size, read + _CHUNK))
                if not chunk:
                    raise CorruptRecordError(f"{key} is shorter than its listed size")
                buf, read = buf + chunk, read + len(chunk)
                continue
            header = verify_batch(buf)
            if header.base_offset != expected:
                raise CorruptRecordError(f"{key}: batch at offset {header.base_offset}, expected {expected}")
            expected = header.last_offset + 1
            max_timestamp = max(max_timestamp, header.max_timestamp)
            base_timestamp = header.base_timestamp if base_timestamp is None else base_timestamp
            buf = buf[header.size :]
    except (CorruptRecordError, NotFoundError):
        return None
    if expected == base:
        return None
    return mf.RemoteSegment(
        base_offset=base,
        last_offset=expected - 1,
        max_timestamp=max_timestamp,
        size_bytes=size,
        segment_uuid=segment_uuid,
        state=mf.SegmentState.COPY_STARTED,
        created_ms=max(0, now_ms),
        base_timestamp=base_timestamp,
        indexes=indexes,
    )


async def _packed_sizes(
    store: ObjectStore, topic: str, partition: int, base: int, segment_uuid: uuid.UUID
) -> tuple[int, int] | None:
    """The index sizes in a ``.indexes`` object's header, if the object is as long as it says."""
    key = segment_key(topic, partition, base, segment_uuid, "indexes")
    try:
        size = (await store.head(key)).size
        sizes = packed_indexes.unpack_header(await store.get_range(key, 0, packed_indexes.HEADER_SIZE))
    except (CorruptRecordError, NotFoundError):
        return None
    return sizes if size == packed_indexes.HEADER_SIZE + sum(sizes) else None


def _with_indexes(
    manifest: mf.Manifest, segment_uuid: uuid.UUID, indexes: tuple[int, int] | None
) -> mf.Manifest:
    segments = tuple(
        replace(s, indexes=indexes) if s.segment_uuid == segment_uuid else s for s in manifest.segments
    )
    return replace(manifest, segments=segments)
