"""What only the local-directory store can get wrong: escaping its root, temporary files, file/directory
collisions. The shared behaviour is in tests/integration/remote/test_store_contract.py."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.wire.errors import ConflictError, InvalidRequestError, NotFoundError


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    opened = LocalObjectStore(tmp_path / "root")
    yield opened
    await opened.close()


async def test_keys_cannot_escape_through_symlinks(store: LocalObjectStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    await store.put("seed", b"")  # the root is created lazily, on first use
    os.symlink(outside, store.root / "link")
    with pytest.raises(InvalidRequestError):
        await store.put("link/x", b"v")
    with pytest.raises(InvalidRequestError):
        await store.get("link/x")
    assert list(outside.iterdir()) == []


async def test_no_temporary_files_left_or_listed(store: LocalObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"s" * 10_000)
    await store.put("a", b"1")
    assert await store.put_if_absent("a", b"2") is False
    await store.put_file("b", src)
    with pytest.raises(ConflictError):
        await store.put("a/child", b"x")  # "a" is an object, so it cannot be a directory too
    assert list((store.root / ".tierlog-tmp").iterdir()) == []
    assert [i.key async for i in store.list()] == ["a", "b"]
    assert (store.root / "b").read_bytes() == src.read_bytes()


async def test_directory_is_not_an_object(store: LocalObjectStore) -> None:
    await store.put("dir/x", b"v")
    with pytest.raises(NotFoundError):
        await store.head("dir")
    with pytest.raises(ConflictError):
        await store.put("dir", b"v")
    await store.delete("dir")  # a directory is not deleted, and deleting it is not an error
    assert await store.get("dir/x") == b"v"


async def test_objects_survive_reopening(store: LocalObjectStore) -> None:
    await store.put("t/0/seg", b"data")
    reopened = LocalObjectStore(store.root)
    assert await reopened.get("t/0/seg") == b"data"
    assert [i.key async for i in reopened.list("t/")] == ["t/0/seg"]
