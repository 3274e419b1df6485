"""tierlog's storage engine, in three layers:

* :mod:`tierlog.tiering.codec`: pure codecs (record batch v2, compression, varints, the partitioner's
  key hash); nothing async, no I/O;
* :mod:`tierlog.tiering.log`: the local log (segments, offset and time indexes, recovery, retention, the
  producer state, leader epochs, :class:`~tierlog.tiering.log.PartitionLog`);
* :mod:`tierlog.tiering.remote`: the remote tier (the object-store interface and its backends and
  wrappers, the bucket layout, manifests, the uploader, remote reads);
* :mod:`tierlog.tiering.tools`: ``tierlog dump-log``.

Errors come from the wire contract, :mod:`tierlog.wire.errors`. Nothing here imports ``service`` or
``client``; the codec modules import nothing async.
"""
