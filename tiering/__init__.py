"""tierlog's storage engine: the record-batch codec, segments, indexes and the partition log.

Nothing in this package imports ``service`` or ``client``; the codec modules import nothing async.
"""
