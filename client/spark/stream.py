"""Structured Streaming over the archive: each micro-batch reads the segments archived since the last one.

Offsets are Spark's Kafka source's JSON, ``{"<topic>": {"<partition>": <next offset>}}``, checkpointed
by Spark. The latest offset of a partition is one past the last offset of its newest ``copy_finished``
segment, so a segment becomes visible to a stream once the uploader has committed it to the manifest.
``Trigger.AvailableNow`` is supported: the target is the archive's end when the query starts.
``maxOffsetsPerTrigger`` caps a micro-batch, prorated over partitions by how far each lags (as Kafka's
source does); a partition with anything to read always advances by at least one offset.

The reader object lives in the driver's Python streaming process for the life of the query; it keeps
the manifests of the last ``latestOffset`` call to plan the same batch without listing the bucket again.
Not thread-safe (Spark calls it from one thread). ``read`` is stateless and runs on executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from tierlog.client.spark.archive_reader import open_archive
from tierlog.client.spark.options import Bound, ScanOptions
from tierlog.client.spark.plan import (
    PartitionRange,
    SegmentTask,
    archive_range,
    load_manifests,
    plan_segments,
    resolve_range,
)
from tierlog.client.spark.scan import scan_task
from tierlog.tiering.remote import manifest as mf

try:  # Spark >= 4.2; older releases run AvailableNow by wrapping the source
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - depends on the installed Spark

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for Spark releases without the mixin."""


__all__ = ["TierlogStreamReader", "Offsets", "encode_offsets", "decode_offsets"]

Offsets = dict[tuple[str, int], int]


def encode_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    """``{(topic, p): n}`` -> ``{"topic": {"p": n}}`` (sorted, so equal offsets compare equal). Pure."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def decode_offsets(raw: dict[str, Any]) -> Offsets:
    """Inverse of :func:`encode_offsets`. Pure; raises ``ValueError`` on a malformed offset."""
    out: Offsets = {}
    for topic, partitions in raw.items():
        for partition, offset in partitions.items():
            out[(topic, int(partition))] = int(offset)
    return out


def _prorate(start: Offsets, latest: Offsets, max_offsets: int) -> Offsets:
    """Cap the total advance at ``max_offsets``, shared in proportion to each partition's lag."""
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = lag[tp] * max_offsets // total
        out[tp] = begin + max(share, 1 if lag[tp] else 0)
    return out


class TierlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming side of the ``tierlog`` data source (see the module docstring)."""

    def __init__(self, options: ScanOptions) -> None:
        self.options = options
        self._manifests: dict[tuple[str, int], mf.Manifest] = {}
        self._target: Offsets | None = None

    # -- driver side -------------------------------------------------------------------------------

    def _load(self) -> dict[tuple[str, int], mf.Manifest]:
        self._manifests = load_manifests(open_archive(self.options.store), self.options, require=False)
        return self._manifests

    def _earliest(self, tp: tuple[str, int]) -> int:
        manifest = self._manifests.get(tp)
        return archive_range(manifest)[0] if manifest is not None else 0

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` (default ``latest``) or a starting timestamp,
        resolved against the archive now. A timestamp is resolved to the exact offset of the first
        record at or after it, by reading the one segment that holds it from its time-index position.
        Raises what :func:`resolve_range` and :func:`tierlog.client.spark.scan.scan_task` raise.
        """
        offsets: Offsets = {}
        for tp, manifest in self._load().items():
            wanted = resolve_range(
                manifest,
                self.options.start_bound(*tp),
                Bound(-1),
                fail_on_data_loss=self.options.fail_on_data_loss,
            )
            offsets[tp] = min(wanted.lo, archive_range(manifest)[1])
            if wanted.start_ts is not None:
                offsets[tp] = self._first_offset(manifest, wanted)
        return encode_offsets(offsets)

    def _first_offset(self, manifest: mf.Manifest, wanted: PartitionRange) -> int:
        """The offset of the first record selected by ``wanted``'s start timestamp (its edge segment)."""
        assert wanted.start_ts is not None
        edge = PartitionRange(wanted.lo, wanted.hi, wanted.start_ts, None)
        tasks = [
            t for t in plan_segments(manifest, edge, max_bytes=2**62) if t.base_offset == wanted.start_ts[0]
        ]
        options = replace(self.options, max_rows_per_batch=1)
        archive = open_archive(options.store)
        for task in tasks:
            for batch in scan_task(archive, options, task):
                return int(batch.column("offset")[0].as_py())
            return task.last_offset + 1
        return wanted.lo

    def _latest(self) -> Offsets:
        return {tp: archive_range(m)[1] for tp, m in self._load().items()}

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target of a ``Trigger.AvailableNow`` query: the archive's end right now."""
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """The end of the next micro-batch: the archive's end (or the AvailableNow target), capped by
        the read limit Spark passes (``maxOffsetsPerTrigger``) or, on older Spark, by the option.
        """
        latest = self._latest()
        if self._target is not None:
            target = self._target
            latest = {tp: min(end, target[tp]) for tp, end in latest.items() if tp in target}
        begin = decode_offsets(start) if start else {}
        # An offset never goes backwards, even if a partition's manifest lost segments meanwhile.
        latest = {tp: max(end, begin.get(tp, 0)) for tp, end in latest.items()}
        max_rows = self.options.max_offsets_per_trigger
        if limit is not None:  # Spark >= 4.2 passes the limit (ReadAllAvailable under AvailableNow)
            max_rows = getattr(limit, "max_rows", None)
        if max_rows is not None and begin:
            latest = _prorate({tp: begin.get(tp, self._earliest(tp)) for tp in latest}, latest, int(max_rows))
        return encode_offsets(latest)

    def getDefaultReadLimit(self) -> Any:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when set, else everything available."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return encode_offsets({tp: archive_range(m)[1] for tp, m in self._manifests.items()}) or None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per segment (or byte range) holding offsets in ``[start, end)`` of each partition."""
        begin, finish = decode_offsets(start), decode_offsets(end)
        if any(tp not in self._manifests for tp in finish):
            self._load()
        tasks: list[InputPartition] = []
        for tp, hi in sorted(finish.items()):
            manifest = self._manifests.get(tp)
            lo = begin.get(tp, self._earliest(tp))
            if manifest is None or hi <= lo:
                continue
            wanted = resolve_range(
                manifest, Bound(lo), Bound(hi), fail_on_data_loss=self.options.fail_on_data_loss
            )
            tasks.extend(plan_segments(manifest, wanted, max_bytes=self.options.max_bytes_per_partition))
        return tasks

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the archive is read-only and offsets live in Spark's checkpoint."""

    # -- executor side -----------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The records of one task as Arrow record batches (see
        :func:`tierlog.client.spark.scan.scan_task`)."""
        if not isinstance(partition, SegmentTask):
            return iter(())
        return scan_task(open_archive(self.options.store), self.options, partition)
