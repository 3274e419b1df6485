"""Restore: recreate topics from the manifests of a remote tier (a new machine, a lost disk).

A restored topic gets ``remote.storage.enable=true`` and as many partitions as the bucket has manifests
for (highest partition + 1). Its partitions open empty; when the broker attaches the remote tier to
them it starts each local log at the remote tier's next offset, so the remote segments are readable and
new produces continue after the last remote offset (see ``RemoteLog.open``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Collection

from tierlog.service.cluster.model import TopicAssignment
from tierlog.service.topics import data_dir as meta
from tierlog.tiering.remote.inventory import inventory
from tierlog.tiering.remote.manifest_store import ManifestStore

__all__ = ["restore_missing_topics", "topics_in_store"]

log = logging.getLogger("tierlog.restore")


async def topics_in_store(manifests: ManifestStore) -> dict[str, int]:
    """Topics that have manifests in the store, with their partition counts. Read-only.

    Raises:
        UnavailableError: the store failed.
    """
    return (await inventory(manifests.store)).topics()


async def restore_missing_topics(
    manifests: ManifestStore,
    existing: Collection[str],
    create: Callable[[TopicAssignment], Awaitable[bool]],
    replicas: Callable[[int], list[tuple[int, ...]]],
    *,
    only: set[str] | None = None,
) -> list[str]:
    """Create every topic found in the store but not in ``existing`` (restricted to ``only`` when given):
    ``create(assignment)`` commits it (False: a topic of that name appeared meanwhile), its partitions
    placed by ``replicas(count)``. Internal (``__``) topics and illegal names are skipped. Returns the
    restored names, sorted. Idempotent (a second call restores nothing).

    Raises:
        UnavailableError: the remote store or the metadata store failed (the topics restored before the
            failure stay).
        InvalidConfigError: a restored name collides with an existing topic.
    """
    found = await topics_in_store(manifests)
    restored: list[str] = []
    for name, partitions in sorted(found.items()):
        if name in existing or name.startswith("__") or (only is not None and name not in only):
            continue
        try:
            meta.validate_topic_name(name)
        except Exception:
            log.warning("not restoring %r: not a legal topic name", name)
            continue
        assignment = TopicAssignment(
            name, uuid.uuid4().hex, tuple(replicas(partitions)), {"remote.storage.enable": "true"}
        )
        if await create(assignment):
            restored.append(name)
    return restored
