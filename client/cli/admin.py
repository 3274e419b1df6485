"""``tierlog topics ...`` and ``tierlog groups ...``: topic administration and group inspection.

Each command is a coroutine taking the parsed arguments and returning the exit code; errors propagate as
typed exceptions for :func:`tierlog.client.cli.main.main` to report.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tierlog.client.admin import AsyncAdmin
from tierlog.tiering.errors import InvalidRequestError

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


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")


def _emit_json(value: Any) -> None:
    _print(json.dumps(value, sort_keys=True))


async def run_topics(args: argparse.Namespace, admin: AsyncAdmin) -> int:
    action = args.action
    if action == "list":
        names = await admin.list_topics(internal=args.internal)
        if args.json:
            _emit_json(names)
        elif names:
            _print("\n".join(names))
        return 0
    if action == "create":
        count = await admin.create_topic(args.topic, args.partitions, parse_configs(args.config))
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
    return await _describe_topic(args, admin)


async def _describe_topic(args: argparse.Namespace, admin: AsyncAdmin) -> int:
    meta = await admin.describe_topic(args.topic)
    configs = await admin.topic_configs(args.topic)
    overrides = {c.name: c.value for c in configs if not c.is_default}
    if args.json:
        _emit_json(
            {
                "topic": meta.topic,
                "partition_count": meta.partition_count,
                "partitions": [
                    {
                        "partition": p.partition,
                        "log_start_offset": p.log_start_offset,
                        "high_watermark": p.high_watermark,
                        "log_end_offset": p.log_end_offset,
                    }
                    for p in meta.partitions
                ],
                "configs": {c.name: c.value for c in configs},
            }
        )
        return 0
    _print(f"Topic: {meta.topic}  PartitionCount: {meta.partition_count}")
    if overrides:
        _print("Configs: " + ",".join(f"{k}={v}" for k, v in sorted(overrides.items())))
    rows = [["PARTITION", "LOG-START-OFFSET", "HIGH-WATERMARK", "LOG-END-OFFSET"]]
    rows += [
        [str(p.partition), str(p.log_start_offset), str(p.high_watermark), str(p.log_end_offset)]
        for p in meta.partitions
    ]
    _print(_table(rows))
    return 0


async def run_groups(args: argparse.Namespace, admin: AsyncAdmin) -> int:
    if args.action == "list":
        groups = await admin.list_groups()
        if args.json:
            _emit_json(groups)
        elif groups:
            _print(_table([["GROUP", "STATE"], *([g["group_id"], g["state"]] for g in groups)]))
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
    _print(_table(rows))
    return 0
