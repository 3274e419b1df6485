"""What a remote tier holds, and whether it holds anything the manifests do not account for.

:func:`inventory` lists every object once and groups it by partition; :func:`check` compares that with
each partition's newest manifest:

* a **leak** is an object no manifest references: a segment object whose uuid is in no manifest entry
  (an upload abandoned and never cleaned, a deletion interrupted after its entry was pruned, a topic
  deleted while the store was down), a segment object of a partition with no manifest at all, or a
  key that is not part of the layout;
* a **missing** object is one a ``copy_finished`` entry needs (``.log`` and ``.indexes``, or ``.log``,
  ``.index`` and ``.timeindex`` in the older layout) that is not in the bucket: data loss, which the
  reader reports as an error.

Entries in ``copy_started``/``delete_started`` reference their objects (the owning broker cleans them on
its next pass), so an upload in flight is never reported as a leak.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, parse_manifest_key, parse_segment_key, segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.wire.errors import NotFoundError

__all__ = ["Inventory", "CheckReport", "inventory", "check", "remove_leaks"]


@dataclass
class Inventory:
    """Every object of a store, grouped: segment objects and manifest versions by partition, and keys
    that belong to no partition's layout."""

    segments: dict[tuple[str, int], list[ObjectInfo]] = field(default_factory=lambda: defaultdict(list))
    manifests: dict[tuple[str, int], list[int]] = field(default_factory=lambda: defaultdict(list))
    unknown: list[ObjectInfo] = field(default_factory=list)

    def partitions(self) -> list[tuple[str, int]]:
        """Every partition with a manifest or a segment object, sorted."""
        return sorted(set(self.segments) | set(self.manifests))

    def topics(self) -> dict[str, int]:
        """Topics with at least one manifest, and their partition count (highest partition + 1)."""
        found: dict[str, int] = {}
        for topic, partition in self.manifests:
            found[topic] = max(found.get(topic, 0), partition + 1)
        return found


@dataclass
class CheckReport:
    """The outcome of :func:`check`: ``clean`` when nothing leaks and nothing is missing."""

    partitions: int = 0
    objects: int = 0
    referenced: int = 0
    leaks: list[ObjectInfo] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.leaks or self.missing or self.errors)


async def inventory(store: ObjectStore, prefix: str = "") -> Inventory:
    """List every object under ``prefix`` once and group it. Read-only; idempotent.

    Raises:
        UnavailableError: the store failed.
    """
    found = Inventory()
    async for info in store.list(prefix):
        segment = parse_segment_key(info.key)
        if segment is not None:
            found.segments[(segment.topic, segment.partition)].append(info)
            continue
        version = parse_manifest_key(info.key)
        if version is not None:
            found.manifests[(version[0], version[1])].append(version[2])
            continue
        found.unknown.append(info)
    return found


async def check(
    store: ObjectStore, manifests: ManifestStore, *, prefix: str = "", known: dict[str, int] | None = None
) -> CheckReport:
    """Compare the objects in ``store`` with the manifests (see the module docstring). Read-only.

    With ``known`` (topic -> partition count, the broker's topics), every object of a partition outside it
    (manifests included) is a leak: the remains of a deleted topic. A partition whose newest manifest
    does not decode is reported in ``errors`` and its objects are not judged. Raises:
        UnavailableError: the store failed.
    """
    found = await inventory(store, prefix)
    report = CheckReport(partitions=len(found.partitions()), leaks=list(found.unknown))
    report.objects = sum(len(v) for v in found.segments.values()) + sum(
        len(v) for v in found.manifests.values()
    )
    report.objects += len(found.unknown)
    for topic, partition in found.partitions():
        objects = found.segments.get((topic, partition), [])
        if known is not None and partition >= known.get(topic, 0):
            versions = found.manifests.get((topic, partition), [])
            report.leaks.extend(objects)
            report.leaks.extend(await _infos(store, [manifest_key(topic, partition, v) for v in versions]))
            continue
        if (topic, partition) not in found.manifests:
            report.leaks.extend(objects)
            continue
        try:
            manifest = await manifests.load(topic, partition)
        except Exception as err:  # CorruptRecordError and friends: report, do not judge
            report.errors.append(f"{topic}/{partition}: manifest unreadable: {err}")
            continue
        present = {info.key for info in objects}
        wanted = _referenced_keys(manifest, present)
        report.referenced += len(present & set(wanted))
        report.leaks.extend(info for info in objects if info.key not in wanted)
        report.missing.extend(key for key, needed in wanted.items() if needed and key not in present)
    report.leaks = [info for info in report.leaks if await _still_there(store, info.key)]
    report.leaks.sort(key=lambda info: info.key)
    report.missing.sort()
    return report


async def _infos(store: ObjectStore, keys: list[str]) -> list[ObjectInfo]:
    out = []
    for key in keys:
        try:
            out.append(await store.head(key))
        except NotFoundError:
            continue
    return out


async def _still_there(store: ObjectStore, key: str) -> bool:
    """A deletion that finished between the listing and the manifest load is not a leak."""
    try:
        await store.head(key)
    except NotFoundError:
        return False
    return True


def _referenced_keys(manifest: mf.Manifest, present: set[str]) -> dict[str, bool]:
    """Keys the manifest references -> whether they must exist.

    Every object kind of a listed segment is referenced (never a leak). A ``copy_finished`` entry needs its
    ``.log`` and the index objects of its layout: the ``.indexes`` object, or ``.index`` and ``.timeindex``
    unless a ``.indexes`` object is there (a release before the packed layout that rewrote the manifest
    dropped the entry's ``indexes`` field; the reader then scans that segment, it lost nothing).
    """
    keys: dict[str, bool] = {}
    for segment in manifest.segments:
        finished = segment.state is mf.SegmentState.COPY_FINISHED
        kinds = segment_keys(manifest.topic, manifest.partition, segment.base_offset, segment.segment_uuid)
        packed = segment.indexes is not None or kinds["indexes"] in present
        needs = {"log", "indexes"} if packed else {"log", "index", "timeindex"}
        for kind, key in kinds.items():
            keys[key] = finished and (kind in needs)
    return keys


async def remove_leaks(store: ObjectStore, report: CheckReport) -> int:
    """Delete the leaked objects of ``report``. Idempotent. Returns how many keys were deleted.

    Only safe when no broker is uploading to these partitions right now with entries not yet committed
    (a crashed or stopped broker): run it from ``tierlog tiering check --delete`` with brokers stopped
    or on a quiet bucket. Raises UnavailableError if the store failed.
    """
    keys = [info.key for info in report.leaks]
    if keys:
        await store.delete_many(keys)
    return len(keys)
