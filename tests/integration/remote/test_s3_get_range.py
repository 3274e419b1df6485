"""``S3ObjectStore.get_range`` on its threaded botocore client, against a real moto_server: errors are
translated as on every other call, reads run on the store's bounded worker threads, a timed-out read is
retriable, a cancelled read leaves the store usable, and ``close()`` stops the threads. Failures are
injected with botocore's public event hooks, so the request path under test is the real one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from tests.integration.remote.blackhole import BlackholeProxy
from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server
from tierlog.tiering.remote.s3 import S3ObjectStore
from tierlog.wire.errors import (
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)

pytestmark = pytest.mark.integration

PAYLOAD = bytes(range(256)) * 64


def fake_response(code: str, status: int) -> tuple[Any, dict[str, Any]]:
    parsed = {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return (SimpleNamespace(status_code=status, headers={}), parsed)


@pytest.fixture
async def bucket(moto_server: S3Server) -> AsyncIterator[str]:
    name = await create_bucket(moto_server)
    store = S3ObjectStore(name, endpoint_url=moto_server.endpoint_url)
    try:
        await store.put("k", PAYLOAD)
    finally:
        await store.close()
    yield name


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("NoSuchKey", 404, NotFoundError),
        ("SlowDown", 503, UnavailableError),
        ("InternalError", 500, UnavailableError),
        ("SomethingNew", 502, UnavailableError),
        ("AccessDenied", 403, UnauthorizedError),
        ("SomethingNew", 418, InvalidRequestError),
    ],
)
async def test_errors_map_to_kinds(
    moto_server: S3Server, bucket: str, code: str, status: int, kind: type[Exception]
) -> None:
    def handler(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return fake_response(code, status)

    store = S3ObjectStore(
        bucket, endpoint_url=moto_server.endpoint_url, event_handlers=[("before-call.s3.GetObject", handler)]
    )
    try:
        with pytest.raises(kind) as info:
            await store.get_range("k", 0, 10)
        assert type(info.value) is kind
        assert isinstance(info.value.__cause__, ClientError)  # raised from the vendor error
    finally:
        await store.close()


async def test_coroutine_handlers_run_on_the_loop(moto_server: S3Server, bucket: str) -> None:
    loop_thread = threading.current_thread()
    seen: list[threading.Thread] = []

    async def handler(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
        seen.append(threading.current_thread())
        return fake_response("NoSuchKey", 404)

    store = S3ObjectStore(
        bucket, endpoint_url=moto_server.endpoint_url, event_handlers=[("before-call.s3.GetObject", handler)]
    )
    try:
        with pytest.raises(NotFoundError):
            await store.get_range("k", 0, 10)
        assert seen == [loop_thread]
    finally:
        await store.close()


async def test_reads_use_at_most_read_threads_and_stop_at_close(moto_server: S3Server, bucket: str) -> None:
    threads: set[threading.Thread] = set()

    def record(**kwargs: Any) -> None:
        threads.add(threading.current_thread())

    store = S3ObjectStore(
        bucket,
        endpoint_url=moto_server.endpoint_url,
        read_threads=3,
        event_handlers=[("before-send.s3.GetObject", record)],
    )
    spans = [(i * 100, i * 100 + 700) for i in range(20)]
    try:
        got = await asyncio.gather(*(store.get_range("k", start, end) for start, end in spans))
        assert got == [PAYLOAD[start:end] for start, end in spans]
        assert await store.get_range("k", len(PAYLOAD) - 5) == PAYLOAD[-5:]
        assert await store.get_range("k", len(PAYLOAD), None) == b""  # 416: past the end
    finally:
        await store.close()
    assert 1 <= len(threads) <= 3
    assert threading.current_thread() not in threads
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(InvalidRequestError):
        await store.get_range("k", 0, 1)


async def test_reads_racing_close_succeed_or_report_closed(moto_server: S3Server, bucket: str) -> None:
    store = S3ObjectStore(bucket, endpoint_url=moto_server.endpoint_url, read_threads=2)
    assert await store.get_range("k", 0, 10) == PAYLOAD[:10]
    reads = [asyncio.create_task(store.get_range("k", i, i + 10)) for i in range(20)]
    await store.close()
    results = await asyncio.gather(*reads, return_exceptions=True)
    for i, result in enumerate(results):
        if isinstance(result, BaseException):
            assert isinstance(result, InvalidRequestError), result
        else:
            assert result == PAYLOAD[i : i + 10]


async def test_cancelled_read_leaves_the_store_usable(moto_server: S3Server, bucket: str) -> None:
    started, release = threading.Event(), threading.Event()

    def hold_first(**kwargs: Any) -> None:
        if not started.is_set():
            started.set()
            release.wait(10)

    store = S3ObjectStore(
        bucket,
        endpoint_url=moto_server.endpoint_url,
        read_threads=1,
        event_handlers=[("before-send.s3.GetObject", hold_first)],
    )
    try:
        read = asyncio.create_task(store.get_range("k", 0, 10))
        assert await asyncio.to_thread(started.wait, 10)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        release.set()
        assert await store.get_range("k", 5, 15) == PAYLOAD[5:15]
    finally:
        release.set()
        await store.close()


async def test_timed_out_read_is_unavailable(moto_server: S3Server, bucket: str) -> None:
    target = urlsplit(moto_server.endpoint_url)
    assert target.hostname is not None and target.port is not None
    async with BlackholeProxy(target.hostname, target.port) as proxy:
        # 2 s: the read before the blackhole must get its answer within it, under a loaded machine too
        store = S3ObjectStore(bucket, endpoint_url=proxy.endpoint_url, connect_timeout=2, read_timeout=2)
        try:
            assert await store.get_range("k", 0, 4) == PAYLOAD[:4]
            proxy.blackhole()
            with pytest.raises(UnavailableError) as info:
                await store.get_range("k", 4, 8)
            assert isinstance(info.value.__cause__, ReadTimeoutError)
        finally:
            await asyncio.wait_for(store.close(), 10)


def test_read_threads_must_be_positive() -> None:
    with pytest.raises(InvalidRequestError):
        S3ObjectStore("b", read_threads=0)
