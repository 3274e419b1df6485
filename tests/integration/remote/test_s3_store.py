"""S3-only behaviour against real servers: multipart abort, error translation through a real botocore
client, endpoint discovery, the URI factory. Failures are injected with botocore's public event hooks
(``before-call`` handlers), so the request path under test is the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiobotocore.session import get_session
from botocore.exceptions import EndpointConnectionError

from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server, free_port
from tierlog.tiering.remote.factory import open_object_store
from tierlog.tiering.remote.s3 import S3ObjectStore
from tierlog.wire.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)

pytestmark = pytest.mark.integration

SERVERS = ["moto_server", "localstack_server"]


@pytest.fixture(params=SERVERS, ids=["moto", "localstack"])
def server(request: pytest.FixtureRequest) -> S3Server:
    found: S3Server = request.getfixturevalue(request.param)
    return found


async def pending_uploads(server: S3Server, bucket: str) -> list[dict[str, Any]]:
    async with get_session().create_client("s3", endpoint_url=server.endpoint_url) as client:
        resp = await client.list_multipart_uploads(Bucket=bucket)
        uploads: list[dict[str, Any]] = resp.get("Uploads", [])
        return uploads


def fake_response(code: str, status: int) -> Any:
    """A ``before-call`` handler answering every call of its event with an S3 error (no request sent)."""

    def handler(**kwargs: Any) -> tuple[Any, dict[str, Any]]:
        parsed = {
            "Error": {"Code": code, "Message": "injected"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        return (SimpleNamespace(status_code=status, headers={}), parsed)

    return handler


def multipart_store(server: S3Server, bucket: str, part: int, **options: Any) -> S3ObjectStore:
    """A store on ``server`` that puts every file over ``part`` bytes as a multipart upload of ``part``
    byte parts."""
    return S3ObjectStore(
        bucket, endpoint_url=server.endpoint_url, part_size=part, multipart_threshold=part, **options
    )


def open_descriptors(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    fds = Path("/proc/self/fd")
    count = 0
    for entry in fds.iterdir():
        with contextlib.suppress(OSError):  # closed since listed
            count += os.readlink(entry) == str(path)
    return count


async def test_failed_multipart_upload_is_aborted(server: S3Server, tmp_path: Path) -> None:
    bucket = await create_bucket(server)
    part = max(server.min_part_size, 64 * 1024)
    calls: list[int] = []

    def fail_third_part(params: dict[str, Any], **kwargs: Any) -> None:
        calls.append(params["PartNumber"])
        if params["PartNumber"] == 3:
            raise EndpointConnectionError(endpoint_url=server.endpoint_url)

    store = multipart_store(
        server,
        bucket,
        part,
        upload_concurrency=2,
        upload_threads=1,  # a part waits in the queue when part 3 fails
        event_handlers=[("before-parameter-build.s3.UploadPart", fail_third_part)],
    )
    path = tmp_path / "seg.log"
    path.write_bytes(random.Random(1).randbytes(part * 4 + 1))
    try:
        with pytest.raises(UnavailableError) as info:
            await store.put_file("t/0/seg.log", path)
        assert isinstance(info.value.__cause__, EndpointConnectionError)
        assert 3 in calls
        with pytest.raises(NotFoundError):
            await store.head("t/0/seg.log")
        assert await pending_uploads(server, bucket) == []
    finally:
        await store.close()
    assert open_descriptors(path) == 0  # every part's descriptor, queued ones included, is closed


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("SlowDown", 503, UnavailableError),
        ("InternalError", 500, UnavailableError),
        ("ServiceUnavailable", 503, UnavailableError),
        ("ConditionalRequestConflict", 409, UnavailableError),
        ("AccessDenied", 403, UnauthorizedError),
        ("InvalidAccessKeyId", 403, UnauthorizedError),
        ("PreconditionFailed", 412, ConflictError),
        ("NoSuchKey", 404, NotFoundError),
        ("InvalidArgument", 400, InvalidRequestError),
        ("SomethingNew", 502, UnavailableError),
        ("SomethingNew", 418, InvalidRequestError),
    ],
)
async def test_error_codes_map_to_kinds(
    server: S3Server, code: str, status: int, kind: type[Exception]
) -> None:
    bucket = await create_bucket(server)
    store = S3ObjectStore(
        bucket,
        endpoint_url=server.endpoint_url,
        event_handlers=[("before-call.s3.GetObject", fake_response(code, status))],
    )
    try:
        with pytest.raises(kind) as info:
            await store.get("k")
        assert type(info.value) is kind
        assert info.value.__cause__ is not None  # chained from the vendor error
    finally:
        await store.close()


async def test_put_if_absent_still_false_when_precondition_fails(server: S3Server) -> None:
    bucket = await create_bucket(server)
    store = S3ObjectStore(bucket, endpoint_url=server.endpoint_url)
    try:
        assert await store.put_if_absent("m/1.json", b"a")
        assert not await store.put_if_absent("m/1.json", b"b")
    finally:
        await store.close()


async def test_missing_bucket_is_not_found(server: S3Server) -> None:
    store = S3ObjectStore("tierlog-no-such-bucket", endpoint_url=server.endpoint_url)
    try:
        with pytest.raises(NotFoundError):
            await store.get("k")
        with pytest.raises(NotFoundError):
            await store.put("k", b"v")
    finally:
        await store.close()


async def test_unreachable_endpoint_is_unavailable(aws_test_env: None) -> None:
    store = S3ObjectStore("b", endpoint_url=f"http://127.0.0.1:{free_port()}", connect_timeout=2)
    try:
        with pytest.raises(UnavailableError):
            await store.get("k")
    finally:
        await store.close()


async def test_factory_honours_aws_endpoint_url_and_prefix(
    server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = await create_bucket(server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint_url)
    store = open_object_store(f"s3://{bucket}/archive/prod")
    raw = S3ObjectStore(bucket)
    try:
        assert raw.endpoint_url == server.endpoint_url and raw.path_style
        await store.put("orders/0/x.log", b"x")
        assert [i.key async for i in raw.list()] == ["archive/prod/orders/0/x.log"]
        assert [i.key async for i in store.list("orders/")] == ["orders/0/x.log"]
    finally:
        await store.close()
        await raw.close()


async def test_closed_store_refuses_calls(server: S3Server) -> None:
    bucket = await create_bucket(server)
    store = S3ObjectStore(bucket, endpoint_url=server.endpoint_url)
    await store.put("k", b"v")
    await store.close()
    await store.close()
    with pytest.raises(InvalidRequestError):
        await store.get("k")


async def test_service_without_conditional_writes_is_named(server: S3Server) -> None:
    bucket = await create_bucket(server)
    store = S3ObjectStore(
        bucket,
        endpoint_url=server.endpoint_url,
        event_handlers=[("before-call.s3.PutObject", fake_response("NotImplemented", 501))],
    )
    try:
        with pytest.raises(InvalidRequestError, match="conditional_writes=False"):
            await store.put_if_absent("m/1.json", b"a")
    finally:
        await store.close()


async def test_single_writer_fallback_without_conditional_writes(server: S3Server) -> None:
    bucket = await create_bucket(server)
    store = S3ObjectStore(bucket, endpoint_url=server.endpoint_url, conditional_writes=False)
    try:
        assert await store.put_if_absent("m/1.json", b"a") is True
        assert await store.put_if_absent("m/1.json", b"b") is False
        assert await store.get("m/1.json") == b"a"
    finally:
        await store.close()


async def test_cancelled_multipart_upload_is_aborted(server: S3Server, tmp_path: Path) -> None:
    """Cancelling put_file aborts the upload at once, though its second part is still running in a worker
    thread (parts cannot be stopped there); once that part ends the store aborts again, and close waits
    for it: no upload, object or part is left."""
    bucket = await create_bucket(server)
    part = max(server.min_part_size, 64 * 1024)
    second_part_started = asyncio.Event()
    release = asyncio.Event()
    released_parts: list[int] = []
    aborts: list[str] = []

    def count_abort(params: dict[str, Any], **kwargs: Any) -> None:
        aborts.append(params["UploadId"])

    async def stall_second_part(params: dict[str, Any], **kwargs: Any) -> None:
        if params["PartNumber"] == 2:
            second_part_started.set()
            await release.wait()
            released_parts.append(2)

    store = multipart_store(
        server,
        bucket,
        part,
        upload_concurrency=1,
        event_handlers=[
            ("before-parameter-build.s3.UploadPart", stall_second_part),
            ("before-parameter-build.s3.AbortMultipartUpload", count_abort),
        ],
    )
    path = tmp_path / "seg.log"
    path.write_bytes(random.Random(2).randbytes(part * 3))
    try:
        upload = asyncio.create_task(store.put_file("t/0/seg.log", path))
        await second_part_started.wait()
        assert len(await pending_uploads(server, bucket)) == 1
        upload.cancel()
        with pytest.raises(asyncio.CancelledError):
            await upload
        assert await pending_uploads(server, bucket) == []  # aborted while part 2 still runs
        assert released_parts == [] and len(aborts) == 1
        assert open_descriptors(path) == 0  # put_file's is closed; the running part read and closed its own
        release.set()
        await store.close()  # waits for part 2 to end and for the second abort
        assert released_parts == [2]
        assert len(aborts) == 2 and aborts[0] == aborts[1]
        assert open_descriptors(path) == 0
        assert await pending_uploads(server, bucket) == []
        store = S3ObjectStore(bucket, endpoint_url=server.endpoint_url)
        with pytest.raises(NotFoundError):
            await store.head("t/0/seg.log")
    finally:
        release.set()
        await store.close()


async def test_concurrent_uploads_share_at_most_upload_threads(server: S3Server, tmp_path: Path) -> None:
    """Two files of three parts each, two parts of each in flight: every part is sent by one of the two
    upload threads (which also bounds the parts held in memory), and both objects are whole."""
    bucket = await create_bucket(server)
    part = max(server.min_part_size, 64 * 1024)
    threads: set[threading.Thread] = set()
    lock = threading.Lock()
    in_flight = [0, 0]  # now, most at once

    def sending(**kwargs: Any) -> None:
        with lock:
            threads.add(threading.current_thread())
            in_flight[0] += 1
            in_flight[1] = max(in_flight)

    def answered(**kwargs: Any) -> None:
        with lock:
            in_flight[0] -= 1

    store = multipart_store(
        server,
        bucket,
        part,
        upload_concurrency=2,
        upload_threads=2,
        event_handlers=[
            ("before-send.s3.UploadPart", sending),
            ("after-call.s3.UploadPart", answered),
        ],
    )
    data = {name: random.Random(name).randbytes(part * 3 - 7) for name in ("a", "b")}
    for name, payload in data.items():
        (tmp_path / name).write_bytes(payload)
    try:
        await asyncio.gather(*(store.put_file(f"t/{name}", tmp_path / name) for name in data))
        for name, payload in data.items():
            assert await store.get(f"t/{name}") == payload
    finally:
        await store.close()
    assert 1 <= in_flight[1] <= 2  # not 4: the two uploads share the threads
    assert in_flight[0] == 0
    assert all(t.name.startswith("tierlog-s3-upload") for t in threads)
    assert not any(t.is_alive() for t in threads)
    assert open_descriptors(tmp_path / "a") == open_descriptors(tmp_path / "b") == 0


async def test_close_during_an_upload_fails_it_without_storing_part_of_it(
    server: S3Server, tmp_path: Path
) -> None:
    """close() drops the parts still queued: the upload fails (it never completes with a part missing),
    is aborted, and close waits for the part that was running."""
    bucket = await create_bucket(server)
    part = max(server.min_part_size, 64 * 1024)
    first_part_started = asyncio.Event()
    release = asyncio.Event()
    aborts: list[str] = []

    async def stall_first_part(params: dict[str, Any], **kwargs: Any) -> None:
        if params["PartNumber"] == 1:
            first_part_started.set()
            await release.wait()

    def count_abort(params: dict[str, Any], **kwargs: Any) -> None:
        aborts.append(params["UploadId"])

    store = multipart_store(
        server,
        bucket,
        part,
        upload_concurrency=2,
        upload_threads=1,  # part 2 waits in the queue behind part 1
        event_handlers=[
            ("before-parameter-build.s3.UploadPart", stall_first_part),
            ("before-parameter-build.s3.AbortMultipartUpload", count_abort),
        ],
    )
    path = tmp_path / "seg.log"
    path.write_bytes(random.Random(3).randbytes(part * 2))
    upload = asyncio.create_task(store.put_file("t/0/seg.log", path))
    await first_part_started.wait()
    closing = asyncio.create_task(store.close())
    try:
        with pytest.raises(InvalidRequestError, match="closed"):
            await upload  # failed as soon as close dropped part 2, while part 1 still runs
        assert len(aborts) == 1
    finally:
        release.set()
        await closing
    assert len(aborts) == 2  # again once part 1 had ended
    assert await pending_uploads(server, bucket) == []
    reader = S3ObjectStore(bucket, endpoint_url=server.endpoint_url)
    try:
        with pytest.raises(NotFoundError):
            await reader.head("t/0/seg.log")
    finally:
        await reader.close()
    assert open_descriptors(path) == 0


def test_upload_threads_must_be_positive() -> None:
    with pytest.raises(InvalidRequestError, match="upload threads"):
        S3ObjectStore("b", upload_threads=0)
