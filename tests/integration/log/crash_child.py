"""Child process of the crash test: appends batches with fsync per batch and prints each acknowledged
last offset on stdout, until it is killed. Each record's value is its own offset in decimal, padded."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, PartitionLog

CONFIG = LogConfig(flush_messages=1, segment_bytes=64 * 1024, index_interval_bytes=1024)


def main() -> None:
    directory, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    log = PartitionLog.open(directory, CONFIG)
    while True:
        offset = log.log_end_offset
        count = rng.randint(1, 4)
        pad = rng.choice((0, 100, 3000, 20000))
        records = [
            Record(None, b"%d|" % (offset + i) + b"." * pad, timestamp=1_700_000_000_000)
            for i in range(count)
        ]
        info = log.append(build_batch(records, now_ms=1_700_000_000_000))
        sys.stdout.write(f"{info.last_offset}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
