"""The leader-epoch history the remote tier records, for a follower that starts its log past it.

A replica whose fetch offset lies below the leader's local log start (41602, KIP-405's follower bootstrap)
starts its local log at that offset and takes the epochs below it from the remote manifest: each
``copy_finished`` segment lists the leader epochs of its batches (``RemoteSegment.leader_epochs``), and the
history is those lists concatenated, an epoch continuing across segments keeping its first start.
"""

from __future__ import annotations

from tierlog.tiering.log.leader_epoch import EpochEntry
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.manifest_store import ManifestStore

__all__ = ["remote_epoch_history", "load_remote_epoch_history"]


def remote_epoch_history(manifest: mf.Manifest, offset: int) -> list[EpochEntry]:
    """The leader epochs of the ``copy_finished`` segments of ``manifest`` that start below ``offset``,
    as cache entries ``(epoch, start offset)`` with start offsets below ``offset``, both strictly
    ascending. An epoch that spans consecutive segments appears once, with its first start; an entry whose
    epoch is not above the previous one (which a valid manifest never holds) is skipped. Segments without
    recorded epochs (uploaded before epochs were recorded) contribute nothing. Pure.
    """
    history: list[EpochEntry] = []
    finished = sorted(
        (s for s in manifest.segments if s.state is mf.SegmentState.COPY_FINISHED),
        key=lambda s: s.base_offset,
    )
    for segment in finished:
        if segment.base_offset >= offset:
            break
        for epoch, start in segment.leader_epochs:
            if start >= offset:
                break
            if history and (epoch <= history[-1].epoch or start <= history[-1].start_offset):
                continue
            history.append(EpochEntry(epoch, start))
    return history


async def load_remote_epoch_history(
    manifests: ManifestStore, topic: str, partition: int, offset: int
) -> list[EpochEntry]:
    """:func:`remote_epoch_history` of the newest manifest of ``topic``-``partition`` below ``offset``
    (empty when no manifest was written). Idempotent; no writes.

    Raises:
        CorruptRecordError: the newest manifest does not decode.
        UnavailableError: the store is down.
    """
    return remote_epoch_history(await manifests.load(topic, partition), offset)
