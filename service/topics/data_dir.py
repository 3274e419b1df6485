"""Topic names, partition directories and the data directory's files; the state format older single
brokers wrote.

A broker keeps its topics in the cluster's metadata store (a cluster of one:
``<data-dir>/cluster-metadata.json``, see :mod:`tierlog.service.cluster.local_store`). Before that, a
broker without ``metadata.uri`` kept them in ``<data-dir>/tierlog-state.json`` (:class:`BrokerState`,
replaced atomically: temporary file, fsync, rename, directory fsync); :func:`load_state` reads such a file
for its one-time import (:mod:`tierlog.service.cluster.legacy_state`); :func:`save_state` writes one.
Partition directories are ``<data-dir>/<topic>-<partition>``; a topic name cannot contain a path separator,
so nothing a client sends can leave the data directory.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.tiering.log.topic_names import MAX_TOPIC_NAME, TOPIC_NAME_PATTERN, topic_name_problem
from tierlog.wire.errors import CorruptRecordError, InvalidConfigError

__all__ = [
    "CLEAN_SHUTDOWN_MARKER",
    "CLUSTER_METADATA_FILE",
    "STATE_FILE",
    "BrokerState",
    "TopicRecord",
    "load_state",
    "new_cluster_id",
    "partition_dir",
    "save_state",
    "suffixed_dir_name",
    "topic_name_problem",
    "validate_topic_name",
    "MAX_TOPIC_NAME",
    "TOPIC_NAME_PATTERN",
]

log = logging.getLogger("tierlog.broker")

STATE_FILE = "tierlog-state.json"  # written by older single brokers; imported once at start-up
#: A broker's local metadata store without ``metadata.uri`` (a cluster of one); see ``LocalMetadataStore``.
CLUSTER_METADATA_FILE = "cluster-metadata.json"
CLEAN_SHUTDOWN_MARKER = ".tierlog_cleanshutdown"
STATE_VERSION = 1
PARTITION_DIR = re.compile(r"(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)")
DELETED_DIR = re.compile(r"[a-zA-Z0-9._-]+-\d+\.[0-9a-f]{32}-delete")


@dataclass(slots=True)
class TopicRecord:
    """What is persisted about one topic: its partition count and its config overrides only."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(slots=True)
class BrokerState:
    """The whole persisted broker state."""

    cluster_id: str
    broker_id: int = 0
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    #: Start of the next block of producer ids this broker could take; every id below it was possibly
    #: issued. Absent from files written before producer ids existed: 0.
    next_producer_id_block: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "cluster_id": self.cluster_id,
            "broker_id": self.broker_id,
            "next_producer_id_block": self.next_producer_id_block,
            "topics": {
                name: {"topic_id": rec.topic_id, "partitions": rec.partitions, "configs": dict(rec.configs)}
                for name, rec in sorted(self.topics.items())
            },
        }

    @classmethod
    def from_json(cls, doc: Any) -> BrokerState:
        """Raises: CorruptRecordError when the document is not a state this version understands."""
        try:
            if doc["version"] != STATE_VERSION:
                raise CorruptRecordError(f"unsupported broker state version {doc['version']!r}")
            topics = {
                str(name): TopicRecord(
                    name=str(name),
                    partitions=int(rec["partitions"]),
                    configs={str(k): str(v) for k, v in rec["configs"].items()},
                    topic_id=str(rec["topic_id"]),
                )
                for name, rec in doc["topics"].items()
            }
            next_block = int(doc.get("next_producer_id_block", 0))
            if next_block < 0:
                raise CorruptRecordError(f"negative next_producer_id_block {next_block}")
            return cls(
                cluster_id=str(doc["cluster_id"]),
                broker_id=int(doc["broker_id"]),
                topics=topics,
                next_producer_id_block=next_block,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CorruptRecordError(f"malformed broker state: {err!r}") from err


def new_cluster_id() -> str:
    """A random 22-character URL-safe id, the form Kafka uses for cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def validate_topic_name(name: object) -> str:
    """Check ``name`` against Kafka's topic name rule (:func:`topic_name_problem`) and return it. Pure.

    Raises:
        InvalidConfigError (400, 40002): empty, ``.`` or ``..``, longer than 249 characters, or a character
            other than ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    problem = topic_name_problem(name)
    if problem is not None:
        raise InvalidConfigError(problem)
    assert isinstance(name, str)
    return name


MAX_DIR_NAME = 255  # bytes in one file name on common file systems (ext4, xfs, APFS)


def suffixed_dir_name(topic: str, partition: int, kind: str) -> str:
    """``<topic>-<partition>.<uuid>-<kind>`` (``kind`` is ``delete`` or ``stray``), with the topic cut so
    the name fits in 255 bytes: a 249-character topic plus the suffix would not (Kafka's
    ``logDeleteDirName`` cuts it the same way). Pure."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-{kind}"
    return topic[: MAX_DIR_NAME - len(suffix)] + suffix


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """``<data-dir>/<topic>-<partition>``. ``topic`` must already be a valid name."""
    return data_dir / f"{topic}-{partition}"


def load_state(data_dir: Path) -> BrokerState | None:
    """Read the persisted state, or ``None`` when the data directory has none yet. Blocking I/O.

    Raises:
        CorruptRecordError: the file exists but is not valid state.
        OSError: it cannot be read.
    """
    path = data_dir / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise CorruptRecordError(f"{path} is not valid JSON: {err}") from err
    return BrokerState.from_json(doc)


def save_state(data_dir: Path, state: BrokerState) -> None:
    """Replace the persisted state atomically and durably. Blocking I/O; idempotent.

    Not safe to call concurrently for the same directory (the broker serialises calls under its lock).
    Raises: OSError.
    """
    path = data_dir / STATE_FILE
    tmp = data_dir / f"{STATE_FILE}.tmp"
    payload = json.dumps(state.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    with tmp.open("wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(data_dir)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename or create inside it is durable. Blocking I/O; idempotent."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_marker(path: Path) -> None:
    """Create an empty marker file durably. Blocking I/O; idempotent."""
    with path.open("wb") as fh:
        os.fsync(fh.fileno())
    fsync_dir(path.parent)


def take_marker(path: Path) -> bool:
    """Whether the marker file exists; removes it durably if so. Blocking I/O. Raises OSError."""
    if not path.exists():
        return False
    path.unlink()
    fsync_dir(path.parent)
    return True


def sweep_data_dir(data_dir: Path, expected: set[str]) -> list[Path]:
    """Set aside partition directories of no known topic; list leftovers of deleted topics.

    A directory named like a partition (``<topic>-<n>``) that is not in ``expected`` is renamed to
    ``<name>.<uuid>-stray`` and kept for an operator. Returns the ``*-delete`` directories, which the
    caller removes. Blocking I/O. Raises OSError.
    """
    stale: list[Path] = []
    for entry in sorted(data_dir.iterdir()):
        if not entry.is_dir():
            continue
        if DELETED_DIR.fullmatch(entry.name):
            stale.append(entry)
        elif PARTITION_DIR.fullmatch(entry.name) and entry.name not in expected:
            match = PARTITION_DIR.fullmatch(entry.name)
            assert match is not None
            stray = entry.with_name(suffixed_dir_name(match["topic"], int(match["partition"]), "stray"))
            log.warning("partition directory %s belongs to no topic: renamed to %s", entry.name, stray.name)
            entry.rename(stray)
    return stale


def rename_durably(source: Path, target: Path) -> None:
    """Rename within one directory and fsync it. Blocking I/O. Raises OSError (FileNotFoundError)."""
    os.rename(source, target)
    fsync_dir(source.parent)


def remove_tree(path: Path) -> None:
    """Remove a directory tree, ignoring errors (a later start retries ``*-delete`` leftovers)."""
    shutil.rmtree(path, ignore_errors=True)
