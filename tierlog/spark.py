"""The ``tierlog`` PySpark data source: Spark reads the archive straight from the bucket.

::

    from tierlog.spark import TierlogDataSource

    spark.dataSource.register(TierlogDataSource)
    df = spark.read.format("tierlog").option("uri", "s3://archive/tierlog").option("topic", "events").load()

Needs the ``spark`` extra (``pip install 'tierlog[spark]'``). Executors import this package by name, so
they must run a Python that has tierlog installed (``PYSPARK_PYTHON``; see docs/spark.md).
"""

from tierlog.client.spark.scan import CorruptSegmentError
from tierlog.client.spark.source import TierlogDataSource, register

__all__ = ["CorruptSegmentError", "TierlogDataSource", "register"]
