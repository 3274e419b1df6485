"""An object store in a local directory: the embedded default and the fast contract-test backend.

A key ``a/b/c`` is the file ``<root>/a/b/c``. Writes go to a temporary file under
``<root>/.tierlog-tmp/`` first and are then renamed (``put``) or hard-linked (``put_if_absent``) into place,
so readers never see a partial object and exactly one of several concurrent creators wins. Every blocking
call runs in a worker thread (``asyncio.to_thread``), never on the event loop.

Limits compared with S3: a key cannot also be a "directory" of another key (``a`` and ``a/b`` cannot
both exist; the second write raises :class:`ConflictError`), and empty directories left by deletes are
not pruned (listings ignore them).
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as _dt
import errno
import functools
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TypeVar

from tierlog.tiering.remote.object_store import ObjectInfo, validate_key, validate_prefix, validate_range
from tierlog.tiering.remote.translate import translating
from tierlog.wire.errors import InvalidRequestError

__all__ = ["LocalObjectStore"]

_TMP_DIR = ".tierlog-tmp"
_LIST_BATCH = 256
_T = TypeVar("_T")


class LocalObjectStore:
    """:class:`~tierlog.tiering.remote.object_store.ObjectStore` over the directory ``root`` (created if
    missing).

    ``fsync`` (default on) flushes file data and the parent directory before a write returns, so a
    completed write survives a power loss; tests may turn it off for speed.
    """

    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self._root = Path(os.path.abspath(root))  # pure: the directory is touched only in worker threads
        self._tmp = self._root / _TMP_DIR
        self._fsync = fsync
        self._real_root: Path | None = None

    @property
    def root(self) -> Path:
        """The directory holding the objects."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self._root)!r})"

    # -- helpers ---------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        """The file of ``key`` (pure: no file-system access, so it may run on the event loop)."""
        validate_key(key)
        return self._root.joinpath(*key.split("/"))

    def _prepare(self, paths: tuple[Path, ...]) -> None:
        """In a worker thread: create the root once, and refuse paths that leave it.

        ``validate_key`` already forbids ``..``; this catches symlinked directories inside the root.
        """
        if self._real_root is None:
            self._tmp.mkdir(parents=True, exist_ok=True)
            self._real_root = self._root.resolve()
        for path in paths:
            if not path.resolve().is_relative_to(self._real_root):
                raise InvalidRequestError(f"object path {str(path)!r} escapes the store root")

    async def _run(self, op: str, key: str, fn: Callable[[], _T], *paths: Path) -> _T:
        """Run ``fn`` in a worker thread after :meth:`_prepare`, translating OS errors."""

        def guarded() -> _T:
            self._prepare(paths)
            return fn()

        with translating(op, key):
            return await asyncio.to_thread(guarded)

    def _tmp_path(self) -> Path:
        return self._tmp / f"{uuid.uuid4().hex}.part"

    def _sync_dir(self, directory: Path) -> None:
        if not self._fsync:
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_tmp(self, data: bytes) -> Path:
        tmp = self._tmp_path()
        with open(tmp, "wb") as fh:
            fh.write(data)
            if self._fsync:
                fh.flush()
                os.fsync(fh.fileno())
        return tmp

    def _copy_tmp(self, source: Path) -> Path:
        tmp = self._tmp_path()
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            if self._fsync:
                dst.flush()
                os.fsync(dst.fileno())
        return tmp

    def _install(self, tmp: Path, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._sync_dir(path.parent)

    def _install_if_absent(self, tmp: Path, path: Path) -> bool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError as err:
                if err.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                return self._create_exclusive(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_dir(path.parent)
        return True

    @staticmethod
    def _create_exclusive(tmp: Path, path: Path) -> bool:
        # Fallback for filesystems without hard links: O_EXCL still picks one winner, but a reader may
        # briefly see a partially written object.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as dst, open(tmp, "rb") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
        return True

    def _info(self, key: str, path: Path) -> ObjectInfo:
        st = path.stat()
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, "not an object", str(path))
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=f'"{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ino:x}"',
            last_modified=_dt.datetime.fromtimestamp(st.st_mtime, tz=_dt.UTC),
        )

    # -- the protocol ----------------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`. Raises :class:`ConflictError` if ``key`` is a directory here."""
        path = self._path(key)

        def work() -> None:
            self._install(self._write_tmp(bytes(data)), path)

        await self._run("put", key, work, path)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent` (hard link: atomic, exactly one winner)."""
        path = self._path(key)

        def work() -> bool:
            return self._install_if_absent(self._write_tmp(bytes(data)), path)

        return await self._run("put_if_absent", key, work, path)

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`: copied in 1 MiB blocks to a temporary file, then renamed."""
        target = self._path(key)
        source = Path(path)

        def work() -> None:
            self._install(self._copy_tmp(source), target)

        await self._run("put_file", key, work, target)

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        return await self.get_range(key, 0, None)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range` (half-open, clamped)."""
        validate_range(start, end)
        path = self._path(key)
        if end is not None and end == start:
            return b""

        def work() -> bytes:
            with open(path, "rb") as fh:
                fh.seek(start)
                return fh.read() if end is None else fh.read(end - start)

        return await self._run("get_range", key, work, path)

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        path = self._path(key)
        return await self._run("head", key, lambda: self._info(key, path), path)

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`. The directory tree is walked in a thread; items come in batches."""
        validate_prefix(prefix)
        keys = await self._run("list", prefix, lambda: self._walk(prefix, start_after))
        for i in range(0, len(keys), _LIST_BATCH):
            batch = keys[i : i + _LIST_BATCH]
            infos = await self._run("list", prefix, functools.partial(self._infos, batch))
            for info in infos:
                yield info

    def _walk(self, prefix: str, start_after: str | None) -> builtins.list[str]:
        # Only descend into the directory that can hold keys with this prefix.
        base_parts = prefix.split("/")[:-1]
        base = self._root.joinpath(*base_parts) if base_parts else self._root
        keys: builtins.list[str] = []
        if not base.is_dir():
            return keys
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".tierlog")]
            rel = Path(dirpath).relative_to(self._root).as_posix()
            for name in filenames:
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        keys.sort()  # code-point order is UTF-8 byte order, which is S3's order
        return keys

    def _infos(self, keys: builtins.list[str]) -> builtins.list[ObjectInfo]:
        infos = []
        for key in keys:
            try:
                infos.append(self._info(key, self._root.joinpath(*key.split("/"))))
            except FileNotFoundError:
                continue  # deleted since the walk: a listing is not a snapshot
        return infos

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete` (idempotent)."""
        path = self._path(key)

        def work() -> None:
            if path.is_dir():
                return  # a "directory" is not an object: nothing to delete
            path.unlink(missing_ok=True)

        await self._run("delete", key, work, path)

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`: one thread hop for the whole batch."""
        paths = [self._path(key) for key in keys]

        def work() -> None:
            for path in paths:
                if not path.is_dir():
                    path.unlink(missing_ok=True)

        await self._run("delete_many", "", work, *paths)

    async def close(self) -> None:
        """Nothing to release. Idempotent."""
