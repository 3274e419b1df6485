"""A group member that reads, commits part of what it read, reports, then waits to be killed.

    python -m tests.integration.client.crashing_consumer URL TOPIC GROUP READ COMMIT

Reads READ records of partition 0 with the synchronous Consumer, commits offset COMMIT (it "processed"
records below it), prints ``read <offsets>`` and ``committed <offset>``, then blocks on stdin so the test
can kill it with SIGKILL: no leave, no final commit, as in a crash.
"""

from __future__ import annotations

import sys

from tierlog.client import Consumer, ConsumerRecord, OffsetAndMetadata, TopicPartition


def main(url: str, topic: str, group: str, read: int, commit: int) -> None:
    consumer = Consumer(
        topic,
        bootstrap_servers=url,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=100,
    )
    records: list[ConsumerRecord] = []
    while len(records) < read:
        records += consumer.poll(timeout=1.0, max_records=read - len(records))
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(commit, "crash test")})
    print("read " + ",".join(str(r.offset) for r in records), flush=True)
    print(f"committed {commit}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
