"""What the idempotent-producer tests (``test_idempotence.py``) drive and observe through a broker's HTTP API:
producer ids (``POST /native/v1/producers``), raw idempotent batches posted to the native produce route,
topics with configs created through v3, every record of a partition read back with consumer fetches, and the
``.snapshot`` files of a partition directory (docs/design/0011-idempotent-producer.md).

Nothing here asserts a timing; every wait polls a condition against a deadline.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.process import BrokerProcess
from tests.e2e.test_cluster_processes import BATCHES, Answer, free_port, http
from tierlog.tiering.codec.batch import build_batch, iter_records
from tierlog.tiering.codec.records import Record

__all__ = [
    "EmbeddedBroker",
    "Idempotent",
    "Stored",
    "create_topic",
    "error_code",
    "log_end",
    "metric",
    "new_producer_id",
    "offsets",
    "post_batch",
    "read_partition",
    "snapshot_files",
]

SNAPSHOT_SUFFIX = ".snapshot"


def error_code(answer: Answer) -> int | None:
    """The ``error_code`` of a JSON error answer, or None when the body is not one."""
    try:
        code = answer.json().get("error_code")
    except (ValueError, AttributeError):
        return None
    return None if code is None else int(code)


def new_producer_id(url: str, bump: tuple[int, int] | None = None) -> tuple[int, int]:
    """``POST /native/v1/producers``: a new ``(producer_id, epoch)``, or with ``bump`` (id, epoch) the
    bumped epoch. Raises AssertionError on any answer but 200 (with the answer), OSError when unreachable."""
    body = b"" if bump is None else json.dumps({"producer_id": bump[0], "producer_epoch": bump[1]}).encode()
    answer = http("POST", url + "/native/v1/producers", body, "application/json")
    assert answer.status == 200, (answer.status, answer.body)
    doc = answer.json()
    return int(doc["producer_id"]), int(doc["producer_epoch"])


def create_topic(url: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` through the v3 API of the (embedded) broker at ``url``."""
    clusters = http("GET", url + "/v3/clusters")
    assert clusters.status == 200, (clusters.status, clusters.body)
    cluster_id = clusters.json()["data"][0]["cluster_id"]
    body = {
        "topic_name": topic,
        "partitions_count": partitions,
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }
    created = http(
        "POST", url + f"/v3/clusters/{cluster_id}/topics", json.dumps(body).encode(), "application/json"
    )
    assert created.status == 201, (created.status, created.body)


@dataclass
class Idempotent:
    """A producer identity and the batches it builds: ``batch(values)`` is one batch at the next sequence.
    Not thread-safe (a test drives it from one thread)."""

    producer_id: int
    epoch: int
    next_sequence: int = 0  # the sequence the next batch starts at

    @classmethod
    def register(cls, url: str) -> Idempotent:
        """A new producer id from the broker at ``url`` (see :func:`new_producer_id`)."""
        producer_id, epoch = new_producer_id(url)
        return cls(producer_id, epoch)

    def batch(
        self, values: Sequence[bytes], *, sequence: int | None = None, epoch: int | None = None
    ) -> bytes:
        """One batch of ``values`` (keys None) at ``sequence`` (default: the next one, which advances) and
        ``epoch`` (default: this producer's)."""
        base = self.next_sequence if sequence is None else sequence
        if sequence is None:
            self.next_sequence += len(values)
        return build_batch(
            [Record(key=None, value=v) for v in values],
            producer_id=self.producer_id,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=base,
        )


def post_batch(url: str, topic: str, partition: int, batch: bytes, *, acks: str = "1") -> Answer:
    """One native produce of ``batch`` (raw bytes). Raises OSError when the broker is unreachable."""
    query = urllib.parse.urlencode({"acks": acks, "timeout_ms": 10_000})
    return http(
        "POST", f"{url}/native/v1/topics/{topic}/partitions/{partition}/batches?{query}", batch, BATCHES
    )


def offsets(answer: Answer) -> tuple[int, int, tuple[int, ...]]:
    """``(base_offset, last_offset, batch_base_offsets)`` of a 200 produce answer."""
    assert answer.status == 200, (answer.status, answer.body)
    doc: dict[str, Any] = answer.json()
    return int(doc["base_offset"]), int(doc["last_offset"]), tuple(int(o) for o in doc["batch_base_offsets"])


@dataclass(frozen=True)
class Stored:
    """One record as a consumer fetch returns it, with its batch's producer fields."""

    offset: int
    key: bytes | None
    value: bytes
    producer_id: int
    producer_epoch: int
    base_sequence: int


def read_partition(url: str, topic: str, partition: int) -> list[Stored]:
    """Every record of ``partition`` below its high watermark, read from offset 0 with consumer fetches
    from its leader at ``url``, in offset order."""
    records: list[Stored] = []
    offset = 0
    while True:
        path = f"/native/v1/topics/{topic}/partitions/{partition}/batches?offset={offset}&max_wait_ms=0"
        answer = http("GET", url + path)
        assert answer.status == 200, (offset, answer.status, answer.body)
        got = [
            Stored(r.offset, r.key, r.value or b"", h.producer_id, h.producer_epoch, h.base_sequence)
            for h, r in iter_records(answer.body)
            if r.offset >= offset
        ]
        if not got:
            return records
        records += got
        offset = got[-1].offset + 1


def log_end(url: str, topic: str, partition: int) -> int:
    """The partition's log end offset as its leader at ``url`` reports it."""
    answer = http("GET", f"{url}/native/v1/topics/{topic}")
    assert answer.status == 200, (answer.status, answer.body)
    for entry in answer.json()["partitions"]:
        if int(entry["partition"]) == partition:
            return int(entry["log_end_offset"])
    raise AssertionError(f"{url} does not lead {topic}-{partition}: {answer.body!r}")


def snapshot_files(data_dir: Path, topic: str, partition: int) -> list[Path]:
    """The ``%020d.snapshot`` files of one partition directory, sorted by name (= offset)."""
    directory = data_dir / f"{topic}-{partition}"
    return sorted(p for p in directory.iterdir() if p.name.endswith(SNAPSHOT_SUFFIX))


class EmbeddedBroker:
    """An embedded ``tierlog serve`` (no metadata store) on a fixed port and data directory, so that it can
    be killed and restarted in place; ``advertised_url`` (e.g. a proxy in front of it) is what its metadata
    names. :meth:`start` returns once it is ready; logs of earlier incarnations are kept for failure
    messages. Driven from one thread."""

    def __init__(
        self, workdir: Path, *, advertised_url: str | None = None, extra: Sequence[str] = ()
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.data_dir = workdir / "data"
        self.advertised_url = advertised_url or self.url
        self.extra = tuple(extra)
        self.process: BrokerProcess | None = None
        self.old_logs: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        if self.process is not None:
            self.old_logs.append(self.process.log())
        self.process = BrokerProcess(
            self.workdir,
            "--port", str(self.port),
            "--data-dir", str(self.data_dir),
            "--advertised-url", self.advertised_url,
            *self.extra,
        )  # fmt: skip
        return self.process

    def kill(self) -> None:
        """SIGKILL (and reap) the running incarnation, if any."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> int:
        """SIGTERM and wait: the exit code."""
        assert self.process is not None
        return self.process.stop()

    def logs(self) -> str:
        now = [] if self.process is None else [self.process.log()]
        return "\n--- restart ---\n".join([*self.old_logs, *now])


def metric(url: str, name: str, **labels: str) -> float:
    """The value of the sample ``name`` whose labels include ``labels`` in the broker's ``/metrics``
    (Prometheus text), summed over matching samples; 0.0 when none matches."""
    answer = http("GET", url + "/metrics")
    assert answer.status == 200, (answer.status, answer.body)
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in answer.body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            sample, _, value = line.rpartition(" ")
            if all(w in sample for w in wanted):
                total += float(value)
    return total
