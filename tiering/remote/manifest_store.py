"""Reading and conditionally writing versioned partition manifests in an object store.

Each change writes a *new* object ``<topic>/<partition>/manifest/<version, 20 digits>.json`` with
``put_if_absent``; readers take the highest version. Two writers that both read version ``n`` race to
create ``n + 1``: exactly one wins, the other gets :class:`ConflictError` and must reload and re-apply.
Old versions are garbage-collected, keeping the newest ``keep_versions``. Design and the argument for
why a stale writer can never win are in ``docs/design/0002-object-store.md``.

Leader-epoch fencing (KIP-405 under replication, ``docs/design/0010-replication.md``): a writer that
passes ``leader_epoch`` stamps it into the version it writes, and is refused with
:class:`FencedLeaderEpochError` when the version it builds on carries a higher epoch. A deposed leader that
loses the race for a version reloads, sees the newer epoch and stops. Writers without an epoch (the
embedded broker, operator tools) are not fenced and keep the base's epoch, so they never unfence a
partition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, manifest_prefix, parse_manifest_key
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.wire.errors import (
    ConflictError,
    CorruptRecordError,
    FencedLeaderEpochError,
    NotFoundError,
    UnavailableError,
)

__all__ = ["ManifestStore"]

_RELOAD_ATTEMPTS = 5


class ManifestStore:
    """Load and commit manifests of any partition in ``store`` (use an uncached store: manifests change).

    Safe to call concurrently, from this process or from several brokers: correctness rests only on
    ``put_if_absent`` and on strongly consistent listings (S3, MinIO, LocalStack, moto and the local
    store all list what was written before).
    """

    def __init__(self, store: ObjectStore, *, keep_versions: int = 8) -> None:
        self.store = store
        self.keep_versions = max(1, keep_versions)

    async def versions(self, topic: str, partition: int, *, after: int = 0) -> list[int]:
        """Stored versions of a partition's manifest greater than ``after``, ascending."""
        prefix = manifest_prefix(topic, partition)
        start_after = manifest_key(topic, partition, after) if after >= 1 else None
        found = []
        async for info in self.store.list(prefix, start_after=start_after):
            parsed = parse_manifest_key(info.key)
            if parsed is not None and parsed[2] > after:
                found.append(parsed[2])
        return sorted(found)

    async def load(self, topic: str, partition: int) -> mf.Manifest:
        """The newest manifest, or :func:`manifest.empty` (version 0) if none was ever written.

        Raises :class:`CorruptRecordError` if the newest version does not decode (never falls back to an
        older one silently), :class:`UnavailableError` if versions keep vanishing under it. Idempotent.
        """
        for _ in range(_RELOAD_ATTEMPTS):
            versions = await self.versions(topic, partition)
            if not versions:
                return mf.empty(topic, partition)
            try:
                data = await self.store.get(manifest_key(topic, partition, versions[-1]))
            except NotFoundError:
                continue  # collected between the listing and the read: list again
            manifest = mf.decode(data)
            if (manifest.topic, manifest.partition, manifest.version) != (topic, partition, versions[-1]):
                raise CorruptRecordError(f"manifest object for version {versions[-1]} describes another one")
            return manifest
        raise UnavailableError(f"manifest of {topic}-{partition} kept changing while being read")

    async def load_verified(
        self, topic: str, partition: int
    ) -> tuple[mf.Manifest, int, list[tuple[int, str]]]:
        """The newest version that passes its check, the newest stored version number, and the newer
        versions that failed their check as ``(version, why)``, newest first.

        With nothing damaged this is :meth:`load` (``(manifest, manifest.version, [])``). With every
        version damaged the manifest is :func:`manifest.empty` (version 0). Never raises
        :class:`CorruptRecordError`; raises :class:`UnavailableError` as :meth:`load`. Idempotent.
        """
        for _ in range(_RELOAD_ATTEMPTS):
            versions = await self.versions(topic, partition)
            if not versions:
                return mf.empty(topic, partition), 0, []
            damaged: list[tuple[int, str]] = []
            for version in reversed(versions):
                try:
                    data = await self.store.get(manifest_key(topic, partition, version))
                except NotFoundError:
                    if version == versions[-1]:
                        break  # the newest vanished: list again
                    continue  # an old version collected meanwhile
                try:
                    manifest = mf.decode(data)
                except CorruptRecordError as err:
                    damaged.append((version, err.message))
                    continue
                if (manifest.topic, manifest.partition, manifest.version) != (topic, partition, version):
                    damaged.append((version, f"the object describes {manifest.topic}-{manifest.partition} "
                                             f"version {manifest.version}"))  # fmt: skip
                    continue
                return manifest, versions[-1], damaged
            else:
                return mf.empty(topic, partition), versions[-1], damaged
        raise UnavailableError(f"manifest of {topic}-{partition} kept changing while being read")

    async def commit(
        self, base: mf.Manifest, updated: mf.Manifest, *, leader_epoch: int | None = None
    ) -> mf.Manifest:
        """Store ``updated`` as version ``base.version + 1``; returns it with that version, carrying
        ``leader_epoch`` (None: the base's epoch, unfenced).

        Raises :class:`FencedLeaderEpochError` if ``base`` carries a higher leader epoch than
        ``leader_epoch`` (nothing is written), :class:`ConflictError` if another writer committed a version
        after ``base`` first, or if a newer version already exists right after ours (reload and re-apply; a
        change that already landed is then a no-op). Idempotent in effect: a retried commit whose first
        attempt stored these exact bytes succeeds. Safe to call concurrently: of several commits on the
        same base exactly one succeeds.
        """
        topic, partition = base.topic, base.partition
        _check_fence(base, leader_epoch)
        epoch = base.leader_epoch if leader_epoch is None else leader_epoch
        new = replace(updated, topic=topic, partition=partition, version=base.version + 1, leader_epoch=epoch)
        key = manifest_key(topic, partition, new.version)
        data = mf.encode(new)
        if not await self.store.put_if_absent(key, data):
            try:
                existing = await self.store.get(key)
            except NotFoundError:
                existing = b""
            if existing != data:
                raise ConflictError(
                    f"manifest {topic}-{partition} version {new.version} was written by another writer"
                )
        # A stale writer's version number can only be free again if it was collected, which happens only
        # after a higher version exists: so a higher version means we may have lost. (It may also mean a
        # fast writer already built on ours: the caller re-applies its idempotent change and sees that.)
        stored = await self.versions(topic, partition)
        if stored and stored[-1] > new.version:
            raise ConflictError(f"manifest {topic}-{partition} moved past version {new.version} meanwhile")
        await self._collect(topic, partition, [v for v in stored if v <= new.version - self.keep_versions])
        return new

    async def update(
        self,
        topic: str,
        partition: int,
        change: Callable[[mf.Manifest], mf.Manifest],
        *,
        attempts: int = 8,
        leader_epoch: int | None = None,
    ) -> mf.Manifest:
        """Load, apply the pure ``change``, commit (see :meth:`commit` for ``leader_epoch``); on
        :class:`ConflictError` from the commit, start over.

        ``change`` must be pure and idempotent (the :mod:`manifest` operations are). If ``change`` returns
        the manifest unchanged nothing is written. Raises :class:`FencedLeaderEpochError` when the newest
        version carries a higher leader epoch than ``leader_epoch`` (checked on every load, a no-op change
        included), :class:`ConflictError` after ``attempts`` lost races, and whatever ``change`` raises.
        """
        for _ in range(attempts):
            base = await self.load(topic, partition)
            _check_fence(base, leader_epoch)
            updated = change(base)
            if updated == base:
                return base
            try:
                return await self.commit(base, updated, leader_epoch=leader_epoch)
            except ConflictError:
                continue
        raise ConflictError(f"manifest {topic}-{partition}: lost {attempts} commit races in a row")

    async def _collect(self, topic: str, partition: int, stale: list[int]) -> None:
        """Delete the given old versions. Best effort: a failure leaves them for the next commit."""
        if not stale:
            return
        try:
            await self.store.delete_many([manifest_key(topic, partition, v) for v in stale])
        except (UnavailableError, NotFoundError):
            return


def _check_fence(base: mf.Manifest, leader_epoch: int | None) -> None:
    """Raise :class:`FencedLeaderEpochError` when ``base`` was written by a newer leader epoch. Pure."""
    if leader_epoch is not None and base.leader_epoch > leader_epoch:
        raise FencedLeaderEpochError(
            f"manifest {base.topic}-{base.partition} version {base.version} was written by leader epoch "
            f"{base.leader_epoch}, newer than {leader_epoch}"
        )
