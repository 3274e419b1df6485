"""Restore: recreate topics from the manifests of a remote tier (a new machine, a lost disk).

A restored topic gets ``remote.storage.enable=true`` and as many partitions as the bucket has manifests
for (highest partition + 1). Its partitions open empty; when the broker attaches the remote tier to
them it starts each local log at the remote tier's next offset, so the remote segments are readable and
new produces continue after the last remote offset (see ``RemoteLog.open``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

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
    state: meta.BrokerState,
    data_dir: Path,
    *,
    only: set[str] | None = None,
) -> list[str]:
    """Add every topic found in the store but missing from ``state`` (restricted to ``only`` when given)
    to ``state`` and persist it. Internal (``__``) topics and illegal names are skipped. Returns the
    restored names, sorted. Idempotent (a second call restores nothing). Not safe concurrently with
    other changes to ``state``: call it before the broker opens its topics, or offline.

    Raises:
        UnavailableError: the store failed (nothing is changed).
        OSError: the state cannot be written.
    """
    found = await topics_in_store(manifests)
    restored: list[str] = []
    for name, partitions in sorted(found.items()):
        if name in state.topics or name.startswith("__") or (only is not None and name not in only):
            continue
        try:
            meta.validate_topic_name(name)
        except Exception:
            log.warning("not restoring %r: not a legal topic name", name)
            continue
        state.topics[name] = meta.TopicRecord(
            name=name, partitions=partitions, configs={"remote.storage.enable": "true"}
        )
        restored.append(name)
    if restored:
        await asyncio.to_thread(meta.save_state, data_dir, state)
    return restored
