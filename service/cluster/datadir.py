"""What a cluster member's data directory records about itself: ``tierlog-cluster.json``.

The file names the cluster and broker the directory belongs to and the topic id of every topic it holds data
of, so a broker refuses another cluster's or broker's directory and removes the data of topics deleted (or
deleted and re-created under a new id) while it was down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from tierlog.service.topics import data_dir as meta
from tierlog.wire.errors import InvalidConfigError, storage_error

__all__ = ["LocalTopicIds", "partition_dirs"]

log = logging.getLogger("tierlog.cluster.node")


class LocalTopicIds:
    """``<data-dir>/tierlog-cluster.json``: the cluster and broker a data directory belongs to and the id
    of every topic it holds data of. Replaced atomically (temporary file, fsync, rename, directory fsync).
    Event-loop only; writes run in a worker thread, one at a time."""

    FILE = "tierlog-cluster.json"

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / self.FILE
        self.cluster_id = ""
        self.broker_id = -1
        self.topics: dict[str, str] = {}
        self._saved: dict[str, Any] | None = None  # what the file holds, as last read or written
        self._lock = asyncio.Lock()
        self.loaded = False  # load() has run: a save keeps what the file held

    def durable_id(self, name: str) -> str | None:
        """The id of topic ``name`` as the file holds it (None: not recorded, or not written yet)."""
        recorded = None if self._saved is None else self._saved["topics"].get(name)
        return None if recorded is None else str(recorded)

    async def load(self) -> None:
        """Read the file (absent: nothing recorded; malformed: logged and treated as absent). Raises
        UnavailableError when it cannot be read."""
        try:
            text = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
        except FileNotFoundError:
            self.loaded = True
            return
        except OSError as err:
            raise storage_error(f"reading {self.path}", err) from err
        try:
            doc = json.loads(text)
            self.cluster_id = str(doc["cluster_id"])
            self.broker_id = int(doc["broker_id"])
            self.topics = {str(k): str(v) for k, v in doc["topics"].items()}
            self._saved = {
                "version": 1,
                "cluster_id": self.cluster_id,
                "broker_id": self.broker_id,
                "topics": dict(self.topics),
            }
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            log.error("%s is malformed (%s): treating it as absent", self.path, err)
        self.loaded = True

    def check(self, cluster_id: str, broker_id: int) -> None:
        """Raises InvalidConfigError when the directory belongs to another cluster or broker id."""
        if self.cluster_id and self.cluster_id != cluster_id:
            raise InvalidConfigError(
                f"data.dir {self.path.parent} belongs to cluster {self.cluster_id}, not to cluster "
                f"{cluster_id} this metadata.uri holds"
            )
        if self.broker_id >= 0 and self.broker_id != broker_id:
            raise InvalidConfigError(
                f"data.dir {self.path.parent} belongs to broker.id {self.broker_id}, not {broker_id}"
            )

    async def save(self, cluster_id: str, broker_id: int) -> None:
        """Write the file durably, unless it holds this already (also when a write in flight made it so:
        this call then returns once that write is done). Writes are made one at a time, in call order.
        Raises InsufficientStorageError / UnavailableError."""
        self.cluster_id, self.broker_id = cluster_id, broker_id
        doc = {"version": 1, "cluster_id": cluster_id, "broker_id": broker_id, "topics": dict(self.topics)}
        if doc == self._saved:
            return
        async with self._lock:
            if doc == self._saved:
                return
            try:
                await asyncio.to_thread(_write_json, self.path, doc)
            except OSError as err:
                raise storage_error(f"writing {self.path}", err) from err
            self._saved = doc


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    meta.fsync_dir(path.parent)


def partition_dirs(data_dir: Path, topic: str) -> list[Path]:
    """The partition directories ``<topic>-<n>`` of ``topic`` in ``data_dir``. Blocking I/O."""
    found = []
    for entry in data_dir.iterdir():
        match = meta.PARTITION_DIR.fullmatch(entry.name)
        if match is not None and match["topic"] == topic and entry.is_dir():
            found.append(entry)
    return sorted(found)
