"""An in-process :class:`~tierlog.service.cluster.metadata_store.MetadataStore`, optionally persisted to one
JSON file.

It is the reference behaviour of the store contract: unit tests, in-process clusters (several brokers
sharing one instance), a broker started without ``metadata.uri`` (a cluster of one, persisted in
``<data-dir>/cluster-metadata.json``) and one with ``metadata.uri=file:///path`` use
it. Everything runs on the
event loop the store was started on; nothing here is thread-safe.

Leases expire by the injected clock. Expiry is checked at the start of every operation; with the system
clock a small background task (owned by :meth:`LocalMetadataStore.start` / :meth:`~LocalMetadataStore.close`)
also expires leases on time. With a :class:`~tierlog.tiering.log.ManualClock` a test advances the clock and
calls :meth:`LocalMetadataStore.expire_leases` (or any operation), so lease expiry needs no sleeping.

Persistence (``path`` given): a commit that changes a key without a lease writes the keys without a lease
and the revision counter to ``path`` atomically (temporary file, fsync, rename, directory fsync), off the
event loop, before the change is applied, so a failed write changes nothing. Leases
and the keys attached to them are session state: they die with the process. The watch history is kept in
memory only (bounded), so after a reopen a watch must start after the loaded revision.

File layout (UTF-8 JSON, one key a line, sorted by key)::

    {"format": 1, "revision": 12, "keys": [
    {"key": "cluster/id", "value": "<base64>", "create_revision": 2, "mod_revision": 2, "version": 1},
    ...
    ]}

A key's line is rendered once per revision of it and kept, so a commit renders only the keys it changes
(the file is rewritten whole: one rename makes it atomic).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import fcntl
import json
import os
from collections import deque
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    KeyValue,
    LeaseExpiredError,
    LeaseTime,
    MetadataStore,
    MetadataStoreError,
    Op,
    Put,
    WatchEvent,
)
from tierlog.tiering.log.clock import Clock, SystemClock
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import storage_error

__all__ = ["LocalMetadataStore", "read_snapshot"]

_FORMAT = 1
_Stamp = tuple[int, int, int, bytes]  # create_revision, mod_revision, version, value of a rendered key
_REAPER_MAX_WAIT_S = 1.0


@dataclass(slots=True)
class _Lease:
    ttl_ms: int
    deadline_ms: int
    keys: set[str] = field(default_factory=set)


class _Watcher:
    """One watch's queue of event batches (one batch per revision). ``None`` ends the watch (store closed);
    a :class:`MetadataStoreError` breaks it."""

    def __init__(self, prefix: str, start_revision: int, limit: int) -> None:
        self.prefix = prefix
        self.start_revision = start_revision
        self.limit = limit
        self.queue: asyncio.Queue[list[WatchEvent] | MetadataStoreError | None] = asyncio.Queue()
        self.done = False

    def offer(self, events: list[WatchEvent]) -> None:
        if self.done:
            return
        mine = [e for e in events if e.key.startswith(self.prefix) and e.mod_revision >= self.start_revision]
        if not mine:
            return
        if self.queue.qsize() >= self.limit:
            self.end(
                MetadataStoreError(f"watch of {self.prefix!r} fell more than {self.limit} revisions behind")
            )
            return
        self.queue.put_nowait(mine)

    def end(self, reason: MetadataStoreError | None) -> None:
        if not self.done:
            self.done = True
            self.queue.put_nowait(reason)


class LocalMetadataStore(MetadataStore):
    """The metadata store in this process (see the module doc).

    ``history_limit`` bounds both the revisions kept for watches that start in the past (an older start
    raises :class:`MetadataStoreError`, as a compacted etcd does) and how far a watcher may fall behind
    before its watch breaks.
    """

    def __init__(
        self, path: Path | None = None, *, clock: Clock | None = None, history_limit: int = 10_000
    ) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, got {history_limit}")
        self._path = path
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._history_limit = history_limit
        self._kv: dict[str, KeyValue] = {}
        self._revision = 1
        self._compacted = 0  # events of revisions <= this one are no longer kept
        self._history: deque[tuple[int, list[WatchEvent]]] = deque()
        self._leases: dict[int, _Lease] = {}
        self._next_lease = 1
        self._watchers: set[_Watcher] = set()
        self._started = False
        self._closed = False
        self._persist_lock = asyncio.Lock()
        self._commit_lock = asyncio.Lock()  # one commit at a time between its compares and its apply
        self._persisted_revision = 0
        self._lines: dict[str, tuple[_Stamp, str]] = {}  # key -> (what it was rendered from, its line)
        self._leases_changed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._lock_fd: int | None = None  # the lock on <path>.lock while started

    @property
    def revision(self) -> int:
        """The current store revision."""
        return self._revision

    # lifecycle

    async def start(self) -> None:
        """Load the file (when ``path`` is given and it exists) and, with the system clock, start the lease
        reaper. Idempotent. Raises MetadataStoreError (unreadable or corrupt file, or the store is closed)."""
        if self._closed:
            raise MetadataStoreError("the metadata store is closed")
        if self._started:
            return
        if self._path is not None:
            self._lock_fd = await asyncio.to_thread(_lock_file, self._path)
            doc = await asyncio.to_thread(_read_file, self._path)
            if doc is not None:
                self._load(doc)
        self._started = True
        if isinstance(self._clock, SystemClock):
            self._reaper = asyncio.create_task(self._reap(), name="metadata-lease-reaper")

    async def close(self) -> None:
        """End every watch (their iterators stop) and the lease reaper, and write the final revision (lease
        expiries are not written as they happen). Idempotent. Raises MetadataStoreError when that write
        fails (the store is closed all the same)."""
        if self._closed:
            return
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for watcher in list(self._watchers):
            watcher.end(None)
        self._watchers.clear()
        try:
            if self._started:
                await self._persist()
        finally:
            fd, self._lock_fd = self._lock_fd, None
            if fd is not None:
                os.close(fd)  # releases the lock

    # reads

    async def get(self, key: str) -> KeyValue | None:
        self._check_open()
        self.expire_leases()
        return self._kv.get(key)

    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        self._check_open()
        self.expire_leases()
        found = [kv for key, kv in sorted(self._kv.items()) if key.startswith(prefix)]
        return found, self._revision

    # writes

    async def commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int | None:
        """See :meth:`MetadataStore.commit`. With a file, a commit that changes what the file holds (a key
        without a lease) is written before it is applied: when the write fails nothing changes and it
        raises MetadataStoreError, or InsufficientStorageError (507) when the disk is full. A commit of
        leased keys only (registrations, the controller key) writes nothing."""
        self._check_open()
        _check_distinct(ops)
        async with self._commit_lock:
            self.expire_leases()
            for compare in compares:
                kv = self._kv.get(compare.key)
                if (kv.mod_revision if kv is not None else 0) != compare.mod_revision:
                    return None
            for op in ops:
                if isinstance(op, Put) and op.lease != 0 and op.lease not in self._leases:
                    raise LeaseExpiredError(
                        f"lease {op.lease} is unknown (expired or revoked); nothing applied"
                    )
            if self._path is not None:
                await self._write_ahead(ops)  # raises with nothing applied when the file cannot be written
            events = self._apply(ops)
        if not events:
            return self._revision
        return events[0].mod_revision

    async def grant_lease(self, ttl_seconds: int) -> int:
        """A new lease. Raises ValueError for ``ttl_seconds < 1``, MetadataStoreError when closed."""
        self._check_open()
        if ttl_seconds < 1:
            raise ValueError(f"a lease TTL must be at least 1 s, got {ttl_seconds}")
        self.expire_leases()
        lease_id = self._next_lease
        self._next_lease += 1
        ttl_ms = ttl_seconds * 1000
        self._leases[lease_id] = _Lease(ttl_ms, self._clock.now_ms() + ttl_ms)
        self._leases_changed.set()
        return lease_id

    async def keep_alive(self, lease: int) -> None:
        self._check_open()
        self.expire_leases()
        held = self._leases.get(lease)
        if held is None:
            raise LeaseExpiredError(f"lease {lease} is unknown (expired or revoked)")
        held.deadline_ms = self._clock.now_ms() + held.ttl_ms
        self._leases_changed.set()

    async def lease_time(self, lease: int) -> LeaseTime:
        self._check_open()
        self.expire_leases()
        held = self._leases.get(lease)
        if held is None:
            raise LeaseExpiredError(f"lease {lease} is unknown (expired or revoked)")
        left_ms = max(0, held.deadline_ms - self._clock.now_ms())
        return LeaseTime(held.ttl_ms // 1000, left_ms // 1000)

    async def revoke_lease(self, lease: int) -> None:
        self._check_open()
        self.expire_leases()
        self._drop_lease(lease)  # only leased keys go: the file does not change

    def expire_leases(self) -> int:
        """Expire every lease whose deadline has passed by the clock, deleting its keys (one revision per
        lease, in deadline order); the number of leases expired. Called by every operation; tests that
        drive a ManualClock call it after advancing. Idempotent; never raises."""
        now = self._clock.now_ms()
        due = sorted(
            (held.deadline_ms, lease) for lease, held in self._leases.items() if held.deadline_ms <= now
        )
        for _, lease in due:
            self._drop_lease(lease)
        return len(due)

    # watches

    def watch(self, prefix: str, start_revision: int) -> AsyncGenerator[WatchEvent, None]:
        """See :meth:`MetadataStore.watch`; an async generator, so ``aclose`` stops it."""
        return self._watch(prefix, max(start_revision, 1))

    async def _watch(self, prefix: str, start_revision: int) -> AsyncGenerator[WatchEvent, None]:
        self._check_open()
        self.expire_leases()
        if start_revision <= self._compacted:
            raise MetadataStoreError(
                f"cannot watch from revision {start_revision}: revisions <= {self._compacted} are compacted"
            )
        # The replay and the registration happen in one step of the event loop: no write falls between them.
        watcher = _Watcher(prefix, start_revision, self._history_limit)
        for _, events in self._history:
            watcher.offer(events)
        self._watchers.add(watcher)
        try:
            while True:
                item = await watcher.queue.get()
                if item is None:
                    return
                if isinstance(item, MetadataStoreError):
                    raise item
                for event in item:
                    yield event
        finally:
            watcher.done = True
            self._watchers.discard(watcher)

    # internals

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataStoreError("the metadata store is closed")
        if not self._started:
            raise MetadataStoreError("the metadata store is not started (call start() first)")

    def _apply(self, ops: Sequence[Op]) -> list[WatchEvent]:
        """Apply ``ops`` under the next revision (advanced only when something changed); the events."""
        revision = self._revision + 1
        events: list[WatchEvent] = []
        for op in ops:
            if isinstance(op, Put):
                events.append(self._put(op, revision))
            else:
                events.extend(self._delete(op, revision))
        if events:
            self._record(revision, events)
        return events

    def _put(self, op: Put, revision: int) -> WatchEvent:
        old = self._kv.get(op.key)
        if old is not None and old.lease != 0:
            self._detach(old)
        if op.lease != 0:
            self._leases[op.lease].keys.add(op.key)
        created = old.create_revision if old is not None else revision
        version = old.version + 1 if old is not None else 1
        self._kv[op.key] = KeyValue(op.key, op.value, created, revision, version, op.lease)
        return WatchEvent("put", op.key, op.value, revision)

    def _delete(self, op: Delete, revision: int) -> list[WatchEvent]:
        if op.prefix:
            keys = sorted(key for key in self._kv if key.startswith(op.key))
        else:
            keys = [op.key] if op.key in self._kv else []
        for key in keys:
            old = self._kv.pop(key)
            if old.lease != 0:
                self._detach(old)
        return [WatchEvent("delete", key, b"", revision) for key in keys]

    def _detach(self, kv: KeyValue) -> None:
        held = self._leases.get(kv.lease)
        if held is not None:
            held.keys.discard(kv.key)

    def _drop_lease(self, lease: int) -> None:
        held = self._leases.pop(lease, None)
        if held is None:
            return
        self._leases_changed.set()
        self._apply([Delete(key) for key in sorted(held.keys)])

    def _record(self, revision: int, events: list[WatchEvent]) -> None:
        self._revision = revision
        self._history.append((revision, events))
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft()[0]
        for watcher in list(self._watchers):
            watcher.offer(events)

    async def _persist(self) -> None:
        """Write a snapshot that includes the current revision, unless one already has. Writes happen one
        at a time, in revision order. Raises MetadataStoreError (the write failed; the change stays in
        memory and the next write retries the whole snapshot)."""
        if self._path is None:
            return
        wanted = self._revision
        async with self._persist_lock:
            if self._persisted_revision >= wanted:
                return
            revision, text = self._revision, self._snapshot()
            try:
                await asyncio.to_thread(_write_atomically, self._path, text)
            except OSError as err:
                raise MetadataStoreError(f"cannot write the metadata file {self._path}: {err}") from err
            self._persisted_revision = revision

    async def _write_ahead(self, ops: Sequence[Op]) -> None:
        """Write the file as it will be once ``ops`` are applied at the next revision, when they change a
        key without a lease. Raises MetadataStoreError, InsufficientStorageError."""
        before = {key: kv for key, kv in self._kv.items() if kv.lease == 0}
        after = dict(before)
        revision = self._revision + 1
        for op in ops:
            if isinstance(op, Put):
                old = self._kv.get(op.key)
                if op.lease != 0:
                    after.pop(op.key, None)
                    continue
                created = old.create_revision if old is not None else revision
                version = old.version + 1 if old is not None else 1
                after[op.key] = KeyValue(op.key, op.value, created, revision, version)
            else:
                for key in [k for k in after if (k.startswith(op.key) if op.prefix else k == op.key)]:
                    del after[key]
        path = self._path
        if after == before or path is None:
            return
        text = _render(after, revision, self._lines)
        async with self._persist_lock:
            try:
                await asyncio.to_thread(_write_atomically, path, text)
            except OSError as err:
                if err.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise storage_error(f"writing the metadata file {self._path}", err) from err
                raise MetadataStoreError(f"cannot write the metadata file {self._path}: {err}") from err
            self._persisted_revision = max(self._persisted_revision, revision)

    def _snapshot(self) -> str:
        return _render(self._kv, self._revision, self._lines)

    def _load(self, doc: Any) -> None:
        try:
            if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
                raise ValueError(f"not a format {_FORMAT} metadata file")
            revision = int(doc["revision"])
            kv: dict[str, KeyValue] = {}
            for item in doc["keys"]:
                key = str(item["key"])
                entry = KeyValue(
                    key,
                    base64.b64decode(item["value"], validate=True),
                    int(item["create_revision"]),
                    int(item["mod_revision"]),
                    int(item["version"]),
                )
                if not 0 < entry.create_revision <= entry.mod_revision <= revision or entry.version < 1:
                    raise ValueError(f"key {key!r} has inconsistent revisions")
                kv[key] = entry
        except (KeyError, TypeError, ValueError) as err:
            raise MetadataStoreError(f"the metadata file {self._path} is corrupt: {err}") from err
        self._kv = kv
        self._revision = revision
        self._persisted_revision = revision
        self._compacted = revision if revision > 1 else 0

    async def _reap(self) -> None:
        """Expire leases on time by the system clock."""
        while True:
            self._leases_changed.clear()
            self.expire_leases()
            deadlines = [held.deadline_ms for held in self._leases.values()]
            wait_s = _REAPER_MAX_WAIT_S
            if deadlines:
                wait_s = min(wait_s, max(0.0, (min(deadlines) - self._clock.now_ms()) / 1000))
            await wait_signalled(self._leases_changed, wait_s)


def read_snapshot(path: Path) -> dict[str, bytes] | None:
    """The keys and values the file ``path`` holds (``None``: no such file), read without taking its lock:
    a consistent snapshot even while a broker uses it (every write is a rename). Blocking; read-only.
    Raises MetadataStoreError (unreadable or corrupt)."""
    doc = _read_file(path)
    if doc is None:
        return None
    store = LocalMetadataStore(path)
    store._load(doc)
    return {key: kv.value for key, kv in store._kv.items()}


def _render(kvs: Mapping[str, KeyValue], revision: int, lines: dict[str, tuple[_Stamp, str]]) -> str:
    """The file's text for the keys without a lease among ``kvs`` at ``revision``. ``lines`` caches each
    key's line with what it was rendered from (revisions, version and value: a write-ahead that failed
    may have rendered another value at the same revision); entries of keys not in ``kvs`` are dropped."""
    rendered = []
    for key, kv in sorted(kvs.items()):
        if kv.lease != 0:
            continue
        stamp = (kv.create_revision, kv.mod_revision, kv.version, kv.value)
        cached = lines.get(key)
        if cached is None or cached[0] != stamp:
            item = {
                "key": kv.key,
                "value": base64.b64encode(kv.value).decode("ascii"),
                "create_revision": kv.create_revision,
                "mod_revision": kv.mod_revision,
                "version": kv.version,
            }
            cached = lines[key] = (stamp, json.dumps(item))
        rendered.append(cached[1])
    if len(lines) > len(rendered):
        for key in [key for key in lines if key not in kvs]:
            del lines[key]
    head = json.dumps({"format": _FORMAT, "revision": revision})[:-1]
    return head + ', "keys": [\n' + ",\n".join(rendered) + "\n]}\n"


def _check_distinct(ops: Sequence[Op]) -> None:
    """Refuse a commit that writes one key twice (two puts, or a put inside a deleted range), as etcd does:
    the same commit must not pass here and fail there. Raises MetadataStoreError."""
    puts: set[str] = set()
    for op in ops:
        if isinstance(op, Put):
            if op.key in puts:
                raise MetadataStoreError(f"a commit puts {op.key!r} twice")
            puts.add(op.key)
    for op in ops:
        if isinstance(op, Delete):
            hit = [key for key in puts if (key.startswith(op.key) if op.prefix else key == op.key)]
            if hit:
                raise MetadataStoreError(f"a commit both puts and deletes {sorted(hit)[0]!r}")


def _read_file(path: Path) -> Any:
    """The parsed file, or None when it does not exist. Blocking. Raises MetadataStoreError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise MetadataStoreError(f"cannot read the metadata file {path}: {err}") from err
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise MetadataStoreError(f"the metadata file {path} is corrupt: {err}") from err


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: temporary file, fsync, rename, directory fsync. Blocking. Raises
    OSError. The file is readable by its owner only (it may hold credential hashes)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text.encode())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _lock_file(path: Path) -> int:
    """Hold an exclusive lock on ``<path>.lock`` for this process: one store (one broker) per metadata file;
    its directory is made if missing. Blocking I/O. Raises MetadataStoreError when another process holds
    it, or it cannot be opened."""
    lock = path.with_name(path.name + ".lock")
    try:
        # the directory may not exist yet (a broker's data directory is made while its logs open)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        raise MetadataStoreError(f"cannot open {lock}: {err}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        raise MetadataStoreError(
            f"{path} is in use by another process: a metadata file serves one broker"
        ) from err
    return fd
