"""Warming a fetch region's pages: asked of the kernel (mincore), read only when some are not cached."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierlog.service.topics import page_cache
from tierlog.service.topics.page_cache import resident, warm_pages
from tierlog.tiering.log.types import FileSlice

SIZE = 3 << 20


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "segment.log"
    path.write_bytes(os.urandom(SIZE))
    opened = os.open(path, os.O_RDONLY)
    os.pread(opened, SIZE, 0)  # cached
    yield opened
    os.close(opened)


def _evict(fd: int) -> None:
    """Drop the whole file's pages (a part may share a large folio with cached pages and stay)."""
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if any(resident(fd, at, 4096) for at in (0, 1 << 20, 2 << 20)):
        pytest.skip("this filesystem keeps the pages when told it no longer needs them (tmpfs?)")


def _slice(fd: int, position: int, size: int) -> FileSlice:
    return FileSlice(os.dup(fd), position, size, 0, 0, 0)


@pytest.mark.skipif(page_cache._libc is None, reason="mincore is asked on 64-bit Linux only")
def test_a_cached_region_is_resident_and_an_evicted_page_is_seen(fd: int) -> None:
    assert resident(fd, 0, SIZE)
    assert resident(fd, 12_345, 1 << 20)  # not page aligned
    assert resident(fd, 0, 0)
    _evict(fd)
    assert not resident(fd, 0, SIZE)
    assert not resident(fd, (2 << 20) + 100, 10)
    os.pread(fd, 1 << 20, 0)
    assert resident(fd, 0, 1 << 20)  # read back: cached again


def test_a_region_that_cannot_be_asked_about_is_not_resident(fd: int) -> None:
    assert not resident(fd, SIZE, 4096)  # past the end of the file
    assert not resident(fd, SIZE - 4096, 8192)  # partly past it
    reading, writing = os.pipe()
    try:
        assert not resident(reading, 0, 4096)  # a pipe cannot be mapped
    finally:
        os.close(reading)
        os.close(writing)
    closed = os.dup(fd)
    os.close(closed)
    assert not resident(closed, 0, 4096)  # a closed descriptor: False, never raised


@pytest.mark.skipif(page_cache._libc is None, reason="mincore is asked on 64-bit Linux only")
def test_warming_reads_a_large_region_only_when_pages_are_missing(
    fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = os.preadv

    def counting(descriptor: int, buffers: list[memoryview], position: int) -> int:
        reads.append(position)
        return real(descriptor, buffers, position)

    monkeypatch.setattr(os, "preadv", counting)
    with _slice(fd, 4096, 2 << 20) as region:
        assert warm_pages(region) is region
    assert reads == []  # all cached: nothing copied

    with _slice(fd, 0, 4096) as small:  # under 256 KiB: read rather than asked
        warm_pages(small)
    assert reads == [0]

    _evict(fd)
    reads.clear()
    with _slice(fd, 4096, 2 << 20) as region:
        warm_pages(region)
    assert reads == [4096, 4096 + (1 << 20)]  # read whole, a chunk at a time
    assert resident(fd, 4096, 2 << 20)
