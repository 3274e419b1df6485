"""Lets Spark register the ``tierlog`` format by itself.

Spark 4 looks for Python data sources in top-level modules named ``pyspark_*`` that define
``DefaultSource``. With this directory on the Python path of the driver (``PYTHONPATH=infra/spark``),
``spark.read.format("tierlog")`` works without ``spark.dataSource.register``. The source itself is
:class:`tierlog.client.spark.source.TierlogDataSource`.
"""

from tierlog.client.spark.source import TierlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
