"""``tierlog cluster describe`` and the leadership columns of ``tierlog topics describe``.

Both read ``GET /native/v1/metadata`` (docs/design/0008-cluster-metadata.md, "Routing"), which every broker
answers for the whole cluster (a single broker is a cluster of one that controls and leads everything).
Partition offsets live on each partition's leader, so ``topics describe`` asks every leader for the
partitions it leads; a partition without a live leader, or whose leader cannot be reached, shows ``-``
instead of offsets (never another broker's numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tierlog.client.errors import BrokerUnavailableError, RequestTimeoutError
from tierlog.client.security import ClientSecurity
from tierlog.client.transport import BrokerClient, PartitionInfo, segment
from tierlog.wire.errors import (
    CorruptRecordError,
    TierlogError,
    UnknownTopicError,
    error_for_code,
)
from tierlog.wire.native import METADATA_PATH

__all__ = [
    "BrokerInfo",
    "ClusterMetadata",
    "PartitionLeadership",
    "fetch_metadata",
    "offline_partitions",
    "leader_offsets",
    "reachable_broker",
    "render_cluster",
    "run_cluster",
]

NO_LEADER = -1
_OFFLINE_SHOWN = 10  # offline partitions named in the text form (all of them in JSON)
_HEALTH_TIMEOUT_MS = 5_000  # a bootstrap broker that does not answer its health check in this is skipped


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    url: str
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    partition: int
    leader: int  # -1: no live leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One answer of ``GET /native/v1/metadata``."""

    cluster_id: str
    controller_id: int  # -1: no controller right now
    controller_epoch: int
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, tuple[PartitionLeadership, ...]]
    errors: dict[str, int] = field(default_factory=dict)  # topic -> error code (40401: no such topic)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return next((b for b in self.brokers if b.broker_id == broker_id), None)

    @classmethod
    def decode(cls, doc: Any) -> ClusterMetadata:
        """Parse the JSON answer. Raises CorruptRecordError when it does not have the documented shape."""
        try:
            brokers = tuple(
                BrokerInfo(
                    int(b["broker_id"]), str(b["url"]), None if b.get("rack") is None else str(b["rack"])
                )
                for b in doc["brokers"]
            )
            topics = {
                str(t["topic"]): tuple(
                    PartitionLeadership(
                        int(p["partition"]),
                        int(p["leader"]),
                        int(p.get("leader_epoch", 0)),
                        tuple(int(r) for r in p.get("replicas", ())),
                        tuple(int(r) for r in p.get("isr", ())),
                    )
                    for p in t["partitions"]
                )
                for t in doc.get("topics", ())
                if "error_code" not in t
            }
            errors = {
                str(t["topic"]): int(t["error_code"]) for t in doc.get("topics", ()) if "error_code" in t
            }
            return cls(
                str(doc["cluster_id"]),
                int(doc.get("controller_id", NO_LEADER)),
                int(doc.get("controller_epoch", 0)),
                tuple(sorted(brokers, key=lambda b: b.broker_id)),
                topics,
                errors,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptRecordError(
                f"the broker's metadata answer has an unexpected shape: {err!r}"
            ) from err


async def reachable_broker(
    urls: Sequence[str], *, request_timeout_ms: int = 30_000, security: ClientSecurity | None = None
) -> BrokerClient:
    """A started client of the first of ``urls`` that answers ``GET /health`` (the caller closes it), with
    ``security`` (TLS and credentials; default plaintext).

    Raises the error of the last one tried (BrokerUnavailableError, RequestTimeoutError) when none answers;
    UnauthorizedError when a broker's certificate is refused (or it refuses ours); InvalidRequestError when
    a PEM file of ``security`` cannot be used.
    """
    failure: TierlogError | None = None
    for url in urls:
        client = BrokerClient(url, request_timeout_ms=request_timeout_ms, security=security)
        await client.start()
        try:
            await client.call("GET", "/health", timeout_ms=min(request_timeout_ms, _HEALTH_TIMEOUT_MS))
        except (BrokerUnavailableError, RequestTimeoutError) as err:
            await client.close()
            failure = err
            continue
        except BaseException:
            await client.close()
            raise
        return client
    assert failure is not None, "no bootstrap URL"
    raise failure


async def fetch_metadata(broker: BrokerClient, topics: list[str] | None = None) -> ClusterMetadata:
    """The cluster's metadata as ``broker`` sees it; with ``topics``, only those topics (an unknown one
    raises UnknownTopicError). Idempotent. Raises the errors of :meth:`BrokerClient.call`."""
    path = METADATA_PATH
    if topics:
        path += "?" + "&".join(f"topic={segment(t)}" for t in topics)
    meta = ClusterMetadata.decode(await broker.json("GET", path))
    for topic, code in meta.errors.items():
        unknown = code == UnknownTopicError.code
        raise error_for_code(
            code, f"Topic not found. ({topic})" if unknown else f"Topic {topic}: error {code}"
        )
    return meta


async def leader_offsets(
    bootstrap: BrokerClient, meta: ClusterMetadata, topic: str
) -> dict[int, PartitionInfo | None]:
    """Offsets of each partition of ``topic`` as its leader reports them; ``None`` for a partition whose
    leader is unknown, gone or unreachable (or that its leader no longer leads). Idempotent; never raises a
    broker error for one leader (the others still answer)."""
    by_leader: dict[int, list[int]] = {}
    result: dict[int, PartitionInfo | None] = {}
    for p in meta.topics.get(topic, ()):
        result[p.partition] = None
        if p.leader != NO_LEADER and meta.broker(p.leader) is not None:
            by_leader.setdefault(p.leader, []).append(p.partition)

    async def ask(leader_id: int, partitions: list[int]) -> None:
        info = meta.broker(leader_id)
        assert info is not None
        # The only live broker is the one that answered, whatever URL it advertises.
        same = info.url.rstrip("/") == bootstrap.base_url or len(meta.brokers) == 1
        client = (
            bootstrap
            if same
            else BrokerClient(
                info.url, request_timeout_ms=bootstrap.request_timeout_ms, security=bootstrap.security
            )
        )
        try:
            if not same:
                await client.start()
            answer = await client.topic_metadata(topic)
        except TierlogError:
            return
        finally:
            if not same:
                await client.close()
        wanted = set(partitions)
        for part in answer.partitions:
            if part.partition in wanted and part.log_end_offset >= 0:
                result[part.partition] = part

    await asyncio.gather(*(ask(leader, parts) for leader, parts in by_leader.items()))
    return result


def _leader_counts(meta: ClusterMetadata) -> dict[int, int]:
    counts = {b.broker_id: 0 for b in meta.brokers}
    for partitions in meta.topics.values():
        for p in partitions:
            if p.leader in counts:
                counts[p.leader] += 1
    return counts


def offline_partitions(meta: ClusterMetadata) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every partition without a live leader (Kafka's offline partitions). Pure."""
    live = {b.broker_id for b in meta.brokers}
    return [
        (topic, p.partition)
        for topic, partitions in sorted(meta.topics.items())
        for p in partitions
        if p.leader == NO_LEADER or p.leader not in live
    ]


def render_cluster(meta: ClusterMetadata) -> str:
    """The text form of ``tierlog cluster describe``. Pure."""
    controller = str(meta.controller_id) if meta.controller_id != NO_LEADER else "none"
    offline = offline_partitions(meta)
    lines = [
        f"Cluster: {meta.cluster_id}  Controller: {controller}  ControllerEpoch: {meta.controller_epoch}  "
        f"Brokers: {len(meta.brokers)}  OfflinePartitions: {len(offline)}"
    ]
    counts = _leader_counts(meta)
    rows = [["BROKER", "URL", "RACK", "LEADER-OF", "CONTROLLER"]]
    rows += [
        [str(b.broker_id), b.url, b.rack or "-", str(counts[b.broker_id]),
         "yes" if b.broker_id == meta.controller_id else ""]
        for b in meta.brokers
    ]  # fmt: skip
    lines.append(table(rows))
    if offline:
        shown = ", ".join(f"{t}-{p}" for t, p in offline[:_OFFLINE_SHOWN])
        more = f" and {len(offline) - _OFFLINE_SHOWN} more" if len(offline) > _OFFLINE_SHOWN else ""
        lines.append(f"Offline (no live leader): {shown}{more}")
    return "\n".join(lines)


def cluster_json(meta: ClusterMetadata) -> dict[str, Any]:
    """The ``--output json`` form of ``tierlog cluster describe``. Pure."""
    counts = _leader_counts(meta)
    return {
        "cluster_id": meta.cluster_id,
        "controller_id": meta.controller_id,
        "controller_epoch": meta.controller_epoch,
        "brokers": [
            {
                "broker_id": b.broker_id,
                "url": b.url,
                "rack": b.rack,
                "is_controller": b.broker_id == meta.controller_id,
                "leader_of": counts[b.broker_id],
            }
            for b in meta.brokers
        ],
        "offline_partitions": [{"topic": t, "partition": p} for t, p in offline_partitions(meta)],
    }


def table(rows: list[list[str]]) -> str:
    """Rows as left-aligned columns separated by two spaces. Pure."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


async def run_cluster(args: argparse.Namespace, broker: BrokerClient) -> int:
    """``tierlog cluster describe``: cluster id, controller and epoch, live brokers. Exit code 0."""
    meta = await fetch_metadata(broker, topics=None)
    if args.output == "json":
        sys.stdout.write(json.dumps(cluster_json(meta), sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_cluster(meta) + "\n")
    return 0
