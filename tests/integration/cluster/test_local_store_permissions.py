"""The local metadata file and its lock are private to the broker's user: the security store keeps SCRAM
credential hashes in it (``<data-dir>/cluster-metadata.json``), which must not be readable by other local
users."""

from __future__ import annotations

import stat
from pathlib import Path

from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import Put


async def _write_one_key(path: Path) -> None:
    """Open a local store at ``path``, commit one key, close it."""
    store = LocalMetadataStore(path)
    await store.start()
    try:
        assert await store.commit([], [Put("security/users/alice", b"{}")]) is not None
    finally:
        await store.close()


async def test_the_metadata_file_and_its_lock_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "cluster-metadata.json"
    await _write_one_key(path)
    for written in (path, path.with_name(path.name + ".lock")):
        assert stat.S_IMODE(written.stat().st_mode) == 0o600, written


async def test_a_metadata_file_in_a_directory_not_made_yet_is_created(tmp_path: Path) -> None:
    # a broker's security store starts while its logs open, which is what makes the data directory
    path = tmp_path / "data" / "cluster-metadata.json"
    await _write_one_key(path)
    assert path.is_file()
