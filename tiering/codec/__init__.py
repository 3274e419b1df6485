"""Pure codecs for every on-disk and on-wire structure: no asyncio, no aiohttp, no boto, no Spark.

The broker, the Python client and Spark executors share these modules. The record batch v2 codec:

* :mod:`tierlog.tiering.codec.header`: the 61-byte batch header, CRC-32C, framing of batches in a byte stream;
* :mod:`tierlog.tiering.codec.records`: the varint-framed records inside a batch;
* :mod:`tierlog.tiering.codec.varint`: zigzag varints;
* :mod:`tierlog.tiering.codec.compression`: none, gzip, snappy, lz4, zstd;
* :mod:`tierlog.tiering.codec.batch`: whole batches, built and decoded;
* :mod:`tierlog.tiering.codec.columns`: the records of whole batches as Arrow-shaped column buffers;
* :mod:`tierlog.tiering.codec.validate`: the broker's record-by-record check of a produced batch.

The record loops run in a compiled core (``_speedups.c``, built by ``pip install``) when it is loaded;
:mod:`tierlog.tiering.codec._accel` says which runs, and ``TIERLOG_PURE_CODEC=1`` forces pure Python.

``docs/format.md`` specifies the bytes.
"""

from tierlog.tiering.codec.batch import (
    DEFAULT_MAX_UNCOMPRESSED,
    DecodedBatch,
    build_batch,
    decode_batch,
    iter_decoded_batches,
    iter_records,
)
from tierlog.tiering.codec.columns import RecordColumns, decode_columns
from tierlog.tiering.codec.compression import Compression, compress, decompress
from tierlog.tiering.codec.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    decode_header,
    encode_header,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    valid_prefix,
    verify_batch,
)
from tierlog.tiering.codec.records import Record

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "BatchHeader",
    "Compression",
    "DecodedBatch",
    "Record",
    "RecordColumns",
    "build_batch",
    "compress",
    "decode_batch",
    "decode_columns",
    "decode_header",
    "decompress",
    "encode_header",
    "iter_batches",
    "iter_decoded_batches",
    "iter_records",
    "set_base_offset",
    "set_log_append_time",
    "valid_prefix",
    "verify_batch",
]
