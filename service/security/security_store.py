"""Users and ACLs in the metadata store, watched into immutable snapshots the request path reads lock-free.

The layout of users and ACLs under ``security/`` is :mod:`~tierlog.service.security.store_format`'s (the
names it exports are re-exported here).

:class:`SecurityStore` loads everything under ``security/`` when it starts, then follows a watch from the
revision it read: each change replaces the published snapshots (:attr:`SecurityStore.acls`, the users
mapping) and calls the ``on_user_change`` callbacks. Writes are read-modify-write commits conditioned on the
``mod_revision`` of every key they read (retried a few times on a conflict) and return only once the watch has
applied them, so a caller reads its own write. A malformed value is logged and skipped, never fatal. A broken
watch (etcd restarted, history compacted) is followed by a full reload and a new watch.

Nothing here is thread-safe: use a store from the event loop that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    KeyValue,
    MetadataStore,
    MetadataStoreError,
    Op,
    Put,
    WatchEvent,
)
from tierlog.service.security.acl import AclSnapshot, matches
from tierlog.service.security.model import AclBinding, AclFilter
from tierlog.service.security.scram import ScramCredential, decode_user, encode_user
from tierlog.service.security.store_format import (
    ACLS_PREFIX,
    PREFIX,
    SECURITY_FILE,
    USERS_PREFIX,
    acl_key,
    binding_order,
    bindings_by_key,
    check_user_name,
    decode_acls,
    encode_acls,
    parse_acl_key,
    user_key,
    user_name,
)
from tierlog.service.topics.data_dir import CLUSTER_METADATA_FILE
from tierlog.wire.errors import ConflictError, NotFoundError, UnavailableError

__all__ = [
    "ACLS_PREFIX",
    "PREFIX",
    "SECURITY_FILE",
    "SECURITY_STORE",
    "USERS_PREFIX",
    "SecurityStore",
    "acl_key",
    "binding_order",
    "check_user_name",
    "decode_acls",
    "encode_acls",
    "parse_acl_key",
    "user_key",
]

log = logging.getLogger("tierlog.security.store")

_WRITE_ATTEMPTS = 10
_CONFLICT_BACKOFF_S = 0.005  # doubled per attempt, jittered: concurrent writers of one key spread out
_RELOAD_BACKOFF_S = (0.1, 5.0)
_T = TypeVar("_T")


def _decode_user_or_none(key: str, raw: bytes) -> dict[str, ScramCredential] | None:
    try:
        user_name(key)
        return decode_user(raw) or None
    except ValueError as err:  # UnicodeDecodeError included
        log.error("skipping the malformed user record %s: %s", key, err)
        return None


# ---- the store -------------------------------------------------------------------------------------------


class SecurityStore:
    """Users and ACLs kept in a :class:`MetadataStore` and mirrored in memory (see the module doc).

    ``owns_store``: :meth:`start` starts the metadata store and :meth:`close` closes it. ``apply_timeout_s``
    bounds how long a write waits for the watch to show it (the write itself is done by then).
    """

    def __init__(self, store: MetadataStore, *, owns_store: bool, apply_timeout_s: float = 30.0) -> None:
        self._store = store
        self._owns_store = owns_store
        self._apply_timeout_s = apply_timeout_s
        self._users: Mapping[str, Mapping[str, ScramCredential]] = {}
        self._acl_keys: dict[str, frozenset[AclBinding]] = {}
        self._acls = AclSnapshot()
        self._key_revisions: dict[str, int] = {}  # last revision the watch applied, per key
        self._live: set[str] = set()  # the keys that exist, as the watch last saw them
        self._floor = 0  # every key is applied up to this revision (the last full load)
        self._revision = 0
        self._changed = asyncio.Event()
        self._callbacks: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._loaded = False
        self._loaded_event = asyncio.Event()
        self._closed = False

    @classmethod
    def offline(cls, data_dir: Path) -> SecurityStore:
        """The store of a stopped broker without ``metadata.uri``: its local metadata store
        ``<data_dir>/cluster-metadata.json``, owned (starting it fails while the broker runs)."""
        return cls(LocalMetadataStore(data_dir / CLUSTER_METADATA_FILE), owns_store=True)

    # lifecycle

    async def start(self) -> None:
        """Start the metadata store (when owned), load every user and ACL, and follow the watch. Not
        idempotent: call once.

        Raises:
            MetadataStoreError: the store cannot be reached (an owned store is closed again).
        """
        if self._closed:
            raise MetadataStoreError("the security store is closed")
        try:
            if self._owns_store:
                await self._store.start()
            revision = await self._load()
        except BaseException:
            if self._owns_store:
                with contextlib.suppress(MetadataStoreError):
                    await self._store.close()
            raise
        self._loaded = True
        self._loaded_event.set()
        self._task = asyncio.create_task(self._follow(revision), name="tierlog-security-watch")

    async def close(self) -> None:
        """Stop the watch (pending writes' waits end with UnavailableError) and close an owned store.
        Idempotent. Raises MetadataStoreError when closing an owned store fails."""
        if self._closed:
            return
        self._closed = True
        self._notify()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._owns_store:
            await self._store.close()

    # reads (lock-free snapshots)

    @property
    def loaded(self) -> bool:
        """Whether :meth:`start` has loaded the users and ACLs."""
        return self._loaded

    async def wait_loaded(self) -> None:
        """Wait until :meth:`start` has loaded the users and ACLs (by whoever calls it). Safe to call
        concurrently; never raises."""
        await self._loaded_event.wait()

    @property
    def acls(self) -> AclSnapshot:
        """Every ACL, as the watch last saw them (an immutable snapshot)."""
        return self._acls

    @property
    def revision(self) -> int:
        """The store revision the snapshots reflect."""
        return self._revision

    async def sync(self) -> None:
        """Wait until the snapshots show at least what the metadata store holds now (e.g. another
        broker's writes). Safe to call concurrently.

        Raises:
            MetadataStoreError: the store cannot be read.
            UnavailableError: the store closed, or the watch did not get there within the apply timeout.
        """
        kvs, revision = await self._store.range(PREFIX)
        present = {kv.key: kv.mod_revision for kv in kvs}

        def caught_up() -> bool:
            if self._floor >= revision:
                return True
            if not self._visible(present):
                return False
            return all(key in present or self._key_revisions.get(key, 0) > revision for key in self._live)

        await self._wait_until(caught_up)

    def user(self, name: str) -> dict[str, ScramCredential] | None:
        """User ``name``'s credentials by mechanism (a copy), or None when there is no such user."""
        found = self._users.get(name)
        return dict(found) if found is not None else None

    def user_names(self) -> list[str]:
        """Every user's name, sorted."""
        return sorted(self._users)

    def on_user_change(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(name)`` whenever user ``name`` is added, changed or removed (on the event loop;
        an exception it raises is logged and ignored)."""
        self._callbacks.append(callback)

    # writes

    async def put_user(self, name: str, credential: ScramCredential) -> bool:
        """Make ``credential`` the only credential of ``name`` (HTTP Basic has one password: a credential of
        another mechanism, made from an older password, is dropped); whether the user is new. Idempotent;
        safe to call concurrently (conflicting writes are retried).

        Raises:
            InvalidRequestError: an invalid user name.
            ConflictError: the key kept changing under every attempt.
            MetadataStoreError / UnavailableError: the store failed, is closed (or not started), or the
                write did not show in time.
        """
        key = user_key(name)

        value = encode_user({credential.mechanism: credential})

        def change(current: Mapping[str, KeyValue | None]) -> tuple[list[Op], bool]:
            kv = current[key]
            created = kv is None or _decode_user_or_none(key, kv.value) is None
            return [Put(key, value)], created

        return await self._update([key], change)

    async def alter_user(
        self, name: str, upserts: Sequence[ScramCredential], deletions: Sequence[str]
    ) -> None:
        """Kafka's AlterUserScramCredentials for one user: set the credential of each upserted mechanism
        and remove each deleted mechanism's, keeping the others (a user left with none is removed), in one
        commit. Safe to call concurrently.

        Raises:
            InvalidRequestError: an invalid user name.
            NotFoundError: a deleted mechanism has no credential (nothing is changed).
            ConflictError, MetadataStoreError, UnavailableError: as :meth:`put_user`.
        """
        key = user_key(name)

        def change(current: Mapping[str, KeyValue | None]) -> tuple[list[Op], None]:
            kv = current[key]
            held = (_decode_user_or_none(key, kv.value) if kv is not None else None) or {}
            for mechanism in deletions:
                if held.pop(mechanism, None) is None:
                    raise NotFoundError(f"Attempt to delete a user credential that does not exist: {name}")
            held.update({c.mechanism: c for c in upserts})
            return [Put(key, encode_user(held)) if held else Delete(key)], None

        await self._update([key], change)

    async def remove_user(self, name: str) -> None:
        """Delete user ``name`` and every credential of it. Safe to call concurrently.

        Raises:
            InvalidRequestError: an invalid user name.
            NotFoundError: there is no such user.
            ConflictError, MetadataStoreError, UnavailableError: as :meth:`put_user`.
        """
        key = user_key(name)

        def change(current: Mapping[str, KeyValue | None]) -> tuple[list[Op], None]:
            if current[key] is None:
                raise NotFoundError(f"User {name} cannot be found.")
            return [Delete(key)], None

        await self._update([key], change)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ``bindings`` (all in one commit). Idempotent: an ACL that exists is no change. Safe to call
        concurrently.

        Raises:
            InvalidRequestError: a binding is invalid (a filter-only pattern, operation or permission, or
                text that is not valid Unicode).
            ConflictError, MetadataStoreError, UnavailableError: as :meth:`put_user`.
        """
        wanted = bindings_by_key(bindings)

        def change(current: Mapping[str, KeyValue | None]) -> tuple[list[Op], None]:
            ops: list[Op] = []
            for key, mine in wanted.items():
                kv = current[key]
                held = _decode_acls_or_empty(kv.key, kv.value) if kv is not None else frozenset()
                if not mine <= held:
                    ops.append(Put(key, encode_acls(held | mine)))
            return ops, None

        await self._update(sorted(wanted), change)

    async def delete_acls(self, f: AclFilter) -> list[AclBinding]:
        """Delete every ACL ``f`` matches (in one commit); the ACLs deleted, sorted. Safe to call
        concurrently; deleting nothing is no error.

        Raises:
            ConflictError, MetadataStoreError, UnavailableError: as :meth:`put_user`.
        """
        self._check_open()
        for attempt in range(_WRITE_ATTEMPTS):
            await _conflict_backoff(attempt)
            kvs, _ = await self._store.range(ACLS_PREFIX)
            deleted: list[AclBinding] = []
            compares: list[Compare] = []
            ops: list[Op] = []
            for kv in kvs:
                held = _decode_acls_or_empty(kv.key, kv.value)
                gone = frozenset(b for b in held if matches(f, b))
                if not gone:
                    continue
                deleted.extend(gone)
                compares.append(Compare(kv.key, kv.mod_revision))
                kept = held - gone
                ops.append(Put(kv.key, encode_acls(kept)) if kept else Delete(kv.key))
            if not ops:
                return []
            written = await self._store.commit(compares, ops)
            if written is not None:
                await self._wait_visible({op.key: written for op in ops})
                return sorted(deleted, key=binding_order)
        raise ConflictError(f"the ACLs kept changing: gave up after {_WRITE_ATTEMPTS} attempts, try again")

    # internals: writing

    async def _update(
        self, keys: Sequence[str], change: Callable[[Mapping[str, KeyValue | None]], tuple[list[Op], _T]]
    ) -> _T:
        """Read ``keys``, commit ``change``'s ops conditioned on what was read (retried on a conflict), and
        wait until the watch shows the result; ``change``'s answer."""
        self._check_open()
        for attempt in range(_WRITE_ATTEMPTS):
            await _conflict_backoff(attempt)
            current = {key: await self._store.get(key) for key in keys}
            ops, answer = change(current)
            if not ops:
                await self._wait_visible({k: kv.mod_revision for k, kv in current.items() if kv is not None})
                return answer
            compares = [Compare(k, kv.mod_revision if kv is not None else 0) for k, kv in current.items()]
            written = await self._store.commit(compares, ops)
            if written is not None:
                await self._wait_visible({op.key: written for op in ops})
                return answer
        raise ConflictError(f"{keys[0]} kept changing: gave up after {_WRITE_ATTEMPTS} attempts, try again")

    def _check_open(self) -> None:
        if self._closed or not self._loaded:
            raise UnavailableError("the security store is " + ("closed" if self._closed else "not started"))

    def _visible(self, wanted: Mapping[str, int]) -> bool:
        return all(self._floor >= r or self._key_revisions.get(k, 0) >= r for k, r in wanted.items())

    async def _wait_visible(self, wanted: Mapping[str, int]) -> None:
        """Wait until the snapshots show every key at (at least) its revision (see :meth:`_wait_until`)."""
        await self._wait_until(lambda: self._visible(wanted))

    async def _wait_until(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()`` holds, checked after every change the watch applies.

        Raises UnavailableError: the store closed, or the watch did not get there within the timeout."""
        try:
            async with asyncio.timeout(self._apply_timeout_s):
                while not done():
                    if self._closed:
                        raise UnavailableError("the security store closed before the change was seen")
                    changed = self._changed
                    await changed.wait()
        except TimeoutError:
            raise UnavailableError(
                f"the change was written but not seen within {self._apply_timeout_s:g} s: the metadata "
                "store's watch is behind or broken"
            ) from None

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # internals: loading and watching

    async def _load(self) -> int:
        """Read everything under ``security/`` into fresh snapshots; the revision read. Raises
        MetadataStoreError."""
        kvs, revision = await self._store.range(PREFIX)
        users: dict[str, Mapping[str, ScramCredential]] = {}
        acl_keys: dict[str, frozenset[AclBinding]] = {}
        for kv in kvs:
            if kv.key.startswith(USERS_PREFIX):
                credentials = _decode_user_or_none(kv.key, kv.value)
                if credentials is not None:
                    users[user_name(kv.key)] = credentials
            elif kv.key.startswith(ACLS_PREFIX):
                held = _decode_acls_or_empty(kv.key, kv.value)
                if held:
                    acl_keys[kv.key] = held
        changed_users = {n for n in users.keys() | self._users.keys() if users.get(n) != self._users.get(n)}
        self._users = users
        self._acl_keys = acl_keys
        self._key_revisions = {kv.key: kv.mod_revision for kv in kvs}
        self._live = {kv.key for kv in kvs}
        self._floor = revision
        self._revision = max(self._revision, revision)
        self._publish_acls()
        self._notify()
        for name in sorted(changed_users):
            self._user_changed(name)
        return revision

    async def _follow(self, revision: int) -> None:
        """Apply the watch's changes; on a broken watch reload and watch again, until cancelled or the
        store ends the watch (closed)."""
        backoff = _RELOAD_BACKOFF_S[0]
        while True:
            try:
                await self._watch_from(revision + 1)
                log.info("the metadata store ended the security watch")
                return
            except MetadataStoreError as err:
                log.warning("the security watch broke (%s): reloading users and ACLs", err)
            while True:
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, _RELOAD_BACKOFF_S[1])
                try:
                    revision = await self._load()
                    break
                except MetadataStoreError as err:
                    log.warning("reloading users and ACLs failed (%s): retrying", err)
            backoff = _RELOAD_BACKOFF_S[0]

    async def _watch_from(self, start_revision: int) -> None:
        events: AsyncIterator[WatchEvent] = self._store.watch(PREFIX, start_revision)
        try:
            async for event in events:
                self._apply(event)
        finally:
            close: Any = getattr(events, "aclose", None)
            if close is not None:
                with contextlib.suppress(MetadataStoreError):
                    await close()

    def _apply(self, event: WatchEvent) -> None:
        key = event.key
        if key.startswith(USERS_PREFIX):
            self._apply_user(event)
        elif key.startswith(ACLS_PREFIX):
            held = _decode_acls_or_empty(key, event.value) if event.kind == "put" else frozenset()
            if held:
                self._acl_keys[key] = held
            else:
                self._acl_keys.pop(key, None)
            self._publish_acls(event.mod_revision)
        self._key_revisions[key] = event.mod_revision
        if event.kind == "put":
            self._live.add(key)
        else:
            self._live.discard(key)
        self._revision = max(self._revision, event.mod_revision)
        self._notify()

    def _apply_user(self, event: WatchEvent) -> None:
        try:
            name = user_name(event.key)
        except ValueError:
            log.error("skipping a user record with a malformed key")
            return
        credentials = _decode_user_or_none(event.key, event.value) if event.kind == "put" else None
        users = dict(self._users)
        if credentials is None:
            if users.pop(name, None) is None:
                return
        else:
            users[name] = credentials
        self._users = users
        self._user_changed(name)

    def _publish_acls(self, revision: int | None = None) -> None:
        bindings = frozenset().union(*self._acl_keys.values())
        self._acls = AclSnapshot(bindings, revision if revision is not None else self._floor)

    def _user_changed(self, name: str) -> None:
        for callback in self._callbacks:
            try:
                callback(name)
            except Exception:
                log.exception("a user-change callback failed for user %s", name)


async def _conflict_backoff(attempt: int) -> None:
    """Before retry ``attempt`` (0: the first try, no wait), wait a jittered, growing moment."""
    if attempt > 0:
        await asyncio.sleep(random.uniform(0, _CONFLICT_BACKOFF_S * 2 ** min(attempt, 6)))


def _decode_acls_or_empty(key: str, raw: bytes) -> frozenset[AclBinding]:
    try:
        return decode_acls(key, raw)
    except ValueError as err:  # UnicodeDecodeError included
        log.error("skipping the malformed ACL record %s: %s", key, err)
        return frozenset()


SECURITY_STORE: web.AppKey[SecurityStore] = web.AppKey("tierlog.security_store", SecurityStore)
