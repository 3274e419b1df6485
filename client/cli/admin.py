"""``tierlog topics ...`` and ``tierlog groups ...``: topic administration and group inspection.

Each command is a coroutine taking the parsed arguments and returning the exit code; errors propagate as
typed exceptions for :func:`tierlog.client.cli.main.main` to report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from tierlog.client.admin import AsyncAdmin
from tierlog.client.cli.cluster import NO_LEADER, PartitionLeadership, fetch_metadata, leader_offsets, table
from tierlog.client.transport import BrokerClient, PartitionInfo
from tierlog.wire.errors import InvalidRequestError, TierlogError

__all__ = ["run_topics", "run_groups", "parse_configs"]


def parse_configs(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` as a dict. Raises InvalidRequestError for an entry without ``=``."""
    configs: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise InvalidRequestError(f"--config expects NAME=VALUE, got {pair!r}")
        configs[name.strip()] = value
    return configs


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")


def _emit_json(value: Any) -> None:
    _print(json.dumps(value, sort_keys=True))


_LEADERSHIP_COLUMNS = ("PARTITION", "LEADER", "LEADER-EPOCH", "REPLICAS", "ISR")
_OFFSET_COLUMNS = ("LOG-START-OFFSET", "HIGH-WATERMARK", "LOG-END-OFFSET")
# a tiered topic's partitions (remote.storage.enable=true): v3's tiered_storage fields, in this order
_TIERING_COLUMNS = {
    "LOCAL-LOG-START": "local_log_start_offset",
    "REMOTE-LOG-START": "remote_log_start_offset",
    "REMOTE-END-OFFSET": "remote_next_offset",
    "REMOTE-SEGMENTS": "remote_segments",
    "UPLOAD-LAG-BYTES": "upload_lag_bytes",
    "UPLOAD-FAILURES": "upload_failures",
}


async def run_topics(args: argparse.Namespace, admin: AsyncAdmin, broker: BrokerClient) -> int:
    action = args.action
    if action == "list":
        names = await admin.list_topics(internal=args.internal)
        if args.json:
            _emit_json(names)
        elif names:
            _print("\n".join(names))
        return 0
    if action == "create":
        count = await admin.create_topic(
            args.topic,
            args.partitions,
            parse_configs(args.config),
            replication_factor=args.replication_factor,
        )
        _print(f"created topic {args.topic} with {count} partition(s)")
        return 0
    if action == "delete":
        await admin.delete_topic(args.topic)
        _print(f"deleted topic {args.topic}")
        return 0
    if action == "alter":
        await admin.alter_topic(
            args.topic,
            partitions=args.partitions,
            set_configs=parse_configs(args.config),
            delete_configs=tuple(args.delete_config or ()),
        )
        _print(f"altered topic {args.topic}")
        return 0
    return await _describe_topic(args, admin, broker)


async def _describe_topic(args: argparse.Namespace, admin: AsyncAdmin, broker: BrokerClient) -> int:
    meta = await fetch_metadata(broker, [args.topic])
    configs = await admin.topic_configs(args.topic)
    partitions = meta.topics.get(args.topic, ())
    offsets = await leader_offsets(broker, meta, args.topic)
    overrides = {c.name: c.value for c in configs if not c.is_default}
    replication = max((len(p.replicas) for p in partitions), default=0)
    tiered = any(c.name == "remote.storage.enable" and c.value == "true" for c in configs)
    tiering = await _tiering(admin, args.topic, [p.partition for p in partitions]) if tiered else {}
    if args.json:
        described = []
        for p in partitions:
            entry = _partition_json(p, offsets.get(p.partition))
            if tiered:
                entry["tiered_storage"] = tiering.get(p.partition)
            described.append(entry)
        _emit_json(
            {
                "topic": args.topic,
                "partition_count": len(partitions),
                "replication_factor": replication,
                "partitions": described,
                "configs": {c.name: c.value for c in configs},
            }
        )
        return 0
    _print(f"Topic: {args.topic}  PartitionCount: {len(partitions)}  ReplicationFactor: {replication}")
    if overrides:
        _print("Configs: " + ",".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    rows = [[*_LEADERSHIP_COLUMNS, *_OFFSET_COLUMNS, *(_TIERING_COLUMNS if tiered else ())]]
    for p in partitions:
        info = offsets.get(p.partition)
        numbers = (
            [str(info.log_start_offset), str(info.high_watermark), str(info.log_end_offset)]
            if info is not None
            else ["-", "-", "-"]
        )
        if tiered:
            state = tiering.get(p.partition) or {}
            numbers += ["-" if state.get(k) is None else str(state[k]) for k in _TIERING_COLUMNS.values()]
        leader = str(p.leader) if p.leader != NO_LEADER else "none"
        rows.append([str(p.partition), leader, str(p.leader_epoch), _ids(p.replicas), _ids(p.isr), *numbers])
    _print(table(rows))
    return 0


async def _tiering(admin: AsyncAdmin, topic: str, partitions: list[int]) -> dict[int, dict[str, Any] | None]:
    """Each partition's ``tiered_storage`` state; None for one the broker does not answer for."""

    async def one(partition: int) -> dict[str, Any] | None:
        try:
            return await admin.partition_tiering(topic, partition)
        except TierlogError:
            return None

    states = await asyncio.gather(*(one(p) for p in partitions))
    return dict(zip(partitions, states, strict=True))


def _ids(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values) or "-"


def _partition_json(p: PartitionLeadership, info: PartitionInfo | None) -> dict[str, Any]:
    """One partition of ``topics describe --json``; offsets are null when its leader cannot answer."""
    return {
        "partition": p.partition,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "log_start_offset": info.log_start_offset if info else None,
        "high_watermark": info.high_watermark if info else None,
        "log_end_offset": info.log_end_offset if info else None,
    }


async def run_groups(args: argparse.Namespace, admin: AsyncAdmin) -> int:
    if args.action == "list":
        groups = await admin.list_groups()
        if args.json:
            _emit_json(groups)
        elif groups:
            _print(table([["GROUP", "STATE"], *([g["group_id"], g["state"]] for g in groups)]))
        return 0
    group = await admin.describe_group(args.group)
    if args.json:
        _emit_json(group)
        return 0
    members = group.get("members", [])
    _print(
        f"Group: {group['group_id']}  State: {group['state']}  Generation: {group['generation']}  "
        f"Strategy: {group['protocol']}  Members: {len(members)}"
    )
    rows = [["TOPIC", "PARTITION", "COMMITTED-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"]]
    for lag in group.get("lag", []):
        committed = lag["committed_offset"]
        rows.append(
            [
                lag["topic"],
                str(lag["partition"]),
                str(committed) if committed >= 0 else "-",
                str(lag["log_end_offset"]),
                str(lag["lag"]),
                lag.get("member_id") or "-",
            ]
        )
    _print(table(rows))
    return 0
