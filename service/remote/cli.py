"""``tierlog tiering``: operator tools for the remote tier.

``tierlog tiering check [--remote-uri URI | --data-dir DIR | --config FILE] [--delete] [--json]``
    Lists objects no manifest references (leaks) and objects a readable segment needs but the bucket
    lacks (missing). Exit 0 when clean, 1 when leaks, missing objects or errors were found, 2 on usage
    errors. ``--delete`` removes the leaks (run it with the brokers writing to that prefix stopped).

``tierlog tiering restore --data-dir DIR [--remote-uri URI] [--topic NAME ...]``
    Recreates, in the broker's metadata (``DIR/cluster-metadata.json``, or the store ``metadata.uri``
    names), the topics the bucket has manifests for and the metadata lacks (with
    ``remote.storage.enable=true``). Run it with the broker stopped; on its next start the broker begins
    each restored partition after the last remote offset. Exit 0 on success, 1 on errors, 2 on usage.

Settings resolve as the broker's do (flag > ``TIERLOG_*`` environment > ``--config`` file > default), so
the remote URI defaults to ``<data-dir>/remote`` and the S3 endpoint to ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tierlog.service.cluster.datadir import LocalTopicIds
from tierlog.service.cluster.legacy_state import import_legacy_state
from tierlog.service.cluster.local_store import read_snapshot
from tierlog.service.cluster.metadata_store import Compare, MetadataStore, Put
from tierlog.service.cluster.model import CLUSTER_ID, TOPICS, TopicAssignment
from tierlog.service.cluster.topics import commit_new_topic
from tierlog.service.remote.restore import restore_missing_topics
from tierlog.service.remote.tier import open_remote_store
from tierlog.service.settings.config import Settings, SettingsError, load_settings
from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.broker import open_metadata_store
from tierlog.tiering.remote.inventory import check, remove_leaks
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy
from tierlog.wire.errors import TierlogError

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tierlog tiering", description="remote tier tools")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, required=True)
    for name, help_text in (
        ("check", "list objects the manifests do not reference, and readable segments' missing objects"),
        ("restore", "recreate topics from the manifests in the remote tier (broker stopped)"),
    ):
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--data-dir", type=Path, help="the broker's data.dir (remote tier default: DIR/remote)"
        )
        sub.add_argument("--remote-uri", help="a directory or s3://bucket/prefix")
        sub.add_argument("--s3-endpoint-url", help="S3 endpoint (default $AWS_ENDPOINT_URL)")
        sub.add_argument("--config", type=Path, metavar="FILE", help="the broker's TOML settings file")
        if name == "check":
            sub.add_argument("--delete", action="store_true", help="delete the leaked objects")
            sub.add_argument("--json", action="store_true", help="print the report as one JSON object")
        else:
            sub.add_argument("--topic", action="append", help="restore only this topic (repeatable)")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run ``tierlog tiering``. Returns the exit code (0 clean, 1 findings or errors, 2 usage)."""
    args = _parser().parse_args(list(argv))
    if args.remote_uri is None and args.data_dir is None and args.config is None:
        sys.stderr.write(
            f"tierlog tiering {args.command}: error: give --remote-uri, --data-dir or --config\n"
        )
        return 2
    flags: dict[str, str] = {}
    for name, value in (
        ("data.dir", args.data_dir),
        ("remote.uri", args.remote_uri),
        ("s3.endpoint.url", args.s3_endpoint_url),
    ):
        if value is not None:
            flags[name] = str(value)
    try:  # the broker's own precedence: flag > TIERLOG_* environment > config file > default
        settings = load_settings(flags, os.environ, args.config)
        if args.command == "restore" and args.data_dir is None and "data.dir" not in settings.sources:
            raise SettingsError("restore needs the broker's data directory: give --data-dir")
    except SettingsError as err:
        sys.stderr.write(f"tierlog tiering {args.command}: error: {err}\n")
        return 2
    try:
        if args.command == "check":
            return asyncio.run(
                _check(
                    settings, delete=args.delete, as_json=args.json, check_topics=args.data_dir is not None
                )
            )
        return asyncio.run(_restore(settings, set(args.topic) if args.topic else None))
    except (TierlogError, OSError) as err:
        sys.stderr.write(f"tierlog tiering {args.command}: error: {err}\n")
        return 1


async def _known_topics(settings: Settings) -> dict[str, int] | None:
    """The topics of the broker's metadata (``None`` when it has none yet). A local metadata file is read
    without its lock (the broker may be running); an old ``tierlog-state.json`` not imported yet counts."""
    uri = settings.metadata_uri
    if uri is not None and uri.scheme != "file":
        store = await _open_offline(settings)
        try:
            kvs, _ = await store.range(TOPICS)
            return _topic_counts({kv.key: kv.value for kv in kvs})
        finally:
            await store.close()
    path = settings.data_dir / meta.CLUSTER_METADATA_FILE if uri is None else uri.path
    assert path is not None
    keys = await asyncio.to_thread(read_snapshot, path)
    if keys is None and uri is None:
        state = await asyncio.to_thread(meta.load_state, settings.data_dir)
        return None if state is None else {name: rec.partitions for name, rec in state.topics.items()}
    return None if keys is None else _topic_counts(keys)


def _topic_counts(keys: dict[str, bytes]) -> dict[str, int]:
    found = [TopicAssignment.decode(k, v) for k, v in keys.items() if k.startswith(TOPICS)]
    return {assignment.name: assignment.partitions for assignment in found}


async def _open_offline(settings: Settings) -> MetadataStore:
    """The broker's metadata store, started, with an old ``tierlog-state.json`` imported as the broker
    would at start. Raises MetadataStoreError (a running broker holds it), CorruptRecordError."""
    store = open_metadata_store(settings)
    await store.start()
    try:
        if settings.metadata_uri is None:
            data_dir = settings.data_dir
            await import_legacy_state(
                store, data_dir / meta.STATE_FILE, settings.broker_id, LocalTopicIds(data_dir)
            )
    except BaseException:
        await store.close()
        raise
    return store


def _retrying(store: ObjectStore, settings: Settings) -> RetryingStore:
    """``store`` retried as the broker retries it: every call bounded by ``remote.retry.deadline.ms``."""
    return RetryingStore(store, RetryPolicy(deadline=settings.remote_retry_deadline_ms / 1000))


async def _check(settings: Settings, *, delete: bool, as_json: bool, check_topics: bool) -> int:
    store = _retrying(await asyncio.to_thread(open_remote_store, settings), settings)
    try:
        known = await _known_topics(settings) if check_topics else None
        report = await check(store, ManifestStore(store), known=known)
        deleted = await remove_leaks(store, report) if delete and report.leaks else 0
    finally:
        await store.close()
    if as_json:
        body = {
            "remote_uri": str(settings.remote_uri),
            "partitions": report.partitions,
            "objects": report.objects,
            "referenced": report.referenced,
            "leaks": [{"key": info.key, "size": info.size} for info in report.leaks],
            "missing": report.missing,
            "errors": report.errors,
            "deleted": deleted,
            "clean": report.clean,
        }
        print(json.dumps(body, sort_keys=True))
    else:
        print(
            f"{settings.remote_uri}: {report.partitions} partitions, {report.objects} objects, "
            f"{report.referenced} referenced segment objects"
        )
        for info in report.leaks:
            print(f"leak {info.key} ({info.size} bytes){' deleted' if deleted else ''}")
        for key in report.missing:
            print(f"missing {key}")
        for error in report.errors:
            print(f"error {error}")
        print("clean" if report.clean else f"{len(report.leaks)} leaks, {len(report.missing)} missing")
    return 0 if report.clean else 1


async def _restore(settings: Settings, only: set[str] | None) -> int:
    await asyncio.to_thread(settings.data_dir.mkdir, parents=True, exist_ok=True)
    metadata = await _open_offline(settings)
    store = _retrying(await asyncio.to_thread(open_remote_store, settings), settings)
    made: dict[str, int] = {}

    async def create(assignment: TopicAssignment) -> bool:
        if not await commit_new_topic(metadata, assignment):
            return False
        made[assignment.name] = assignment.partitions
        return True

    try:
        new_id = meta.new_cluster_id()
        await metadata.commit([Compare(CLUSTER_ID, 0)], [Put(CLUSTER_ID, new_id.encode())])
        kvs, _ = await metadata.range(TOPICS)
        existing = {kv.key.removeprefix(TOPICS) for kv in kvs}
        broker = (settings.broker_id,)
        await restore_missing_topics(
            ManifestStore(store), existing, create, lambda count: [broker] * count, only=only
        )
    finally:
        await store.close()
        await metadata.close()
    for name, partitions in sorted(made.items()):
        print(f"restored topic {name} ({partitions} partitions)")
    if not made:
        print("nothing to restore: every topic in the remote tier exists in the data directory")
    return 0
