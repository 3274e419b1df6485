"""The native produce body pool: which buffer a body gets, what is kept, and when a buffer comes back."""

from __future__ import annotations

from typing import cast

import pytest
from aiohttp import web

from tierlog.service.web.body_buffers import BodyBuffers, Lease

MiB = 1024 * 1024


def test_a_new_buffer_is_whole_grains_and_a_kept_one_is_reused_smallest_first() -> None:
    pool = BodyBuffers()
    big, small = pool.take(3 * MiB - 5), pool.take(100)
    assert (len(big), len(small), pool.fresh, pool.reused) == (3 * MiB, 256 * 1024, 2, 0)
    pool.give(big)
    pool.give(small)
    assert pool.take(200 * 1024) is small  # the smallest that fits
    assert pool.take(2 * MiB) is big
    assert pool.take(10) is not small  # nothing left: a new one
    assert (pool.fresh, pool.reused) == (3, 2)


def test_the_pool_keeps_at_most_keep_bytes_and_no_buffer_over_largest() -> None:
    pool = BodyBuffers(largest=4 * MiB, keep_bytes=5 * MiB)
    huge = pool.take(5 * MiB)
    pool.give(huge)
    assert pool.take(5 * MiB) is not huge  # over ``largest``: never kept
    buffers = [pool.take(2 * MiB) for _ in range(3)]
    for buffer in buffers:
        pool.give(buffer)
    kept = [pool.take(2 * MiB) for _ in range(3)]
    assert sum(any(k is b for b in buffers) for k in kept) == 2  # 4 MiB kept; a third would pass 5


def test_a_lease_views_exactly_the_body_read_only_and_comes_back_once() -> None:
    pool = BodyBuffers()
    buffer = pool.take(10)
    buffer[:4] = b"abcd"
    lease = Lease(pool, buffer, 4)
    assert bytes(lease.view) == b"abcd"
    assert lease.view.readonly
    with pytest.raises(TypeError):
        lease.view[0] = 0
    lease.close()
    lease.close()  # idempotent: given back once
    assert pool.take(1) is buffer
    assert pool.take(1) is not buffer


def test_an_abandoned_lease_never_returns_its_buffer() -> None:
    pool = BodyBuffers()
    buffer = pool.take(10)
    lease = Lease(pool, buffer, 10)
    lease.abandon()
    lease.close()
    assert pool.take(10) is not buffer


async def test_past_the_lease_bound_a_body_is_left_to_the_ordinary_read() -> None:
    pool = BodyBuffers(lease_bytes=2 * MiB)
    untouched = cast(web.Request, object())  # declined before the request is read at all
    first = Lease(pool, pool.take(MiB), MiB)
    assert (pool.leased_bytes, pool.idle.is_set()) == (MiB, False)
    assert await pool.read(untouched, 2 * MiB) is None
    assert pool.declined == 1
    second = Lease(pool, pool.take(MiB), MiB)
    second.abandon()
    first.close()
    assert (pool.leased_bytes, pool.idle.is_set()) == (0, True)
