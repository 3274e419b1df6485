"""Spark reads the archive straight from the bucket: the ``tierlog`` PySpark data source (Spark 4).

::

    from tierlog.client.spark.source import TierlogDataSource

    spark.dataSource.register(TierlogDataSource)
    df = (spark.read.format("tierlog")
          .option("uri", "s3://archive/tierlog")
          .option("topic", "events")
          .load())

The rows have the schema of Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``headers``), so a Kafka job ports by changing the format
name. The driver reads only the partitions' manifests; each task reads one remote segment (or a byte
range of a large one) with ranged GETs and decodes it with the shared codec on the executor, without a
broker and without asyncio. ``spark.readStream.format("tierlog")`` picks up newly archived segments.
Options are listed in :mod:`tierlog.client.spark.options` and ``docs/spark.md``; the design is in
``docs/design/0005-spark-source.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tierlog.client.spark.archive_reader import open_archive
from tierlog.client.spark.options import ScanOptions, parse_options
from tierlog.client.spark.plan import SegmentTask, load_manifests, plan_segments, resolve_range
from tierlog.client.spark.scan import (
    SPARK_SCHEMA_DDL,
    SPARK_SCHEMA_DDL_NO_HEADERS,
    CorruptSegmentError,
    scan_task,
)
from tierlog.client.spark.stream import TierlogStreamReader

__all__ = [
    "CorruptSegmentError",
    "SPARK_SCHEMA_DDL",
    "TierlogBatchReader",
    "TierlogDataSource",
    "TierlogStreamReader",
    "register",
]


class TierlogDataSource(DataSource):
    """The ``tierlog`` format. Options are validated when a reader is created (on the driver), so a bad
    option fails the query before any task runs, with an ``InvalidRequestError`` naming it.
    """

    @classmethod
    def name(cls) -> str:
        return "tierlog"

    def schema(self) -> str:
        """Spark's Kafka source schema (without ``headers`` when ``includeHeaders=false``)."""
        include = str(self.options.get("includeHeaders", "true")).strip().lower() not in ("false", "0", "no")
        return SPARK_SCHEMA_DDL if include else SPARK_SCHEMA_DDL_NO_HEADERS

    def reader(self, schema: Any) -> TierlogBatchReader:
        return TierlogBatchReader(parse_options(self.options))

    def streamReader(self, schema: Any) -> TierlogStreamReader:
        return TierlogStreamReader(parse_options(self.options, streaming=True))


class TierlogBatchReader(DataSourceReader):
    """A batch scan. ``partitions`` runs once on the driver; ``read`` on executors, one call per task.
    Picklable: it holds only the parsed options (S3 clients are created per worker process).
    """

    def __init__(self, options: ScanOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Plan the scan from the manifests (one LIST and one GET per partition).

        Raises:
            OffsetOutOfRangeError: ``startingOffsets`` below the archive with ``failOnDataLoss``.
            CorruptRecordError: a manifest does not decode (the message names the object).
            UnavailableError, UnauthorizedError: the store failed.
        """
        options = self.options
        tasks: list[InputPartition] = []
        manifests = load_manifests(open_archive(options.store), options)
        for (topic, partition), manifest in sorted(manifests.items()):
            wanted = resolve_range(
                manifest,
                options.start_bound(topic, partition),
                options.end_bound(topic, partition),
                fail_on_data_loss=options.fail_on_data_loss,
            )
            tasks.extend(plan_segments(manifest, wanted, max_bytes=options.max_bytes_per_partition))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The records of one task as Arrow record batches (see
        :func:`tierlog.client.spark.scan.scan_task`)."""
        if not isinstance(partition, SegmentTask):  # Spark's placeholder when the plan is empty
            return iter(())
        return scan_task(open_archive(self.options.store), self.options, partition)


def register(spark: Any) -> None:
    """``spark.dataSource.register(TierlogDataSource)``. Idempotent."""
    spark.dataSource.register(TierlogDataSource)
