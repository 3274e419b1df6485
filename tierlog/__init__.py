"""tierlog: a Kafka-style commit log with a hot local tier and S3-compatible object storage behind it.

One import namespace for the whole distribution:

- :mod:`tierlog.client`: producers, consumers and the admin client (``from tierlog.client import Producer``);
- :mod:`tierlog.spark`: the PySpark data source over the archive (needs the ``spark`` extra);
- :mod:`tierlog.service`: the broker process;
- :mod:`tierlog.tiering`: the storage engine (record-batch codec, segments, the remote tier);
- :mod:`tierlog.wire`: the contract they share (the error table, the native protocol's names); it imports
  none of them.

Importing ``tierlog`` itself imports none of them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tierlog")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
