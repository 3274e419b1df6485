"""What the replication chaos tests (``test_replication_chaos.py``) drive and observe: a cluster of one etcd
and three ``tierlog serve`` brokers (the process cluster of ``test_cluster_processes.py``, started with extra
settings), a producer thread that sends numbered records and records every acknowledgement, and readers of
what each replica holds: the leader's watermarks through the native API, a follower's high watermark from
its ``replication-offset-checkpoint``, and, with the brokers stopped, the batches of its ``.log`` files and
its ``leader-epoch-checkpoint``.

Every wait polls a condition against a deadline (:data:`FAILOVER_DEADLINE_S` for anything that needs a
lease to expire or a leader to be elected); nothing here asserts a timing.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.process import BrokerProcess, wait_for
from tests.e2e.test_cluster_processes import (
    BATCHES,
    FAILOVER_DEADLINE_S,
    HEARTBEAT_MS,
    PREFIX,
    SESSION_MS,
    Answer,
    Cluster,
    free_port,
    http,
)
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.header import LOG_OVERHEAD
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log.naming import HIGH_WATERMARK_FILE, LEADER_EPOCH_FILE, LOG_SUFFIX, parse_segment_file

__all__ = [
    "BATCHES",
    "FAILOVER_DEADLINE_S",
    "Answer",
    "Ack",
    "ProduceLoop",
    "ReplicatedCluster",
    "error_code",
    "epoch_entries",
    "first_stamped",
    "partition_batches",
    "partition_end",
    "produce",
    "read_all",
    "wait_for",
]

REPLICA_LAG_MS = 2000  # replica.lag.time.max.ms of every broker: a stopped follower leaves the ISR soon


def error_code(answer: Answer) -> int | None:
    """The ``error_code`` of a JSON error answer, or None when the body is not one."""
    try:
        code = answer.json().get("error_code")
    except (ValueError, AttributeError):
        return None
    return None if code is None else int(code)


@dataclass
class ReplicatedCluster(Cluster):
    """The process cluster of ``test_cluster_processes`` with ``extra_args`` given to every broker (remote
    tier, replica settings), and the per-partition views the replication tests need."""

    extra_args: tuple[str, ...] = ()

    def start(self, broker_id: int) -> BrokerProcess:
        """(Re)start broker ``broker_id`` on its own port and data directory; returns once it is ready."""
        port = self.ports.setdefault(broker_id, free_port())
        workdir = self.root / f"broker-{broker_id}"
        old = self.brokers.get(broker_id)
        if old is not None:
            self.logs.append(f"--- broker {broker_id} before restart ---\n" + old.log())
        process = BrokerProcess(
            workdir,
            "--port", str(port),
            "--advertised-url", f"http://127.0.0.1:{port}",
            "--data-dir", str(workdir / "data"),
            "--metadata-uri", self.etcd.uri(PREFIX),
            "--broker-id", str(broker_id),
            "--broker-session-timeout-ms", str(SESSION_MS),
            "--broker-heartbeat-interval-ms", str(HEARTBEAT_MS),
            "--replica-lag-time-max-ms", str(REPLICA_LAG_MS),
            "--replica-high-watermark-checkpoint-interval-ms", "200",
            *self.extra_args,
        )  # fmt: skip
        self.brokers[broker_id] = process
        return process

    def data_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}" / "data"

    def all_logs(self) -> str:
        """Every broker's log (earlier incarnations included), for failure messages."""
        now = [f"--- broker {n} ---\n{p.log()}" for n, p in sorted(self.brokers.items())]
        return "\n".join([*self.logs, *now])

    def create_topic(
        self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> dict[int, dict[str, Any]]:
        """Create ``topic`` through a live broker's v3 API; answer its partitions once every live broker
        sees a leader for each and every replica in each ISR."""
        via = self.live()[0]
        meta = wait_for("metadata from a broker", lambda: self.metadata(via))
        body = json.dumps(
            {
                "topic_name": topic,
                "partitions_count": partitions,
                "replication_factor": replication_factor,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ).encode()
        created = http(
            "POST", self.url(via) + f"/v3/clusters/{meta['cluster_id']}/topics", body, "application/json"
        )
        assert created.status == 201, (created.status, created.body)
        settled = wait_for(
            f"{topic}: a leader and a full ISR for every partition on every broker",
            lambda: self.settled(topic, partitions),
            FAILOVER_DEADLINE_S,
        )
        for p, state in settled.items():  # the metadata names a leader before it has become one (50311)
            wait_for(
                f"{topic}-{p}: broker {state['leader']} serving as its leader",
                lambda p=p, leader=state["leader"]: self.serves(leader, topic, p),  # type: ignore[misc]
                FAILOVER_DEADLINE_S,
            )
        return settled

    def serves(self, broker_id: int, topic: str, partition: int) -> bool:
        """Whether broker ``broker_id`` answers a consumer fetch of ``partition`` (it leads it, at the
        current epoch, with the partition open). Read-only."""
        path = f"/native/v1/topics/{topic}/partitions/{partition}/batches?offset=0&max_wait_ms=0"
        try:
            return http("GET", self.url(broker_id) + path).status == 200
        except OSError:
            return False

    def partitions(self, topic: str, via: int | None = None) -> dict[int, dict[str, Any]]:
        """``{partition: {leader, leader_epoch, replicas, isr}}`` as broker ``via`` (or any) sees it."""
        meta = self.metadata(via) or {}
        for entry in meta.get("topics", []):
            if entry["topic"] == topic:
                return {int(p["partition"]): p for p in entry.get("partitions", [])}
        return {}

    def settled(self, topic: str, count: int) -> dict[int, dict[str, Any]] | None:
        """The partitions when every live broker sees, for all ``count``, the same live leader and an ISR
        of every replica; else None."""
        live = self.live()
        views = [self.partitions(topic, n) for n in live]
        first = views[0] if views else {}
        for view in views:
            if len(view) != count:
                return None
            for p, state in view.items():
                if state["leader"] not in live or sorted(state["isr"]) != sorted(state["replicas"]):
                    return None
                if (state["leader"], state["leader_epoch"]) != (first[p]["leader"], first[p]["leader_epoch"]):
                    return None
        return first

    def watermarks(self, broker_id: int, topic: str) -> dict[int, dict[str, int]] | None:
        """``{partition: {log_start_offset, high_watermark, log_end_offset}}`` of the replicas broker
        ``broker_id`` holds (``GET /native/v1/topics/{topic}``), or None when it does not answer."""
        try:
            answer = http("GET", self.url(broker_id) + f"/native/v1/topics/{topic}")
        except OSError:
            return None
        if answer.status != 200:
            return None
        return {int(p["partition"]): p for p in answer.json()["partitions"]}

    def checkpointed_hw(self, broker_id: int, topic: str, partition: int) -> int | None:
        """The HW broker ``broker_id`` last wrote to its ``replication-offset-checkpoint`` for ``partition``
        (every ``replica.high.watermark.checkpoint.interval.ms``), or None without one."""
        path = self.data_dir(broker_id) / f"{topic}-{partition}" / HIGH_WATERMARK_FILE
        try:
            lines = path.read_text().split("\n")
        except FileNotFoundError:
            return None
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3 and (parts[0], parts[1]) == (topic, str(partition)):
                return int(parts[2])
        return None

    def in_step(self, topic: str, partition: int) -> int | None:
        """The leader's LEO of ``partition`` when every replica is in the ISR (as every live broker sees
        it), the leader's HW equals its LEO (so every replica holds the whole log: HW is the smallest LEO
        of the ISR) and every follower's checkpointed HW has reached it too; else None.

        A follower's HW is read from what the follower itself persisted, its checkpoint file (written
        every ``replica.high.watermark.checkpoint.interval.ms``), not from any broker's answer."""
        states = [self.partitions(topic, n).get(partition) for n in self.live()]
        if not states or any(s is None or sorted(s["isr"]) != sorted(s["replicas"]) for s in states):
            return None
        leader = int(states[0]["leader"])  # type: ignore[index]
        marks = (self.watermarks(leader, topic) or {}).get(partition)
        if marks is None or marks["high_watermark"] != marks["log_end_offset"]:
            return None
        end = marks["log_end_offset"]
        followers = [n for n in states[0]["replicas"] if n != leader]  # type: ignore[index]
        if any(self.checkpointed_hw(n, topic, partition) != end for n in followers):
            return None
        return int(end)

    def report(self, topic: str) -> str:
        """Each live broker's view of ``topic`` (leader, epoch, ISR) and the watermarks it reports, for
        failure messages."""
        lines = []
        for n in self.live():
            view = {
                p: (s["leader"], s["leader_epoch"], s["isr"]) for p, s in self.partitions(topic, n).items()
            }
            hws = {p: self.checkpointed_hw(n, topic, p) for p in view}
            lines.append(
                f"broker {n}: (leader, epoch, isr) {view}; led watermarks {self.watermarks(n, topic)}; "
                f"checkpointed HW {hws}"
            )
        return "\n".join(lines)

    def stop_all(self) -> dict[int, int]:
        """SIGTERM every running broker and wait for each: ``{broker_id: exit code}``."""
        return {n: p.stop() for n, p in self.brokers.items() if p.proc.poll() is None}


def produce(
    url: str,
    topic: str,
    partition: int,
    values: Sequence[bytes],
    *,
    acks: str = "all",
    timeout_ms: int = 5000,
) -> Answer:
    """One native produce of ``values`` as a single batch. Raises OSError when the broker is unreachable."""
    query = urllib.parse.urlencode({"acks": acks, "timeout_ms": timeout_ms})
    batch = build_batch([Record(key=None, value=v) for v in values])
    return http(
        "POST", f"{url}/native/v1/topics/{topic}/partitions/{partition}/batches?{query}", batch, BATCHES
    )


@dataclass(frozen=True)
class Ack:
    """One acknowledged produce: where the records landed and who said so."""

    partition: int
    base_offset: int
    values: tuple[bytes, ...]
    leader_epoch: int | None
    broker_id: int | None
    sent_to: int  # the broker id the request went to
    at: float  # time.monotonic() of the answer

    def records(self) -> Iterator[tuple[int, bytes]]:
        for i, value in enumerate(self.values):
            yield self.base_offset + i, value


@dataclass
class ProduceLoop:
    """A thread producing numbered records (``<tag>-<n>``, ``per_batch`` per request) with ``acks`` to each
    of ``partitions`` of ``topic`` in turn, always to the leader the metadata names; every 200 answer is an
    :class:`Ack`. Refusals and unreachable brokers are counted and retried with fresh numbers (a request
    without an answer may or may not have landed: it is not acknowledged, so nothing is promised for it).

    ``start()`` and ``stop()`` (joins) are called from the test's thread; ``acks`` may be read meanwhile
    (appends to a list are atomic)."""

    cluster: ReplicatedCluster
    topic: str
    partitions: Sequence[int]
    tag: str = "r"
    per_batch: int = 5
    acks_mode: str = "all"
    timeout_ms: int = 5000
    acks: list[Ack] = field(default_factory=list)
    refusals: dict[int | None, int] = field(default_factory=dict)  # error_code (None: unreachable) -> count
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _failure: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"produce-{self.tag}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and join; re-raise what the thread failed with."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(FAILOVER_DEADLINE_S + 60)
            assert not self._thread.is_alive(), "the produce thread did not stop"
        if self._failure is not None:
            raise self._failure

    def acked_since(self, since: float, partition: int, *, not_by: int | None = None) -> Ack | None:
        """The first acknowledgement for ``partition`` answered after ``since`` by a broker other than
        ``not_by``."""
        found = (
            a for a in list(self.acks) if a.at > since and a.partition == partition and a.sent_to != not_by
        )
        return next(found, None)

    def _run(self) -> None:
        try:
            n = 0
            leaders: dict[int, int] = {}
            while not self._stop.is_set():
                for partition in self.partitions:
                    values = tuple(f"{self.tag}-{partition}-{n + i}".encode() for i in range(self.per_batch))
                    n += self.per_batch
                    self._send(partition, values, leaders)
        except BaseException as err:  # reported by stop()
            self._failure = err

    def _send(self, partition: int, values: tuple[bytes, ...], leaders: dict[int, int]) -> None:
        leader = leaders.get(partition)
        if leader is None or leader not in self.cluster.live():
            state = self.cluster.partitions(self.topic).get(partition)
            if state is None or state["leader"] not in self.cluster.live():
                self._refused(None)
                return
            leader = leaders[partition] = int(state["leader"])
        try:
            answer = produce(
                self.cluster.url(leader),
                self.topic,
                partition,
                values,
                acks=self.acks_mode,
                timeout_ms=self.timeout_ms,
            )
        except OSError:
            leaders.pop(partition, None)
            self._refused(None)
            return
        if answer.status == 200:
            doc = answer.json()
            epoch, broker = doc.get("leader_epoch"), doc.get("broker_id")
            self.acks.append(
                Ack(
                    partition,
                    int(doc["base_offset"]),
                    values,
                    None if epoch is None else int(epoch),
                    None if broker is None else int(broker),
                    leader,
                    time.monotonic(),
                )
            )
            return
        code = error_code(answer)
        leaders.pop(partition, None)
        self._refused(code)

    def _refused(self, code: int | None) -> None:
        self.refusals[code] = self.refusals.get(code, 0) + 1
        self._stop.wait(0.05)  # back off before the next try; not a timing anyone asserts


def read_all(url: str, topic: str, partition: int, start: int = 0) -> list[tuple[int, bytes, int]]:
    """Every record of ``partition`` below its HW, read with consumer fetches from the leader at ``url``
    from ``start``: ``(offset, value, the batch's partition_leader_epoch)`` in offset order."""
    records: list[tuple[int, bytes, int]] = []
    offset = start
    while True:
        path = f"/native/v1/topics/{topic}/partitions/{partition}/batches?offset={offset}&max_wait_ms=0"
        answer = http("GET", url + path)
        assert answer.status == 200, (offset, answer.status, answer.body)
        got = [
            (r.offset, r.value or b"", h.partition_leader_epoch)
            for h, r in iter_records(answer.body)
            if r.offset >= offset
        ]
        if not got:
            return records
        records += got
        offset = got[-1][0] + 1


def epoch_entries(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """One replica's ``leader-epoch-checkpoint``: ``[(epoch, start offset), ...]`` (empty without one)."""
    path = data_dir / f"{topic}-{partition}" / LEADER_EPOCH_FILE
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return []
    count = int(lines[1])
    return [(int(a), int(b)) for a, b in (line.split() for line in lines[2 : 2 + count])]


def first_stamped(batches: dict[int, bytes]) -> dict[int, int]:
    """``{partition_leader_epoch: base offset of the first batch stamped with it}``."""
    first: dict[int, int] = {}
    for base in sorted(batches):
        first.setdefault(int.from_bytes(batches[base][12:16], "big", signed=True), base)
    return first


def partition_end(data_dir: Path, topic: str, partition: int) -> int:
    """One replica's log end offset as its segment files say: past the last batch of its ``.log`` files,
    or the base offset of its newest (empty) segment when that is higher. Call it with the broker stopped."""
    batches = partition_batches(data_dir, topic, partition)
    ends = [base + int.from_bytes(b[23:27], "big", signed=True) + 1 for base, b in batches.items()]
    for path in (data_dir / f"{topic}-{partition}").iterdir():
        parsed = parse_segment_file(path.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and parsed[2] == "":
            ends.append(parsed[0])
    return max(ends, default=0)


def partition_batches(data_dir: Path, topic: str, partition: int) -> dict[int, bytes]:
    """The whole batches in one replica's segment files, ``{base offset: batch bytes}``, from its
    ``.log`` files in base-offset order (files being deleted are skipped). Replicas roll segments
    independently, so segment boundaries may differ while the batches are the same bytes.

    Call it with the broker stopped. Raises AssertionError on a torn or overlapping batch."""
    directory = data_dir / f"{topic}-{partition}"
    files = []
    for path in directory.iterdir():
        parsed = parse_segment_file(path.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and parsed[2] == "":
            files.append((parsed[0], path))
    batches: dict[int, bytes] = {}
    for _, path in sorted(files):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            assert pos + LOG_OVERHEAD <= len(data), (path, pos, "torn batch header")
            base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
            size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
            assert pos + size <= len(data), (path, pos, "torn batch")
            assert base not in batches, (path, base, "batch twice")
            batches[base] = data[pos : pos + size]
            pos += size
    return batches
