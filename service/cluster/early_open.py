"""Partition logs a create opens while its commit is being written, for the reconcile to take.

A topic created by this broker, which holds replicas of it, needs those partitions' directories made
(``PartitionLog.open`` on a fresh directory: the lock, the first segment and its indexes) before it can
serve them. That work does not depend on the commit's outcome, so :class:`EarlyOpens` starts it in a
thread while the commit and the topic id's record are written; the reconcile then takes the opened log
instead of opening it after the commit (:meth:`EarlyOpens.take`). Only a partition whose directory does
not exist yet is opened early: a directory that exists may hold data, and data is opened only once its
topic id is durably recorded (:mod:`tierlog.service.cluster.node`).

A partition this broker is the first replica of is led by it at leader epoch 0 (a new partition's first
state, :func:`~tierlog.service.cluster.decisions.decide_partition`), so its log records epoch 0 from
offset 0 in the same thread (the ``leader-epoch-checkpoint`` written while the commit is); becoming its
leader then finds the entry there. Should another replica lead first, it leads at epoch 0 from offset 0
too, and every replica that appends its records records that same entry.

A fresh directory holds no record, so nothing it holds needs that record: if the broker stops before the
commit or the record is durable, the next start sets the empty directory aside as it does any directory of
no recorded topic. When the commit fails, or another topic of the name wins, :meth:`EarlyOpens.discard`
renames each early directory aside while still holding its lock, then closes it, so a directory the
winner's reconcile opens under the same name is never touched.

Event-loop only; every opened log is taken, discarded or closed by :meth:`EarlyOpens.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from tierlog.service.topics import data_dir as meta
from tierlog.tiering.log import LogConfig, PartitionLog
from tierlog.tiering.log.clock import Clock
from tierlog.wire.errors import TierlogError

__all__ = ["EarlyOpens"]

log = logging.getLogger("tierlog.cluster.early_open")


class EarlyOpens:
    """The partition logs opened early, by ``(topic, index)``, each with the topic id it was opened for."""

    def __init__(self, data_dir: Path, clock: Clock) -> None:
        self._data_dir = data_dir
        self._clock = clock
        self._opening: dict[tuple[str, int], tuple[str, LogConfig, asyncio.Task[PartitionLog]]] = {}

    @property
    def pending(self) -> list[tuple[str, int]]:
        """The ``(topic, index)`` of every log opened (or opening) early and not taken yet. Pure."""
        return sorted(self._opening)

    def start(
        self, topic: str, topic_id: str, indexes: list[int], config: LogConfig, *, leads: frozenset[int]
    ) -> None:
        """Start opening each partition in ``indexes`` whose directory does not exist yet (checked in the
        thread that opens it); those in ``leads`` record leader epoch 0 from offset 0. Never raises; a
        failed open is logged and the reconcile opens it."""
        for index in indexes:
            if (topic, index) in self._opening:
                continue
            path = meta.partition_dir(self._data_dir, topic, index)
            task = asyncio.create_task(
                asyncio.to_thread(self._open_fresh, path, config, topic, index, index in leads),
                name=f"tierlog-early-open-{topic}-{index}",
            )
            self._opening[(topic, index)] = (topic_id, config, task)

    def _open_fresh(self, path: Path, config: LogConfig, topic: str, index: int, lead: bool) -> PartitionLog:
        if path.exists():
            raise FileExistsError(path)  # maybe data: the reconcile opens it once the id is recorded
        opened = PartitionLog.open(path, config, clock=self._clock, topic=topic, partition=index)
        if lead:
            try:
                opened.epochs.assign(0, 0)
            except BaseException:
                opened.close()
                raise
        return opened

    async def take(self, topic: str, topic_id: str, index: int, config: LogConfig) -> PartitionLog | None:
        """The log opened early for this partition of this topic id with this config, now the caller's;
        ``None`` when there is none (or its open failed, or it was opened for another id or config: then
        it is discarded). Never raises."""
        entry = self._opening.get((topic, index))
        if entry is None:
            return None
        opened_for, opened_with, _ = entry
        if opened_for != topic_id or opened_with != config:
            await self._discard_one(topic, index)
            return None
        del self._opening[(topic, index)]
        try:
            return await entry[2]
        except FileExistsError:
            return None
        except (TierlogError, OSError) as err:
            log.warning("opening %s-%d early failed (the reconcile opens it): %s", topic, index, err)
            return None

    async def discard(self, topic: str, topic_id: str) -> None:
        """Set aside and close every log opened early for ``topic_id`` (its create did not commit). Never
        raises."""
        for (name, index), (opened_for, _, _) in list(self._opening.items()):
            if name == topic and opened_for == topic_id:
                await self._discard_one(name, index)

    async def _discard_one(self, topic: str, index: int) -> None:
        _, _, task = self._opening.pop((topic, index))
        try:
            opened = await task
        except (TierlogError, OSError):
            return
        path = opened.path
        target = path.with_name(meta.suffixed_dir_name(topic, index, "delete"))
        try:  # renamed while its lock is held: a directory of the name made after it is not this one
            await asyncio.to_thread(meta.rename_durably, path, target)
        except OSError as err:
            log.warning("could not set aside %s, opened for a create that did not commit: %s", path, err)
            target = path
        try:
            await asyncio.to_thread(opened.close)
        except (TierlogError, OSError) as err:
            log.warning("closing %s failed: %s", target, err)
        if target != path:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(meta.remove_tree, target)

    async def close(self) -> None:
        """Close every log still held (left in place: its directory is an empty log the next start opens
        or sets aside). Idempotent; never raises."""
        opening, self._opening = self._opening, {}
        for _, _, task in opening.values():
            try:
                opened = await task
            except (TierlogError, OSError):
                continue
            try:
                await asyncio.to_thread(opened.close)
            except (TierlogError, OSError) as err:
                log.warning("closing %s failed: %s", opened.path, err)
