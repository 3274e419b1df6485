"""Import of a data directory written before every broker was a cluster member (``tierlog-state.json``,
``tierlog-security.json``).

A broker started without ``metadata.uri`` once kept its topics in ``<data-dir>/tierlog-state.json`` (see
:class:`~tierlog.service.topics.data_dir.BrokerState`): the cluster id, every topic with its id, partition
count
and config overrides, and the start of the next producer id block. It is now a cluster of one on the local
metadata store in its data directory, so at start-up (before the cluster id is made) a state file found
there is imported once:

1. one commit, conditioned on the store having no cluster id yet, puts the cluster id, every topic
   (replicated on this broker only, under its old topic id, with its overrides and its folded-name claim)
   and the producer id block counter; the controller then elects this broker leader of every partition;
2. ``tierlog-cluster.json`` (:class:`~tierlog.service.cluster.datadir.LocalTopicIds`) records the cluster,
   the broker and the topic ids, so the start-up sweep keeps the partition directories as they are;
3. the state file is renamed to ``tierlog-state.json.imported`` (and the directory fsynced).

A start that stops between these steps runs the import again: a store that already holds the file's cluster
id took step 1, so only steps 2 and 3 are repeated. Nothing is lost: the file is renamed only after the store
has committed its content.

Users and ACLs were kept in ``<data-dir>/tierlog-security.json``, a local metadata store of their own; each
of its keys is put into the store unless the store holds it already, then the file is renamed to
``tierlog-security.json.imported`` (:func:`import_legacy_security`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from tierlog.service.cluster.datadir import LocalTopicIds
from tierlog.service.cluster.metadata_store import Compare, MetadataStore, MetadataStoreError, Op, Put
from tierlog.service.cluster.model import CLUSTER_ID, TopicAssignment, topic_key, topic_name_key
from tierlog.service.topics import data_dir as meta
from tierlog.service.topics.producer_ids import NEXT_BLOCK_KEY
from tierlog.wire.errors import CorruptRecordError, InvalidConfigError, storage_error

__all__ = ["IMPORTED_SUFFIX", "import_legacy_security", "import_legacy_state", "legacy_ops"]

log = logging.getLogger("tierlog.cluster.node")

IMPORTED_SUFFIX = ".imported"


def legacy_ops(state: meta.BrokerState, broker_id: int) -> list[Op]:
    """The puts that carry ``state`` into a metadata store, every partition on ``broker_id``. Pure."""
    ops: list[Op] = [Put(CLUSTER_ID, state.cluster_id.encode())]
    for name, record in sorted(state.topics.items()):
        replicas = tuple((broker_id,) for _ in range(record.partitions))
        assignment = TopicAssignment(name, record.topic_id, replicas, dict(record.configs))
        ops.append(Put(topic_key(name), assignment.encode()))
        ops.append(Put(topic_name_key(name), name.encode()))
    ops.append(Put(NEXT_BLOCK_KEY, json.dumps({"next": state.next_producer_id_block}).encode()))
    return ops


def _read(path: Path) -> meta.BrokerState | None:
    """The state in ``path`` (``None``: no such file). Blocking. Raises CorruptRecordError naming the file."""
    try:
        state = meta.load_state(path.parent)
    except CorruptRecordError as err:
        if str(path) in str(err):
            raise
        raise CorruptRecordError(f"{path} is not a valid broker state: {err}") from err
    return state


async def import_legacy_state(store: MetadataStore, path: Path, broker_id: int, ids: LocalTopicIds) -> bool:
    """Import the state file ``path`` into the started ``store`` (see the module doc); False when there is
    no such file. Idempotent: safe to run again after a failure at any step.

    Raises:
        CorruptRecordError: the file is torn or not a state (its name in the message).
        InvalidConfigError: the store already holds another cluster.
        MetadataStoreError: the store failed (nothing is renamed).
        UnavailableError, InsufficientStorageError: the data directory cannot be written.
    """
    state = await asyncio.to_thread(_read, path)
    if state is None:
        return False
    if await store.commit([Compare(CLUSTER_ID, 0)], legacy_ops(state, broker_id)) is None:
        held = await store.get(CLUSTER_ID)
        held_id = held.value.decode("utf-8", "replace") if held is not None else ""
        if held_id != state.cluster_id:
            raise InvalidConfigError(
                f"{path} holds cluster {state.cluster_id}, but the metadata store already holds cluster "
                f"{held_id}: move one of them away"
            )
        log.info("%s was imported before (cluster %s): finishing the import", path, state.cluster_id)
    await ids.load()
    ids.topics.update({name: record.topic_id for name, record in state.topics.items()})
    await ids.save(state.cluster_id, broker_id)
    target = path.with_name(path.name + IMPORTED_SUFFIX)
    try:
        await asyncio.to_thread(meta.rename_durably, path, target)
    except OSError as err:
        raise storage_error(f"renaming {path} to {target.name}", err) from err
    log.info(
        "imported %s into the cluster metadata: cluster %s, %d topics; kept as %s",
        path.name,
        state.cluster_id,
        len(state.topics),
        target.name,
    )
    return True


async def import_legacy_security(store: MetadataStore, path: Path) -> bool:
    """Copy every key of the security file ``path`` (a local store's file) that ``store`` lacks into it,
    then rename the file to ``<name>.imported``; False when there is no such file. Idempotent.

    Raises: MetadataStoreError (the file is corrupt, or the store failed: nothing is renamed);
    UnavailableError, InsufficientStorageError (the file cannot be renamed).
    """
    from tierlog.service.cluster.local_store import LocalMetadataStore

    if not await asyncio.to_thread(path.exists):
        return False
    old = LocalMetadataStore(path)
    try:
        await old.start()
    except MetadataStoreError as err:  # unreadable: fail the start (retrying cannot mend a file)
        raise CorruptRecordError(
            f"{path} cannot be imported ({err.message}): move it aside to start without its users and ACLs"
        ) from err
    try:
        kvs, _ = await old.range("")
    finally:
        await old.close()
    copied = 0
    for kv in kvs:
        if await store.commit([Compare(kv.key, 0)], [Put(kv.key, kv.value)]) is not None:
            copied += 1
    target = path.with_name(path.name + IMPORTED_SUFFIX)
    try:
        await asyncio.to_thread(meta.rename_durably, path, target)
    except OSError as err:
        raise storage_error(f"renaming {path} to {target.name}", err) from err
    log.info("imported %d users and ACL keys from %s; kept as %s", copied, path.name, target.name)
    return True
