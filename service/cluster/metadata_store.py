"""The metadata store interface: a small, etcd-shaped key-value store with transactions, leases and watches.

Cluster metadata (broker registrations, the controller, topics, partition states) lives in one store. Two
implementations pass one contract suite (``tests/integration/cluster/test_store_contract.py``):

* :class:`~tierlog.service.cluster.local_store.LocalMetadataStore`: in-process, optionally persisted to one
  JSON file (``metadata.uri=file:///path``: one broker on the cluster code path without etcd; in-process
  clusters and unit tests);
* :class:`~tierlog.service.cluster.etcd_store.EtcdMetadataStore`: a real etcd cluster through ``aetcd``.

The contract, shared by both:

* Keys are ``str`` (relative to the store's prefix, which the implementation adds); values are ``bytes``.
* Every successful write advances one store-wide ``revision`` (int, starts at 1 for an empty store and only
  grows). A key's ``mod_revision`` is the revision of its last write, ``create_revision`` of its creation,
  ``version`` the number of writes since it was created (1 for a new key).
* :meth:`MetadataStore.commit` is the only write: it checks every :class:`Compare` and, only if all hold,
  applies every operation atomically under one new revision. Nothing is applied when a compare fails. This
  is how every decision is made "conditioned on what it read", and how epochs fence stale actors: a writer
  compares the key it was elected under (the controller key, a partition's state) against the
  ``mod_revision`` it read.
* A lease expires ``ttl`` seconds after it was granted or last kept alive; when it expires (or is revoked)
  every key attached to it is deleted, as one write, and watchers see the deletes.
* :meth:`MetadataStore.watch` yields every change under a prefix with ``mod_revision >= start_revision``,
  in revision order, without gaps, until the iterator is closed or the store is closed.

Errors: every method raises :class:`MetadataStoreError` (an ``UnavailableError``, retriable) when the store
cannot be reached or answers an error; a caller never sees a vendor exception.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal

from tierlog.wire.errors import UnavailableError

__all__ = [
    "Compare",
    "Delete",
    "KeyValue",
    "LeaseExpiredError",
    "LeaseTime",
    "MetadataStore",
    "MetadataStoreError",
    "Op",
    "Put",
    "WatchEvent",
]


class MetadataStoreError(UnavailableError):
    """The metadata store could not be reached or failed the request (retriable; nothing is known to have
    been written unless a later read shows it)."""


class LeaseExpiredError(MetadataStoreError):
    """The lease is unknown to the store: it expired or was revoked. Its keys are gone."""


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as read: its value and its revisions."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0  # 0: attached to no lease


@dataclass(frozen=True, slots=True)
class LeaseTime:
    """A lease's TTL as granted and the whole seconds left of it (rounded down, as etcd answers): a lease
    kept alive every heartbeat shows ``remaining_s`` of ``granted_s - 1`` or close to it."""

    granted_s: int
    remaining_s: int

    @property
    def silent_s(self) -> int:
        """Whole seconds the lease has certainly gone without a keep-alive (a lower bound)."""
        return max(0, self.granted_s - self.remaining_s - 1)


@dataclass(frozen=True, slots=True)
class Compare:
    """A transaction condition: ``key``'s ``mod_revision`` equals ``mod_revision``.

    ``mod_revision=0`` means "the key does not exist".
    """

    key: str
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Put:
    """Set ``key`` to ``value``, attached to ``lease`` (0: none). Attaching to an expired lease fails the
    whole commit with :class:`LeaseExpiredError`."""

    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete ``key`` (and, with ``prefix``, every key starting with it). Deleting nothing is no error."""

    key: str
    prefix: bool = False


Op = Put | Delete


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change seen by a watch. ``value`` is empty for a delete; ``mod_revision`` is the revision of the
    write (for a delete: the revision at which the key was deleted)."""

    kind: Literal["put", "delete"]
    key: str
    value: bytes
    mod_revision: int


class MetadataStore(abc.ABC):
    """A key-value store with compare-and-commit transactions, leases and watches (see the module doc).

    Every coroutine is safe to call concurrently from the event loop the store was started on.
    """

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (or load the persisted file). Idempotent. Raises MetadataStoreError."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop every watch and release connections. Leases are not revoked (they expire). Idempotent."""

    @abc.abstractmethod
    async def get(self, key: str) -> KeyValue | None:
        """The key, or ``None`` when it does not exist. Raises MetadataStoreError."""

    @abc.abstractmethod
    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key starting with ``prefix``, sorted by key, and the store revision the read saw (watch from
        ``revision + 1`` to see every later change). Raises MetadataStoreError."""

    @abc.abstractmethod
    async def commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int | None:
        """Apply ``ops`` atomically if every compare holds: the new revision; else ``None`` and nothing
        changed. ``ops`` empty with compares holding returns the current revision.

        Raises: LeaseExpiredError (a Put names an expired lease; nothing applied), MetadataStoreError
        (also, before any compare is looked at, for ops that write one key twice: two puts of it, or a put
        inside a range the same commit deletes; etcd refuses those, and so does the local store).
        """

    @abc.abstractmethod
    async def grant_lease(self, ttl_seconds: int) -> int:
        """A new lease id (> 0) that expires ``ttl_seconds`` from now unless kept alive. Raises
        MetadataStoreError."""

    @abc.abstractmethod
    async def keep_alive(self, lease: int) -> None:
        """Restart the lease's TTL. Raises: LeaseExpiredError (it is gone), MetadataStoreError."""

    @abc.abstractmethod
    async def revoke_lease(self, lease: int) -> None:
        """Expire the lease now, deleting its keys. Idempotent (an unknown lease is no error). Raises
        MetadataStoreError."""

    async def lease_time(self, lease: int) -> LeaseTime:
        """How long ``lease`` has left (etcd's LeaseTimeToLive). Raises LeaseExpiredError (it is gone),
        MetadataStoreError (also for a store that cannot tell: this default)."""
        raise MetadataStoreError(f"{type(self).__name__} cannot tell the time left of lease {lease}")

    @abc.abstractmethod
    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Changes under ``prefix`` from ``start_revision`` on (see the module doc). Close the iterator
        (``aclose``) to stop watching. Iteration raises MetadataStoreError when the watch breaks (the
        caller re-reads with :meth:`range` and watches again); a ``start_revision`` older than the store
        keeps (compacted) also raises it."""
