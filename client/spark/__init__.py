"""The PySpark data source over the archive. ``tierlog.spark`` is its public entry point.

The modules here other than :mod:`tierlog.client.spark.source` and :mod:`tierlog.client.spark.stream`
import no pyspark, so options, planning and segment reading are usable (and tested) without Spark.
"""
