"""The object store on any S3-compatible service (AWS S3, MinIO, LocalStack, moto), through aiobotocore.

Credentials come from the standard AWS chain (environment, shared config/credentials files, container
and instance roles) unless given explicitly. ``endpoint_url`` (or the ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` environment variables) points the client at a non-AWS service; path-style
addressing (``http://host/bucket/key``) is what MinIO and most self-hosted services want.

botocore's own retries are off by default (``total_max_attempts=1``): retrying is the job of
:class:`~tierlog.tiering.remote.retrying.RetryingStore`, so that one policy, with an injected clock, governs
it. Request checksums are computed only when an operation requires them, which every S3-compatible
service accepts.

The two requests that move bulk bytes go through a plain, threaded botocore client instead of
aiobotocore: ranged reads (:meth:`S3ObjectStore.get_range`, the remote read path's only request) and the
parts of multipart uploads. On the S3-compatible servers measured (moto, LocalStack) aiobotocore's aiohttp
path reached 0.44-0.79x of botocore's throughput for GETs and about 0.7x for 8 MiB parts
(``docs/benchmarks-tiering.md``). The client is built from the same endpoint, credentials, region,
timeouts, retry and checksum settings; GETs run on at most ``read_threads`` worker threads the store owns,
parts on at most ``upload_threads`` others. A GET's body is read to the end in its worker, so the event
loop only ever sees finished bytes; a part is read from disk (``pread``) in the worker that sends it, so at
most ``upload_threads`` parts are held in memory across every upload of the store. Errors are translated
by the same :func:`~tierlog.tiering.remote.translate.translating` as every other call.

Large files go up as a multipart upload: parts of ``part_size`` bytes, at most ``upload_concurrency`` of
one file in flight at once. Any failure or cancellation aborts the upload at once, so no half-written
object is left behind. A part already running in a worker thread cannot be stopped: it ends on its own
(bounded by the timeouts; S3 refuses a part of an aborted upload), and once every such part has ended the
store aborts the upload again, as S3 asks (a part in flight during an abort may still be stored), so no
orphaned parts are left either. :meth:`S3ObjectStore.close` waits for those follow-up aborts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import botocore.config
import botocore.session
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from tierlog.tiering.remote.object_store import ObjectInfo, validate_key, validate_prefix, validate_range
from tierlog.tiering.remote.translate import s3_error_code, translating
from tierlog.wire.errors import ConflictError, InvalidRequestError, NotFoundError, UnavailableError

__all__ = [
    "S3ObjectStore",
    "DEFAULT_PART_SIZE",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_READ_THREADS",
    "DEFAULT_UPLOAD_THREADS",
    "endpoint_from_env",
]

DEFAULT_PART_SIZE = 8 * 1024 * 1024
DEFAULT_MULTIPART_THRESHOLD = 16 * 1024 * 1024
DEFAULT_READ_THREADS = 8  # ranged GETs in flight at once (Kafka's remote.log.reader.threads is 10)
DEFAULT_UPLOAD_THREADS = 8  # multipart parts in flight (and in memory) at once, across all uploads
_DELETE_BATCH = 1000  # DeleteObjects accepts at most 1000 keys


def endpoint_from_env() -> str | None:
    """The S3 endpoint named by ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, if any. Pure read."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


class _Threaded:
    """A plain botocore S3 client and the two bounded pools of worker threads that run its requests:
    ranged GETs on one, multipart parts on the other (so uploads never wait behind reads, nor reads behind
    uploads).

    botocore clients are safe to share between threads. Owned by one :class:`S3ObjectStore`.
    """

    def __init__(self, client: Any, read_threads: int, upload_threads: int) -> None:
        self.client = client
        self.reads = concurrent.futures.ThreadPoolExecutor(read_threads, thread_name_prefix="tierlog-s3-read")
        self.uploads = concurrent.futures.ThreadPoolExecutor(
            upload_threads, thread_name_prefix="tierlog-s3-upload"
        )

    def _get(self, bucket: str, key: str, header: str) -> tuple[bytes, dict[str, Any]]:
        resp: dict[str, Any] = self.client.get_object(Bucket=bucket, Key=key, Range=header)
        with resp["Body"] as body:
            data: bytes = body.read()
        return data, resp

    async def get(self, bucket: str, key: str, header: str) -> tuple[bytes, dict[str, Any]]:
        """The body and response of a ranged ``GetObject``, run on a worker thread. Raises botocore's
        errors (the caller translates them), :class:`InvalidRequestError` once closed. Cancelling the
        caller does not stop a GET already running.
        """
        try:
            future = self.reads.submit(self._get, bucket, key, header)
        except RuntimeError as err:  # the executor is shut down: the store was closed meanwhile
            raise InvalidRequestError("S3 object store is closed") from err
        return await asyncio.wrap_future(future)

    def _upload_part(self, fd: int, offset: int, length: int, params: dict[str, Any]) -> str:
        try:
            body = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(body) != length:
            raise InvalidRequestError(f"file for {params['Key']!r} changed size during upload")
        resp: dict[str, Any] = self.client.upload_part(Body=body, **params)
        return str(resp["ETag"])

    def upload_part(
        self, fd: int, offset: int, length: int, params: dict[str, Any]
    ) -> concurrent.futures.Future[str]:
        """Queue one ``UploadPart`` of ``length`` bytes of ``fd`` from ``offset``: its future, whose result
        is the part's ETag. The caller hands ``fd`` over (a descriptor of its own, e.g. a ``dup``): the
        worker closes it after reading, or the future's cancellation before the worker started does.
        Raises :class:`InvalidRequestError` once closed (``fd`` is closed then too).
        """
        try:
            future = self.uploads.submit(self._upload_part, fd, offset, length, params)
        except RuntimeError as err:
            os.close(fd)
            raise InvalidRequestError("S3 object store is closed") from err

        def never_started(done: concurrent.futures.Future[str]) -> None:
            if done.cancelled():
                os.close(fd)

        future.add_done_callback(never_started)
        return future

    def close(self) -> None:
        """Drop queued requests, wait for running ones (each bounded by the client's timeouts), close the
        client. Blocking: call it from a thread."""
        for pool in (self.reads, self.uploads):  # both stop taking work, then both are waited for
            pool.shutdown(wait=False, cancel_futures=True)
        for pool in (self.reads, self.uploads):
            pool.shutdown(wait=True)
        self.client.close()


def _bridged(handler: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    """``handler`` for the threaded client's events: a coroutine it returns is run on ``loop`` (where the
    aiobotocore client would have awaited it) and its result handed back to botocore."""

    def call(**kwargs: Any) -> Any:
        result = handler(**kwargs)
        if inspect.isawaitable(result):

            async def wait() -> Any:
                return await result

            return asyncio.run_coroutine_threadsafe(wait(), loop).result()
        return result

    return call


class S3ObjectStore:
    """:class:`~tierlog.tiering.remote.object_store.ObjectStore` over one bucket of an S3-compatible service.

    The clients are created lazily on first use (so construction does no I/O) and released by
    :meth:`close`. All methods are safe to call concurrently; ``max_pool_connections`` bounds the
    HTTP connections of the aiobotocore client, ``read_threads`` the ranged GETs (:meth:`get_range`)
    and ``upload_threads`` the multipart parts running at once on the threaded client (see the module
    docstring). ``page_size`` is the ``MaxKeys``
    of each listing request. ``event_handlers`` are ``(event name, handler)`` pairs registered on both
    clients' event systems (for request customisation, and for tests that make a real client see a
    failure); on the threaded client a handler runs in a worker thread, and a coroutine it returns is
    awaited on the store's event loop.
    ``conditional_writes=False`` is the fallback for services without ``If-None-Match`` support (see
    :meth:`put_if_absent`).
    """

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        path_style: bool | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        part_size: int = DEFAULT_PART_SIZE,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        upload_concurrency: int = 4,
        page_size: int = 1000,
        max_pool_connections: int = 16,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        botocore_max_attempts: int = 1,
        event_handlers: Sequence[tuple[str, Callable[..., Any]]] = (),
        conditional_writes: bool = True,
        read_threads: int = DEFAULT_READ_THREADS,
        upload_threads: int = DEFAULT_UPLOAD_THREADS,
    ) -> None:
        if not bucket:
            raise InvalidRequestError("S3 bucket name is empty")
        if part_size <= 0 or multipart_threshold < 0 or upload_concurrency <= 0 or page_size <= 0:
            raise InvalidRequestError("S3 part size, threshold, concurrency and page size must be positive")
        if read_threads <= 0 or upload_threads <= 0:
            raise InvalidRequestError("S3 read and upload threads must be positive")
        self.bucket = bucket
        self.endpoint_url = endpoint_url or endpoint_from_env()
        self.path_style = (self.endpoint_url is not None) if path_style is None else path_style
        self._region = region
        self._credentials = {
            k: v
            for k, v in {
                "aws_access_key_id": access_key_id,
                "aws_secret_access_key": secret_access_key,
                "aws_session_token": session_token,
            }.items()
            if v is not None
        }
        self.part_size = part_size
        self.multipart_threshold = multipart_threshold
        self.upload_concurrency = upload_concurrency
        self.page_size = page_size
        self.read_threads = read_threads
        self.upload_threads = upload_threads
        settings: dict[str, Any] = {
            "s3": {"addressing_style": "path" if self.path_style else "auto"},
            "retries": {"total_max_attempts": botocore_max_attempts, "mode": "standard"},
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
        self._config = AioConfig(max_pool_connections=max_pool_connections, **settings)
        self._threaded_config = botocore.config.Config(
            max_pool_connections=read_threads + upload_threads, **settings
        )
        self._event_handlers = tuple(event_handlers)
        self.conditional_writes = conditional_writes
        # aiobotocore's S3 client: its operations are generated at runtime from botocore's service model
        # and the package ships no type information, so Any is the honest type (types-aiobotocore-s3
        # stubs would give it one).
        self._client: Any = None
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._threaded: _Threaded | None = None
        # the follow-up aborts of uploads whose parts were still running when they failed (see _multipart)
        self._follow_ups: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self.bucket!r}, endpoint_url={self.endpoint_url!r})"

    async def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._closed:
                raise InvalidRequestError("S3 object store is closed")
            if self._client is None:
                if self._threaded is None:  # made with the other client, so a warm-up call warms both
                    self._threaded = await self._create_threaded()
                stack = contextlib.AsyncExitStack()
                with translating("connect", self.bucket):
                    creator = get_session().create_client(
                        "s3",
                        endpoint_url=self.endpoint_url,
                        region_name=self._region,
                        config=self._config,
                        **self._credentials,
                    )
                    client = await stack.enter_async_context(creator)
                for event, handler in self._event_handlers:
                    client.meta.events.register(event, handler)
                self._client = client
                self._exit_stack = stack
        return self._client

    async def _get_threaded(self) -> _Threaded:
        threaded = self._threaded
        if threaded is None:
            await self._get_client()
            threaded = self._threaded
            if threaded is None:  # closed meanwhile
                raise InvalidRequestError("S3 object store is closed")
        return threaded

    async def _create_threaded(self) -> _Threaded:
        with translating("connect", self.bucket):
            # creating a client loads botocore's service model from disk: not on the loop
            client = await asyncio.to_thread(self._create_threaded_client)
        loop = asyncio.get_running_loop()
        for event, handler in self._event_handlers:
            client.meta.events.register(event, _bridged(handler, loop))
        return _Threaded(client, self.read_threads, self.upload_threads)

    def _create_threaded_client(self) -> Any:
        return botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self._region,
            config=self._threaded_config,
            **self._credentials,
        )

    async def close(self) -> None:
        """Close the worker threads (dropping queued requests, waiting for running ones, each bounded by
        the connect and read timeouts), wait for the follow-up aborts of failed uploads (see the module
        docstring), then close both HTTP clients. An upload whose queued parts close dropped fails.
        Idempotent.
        """
        async with self._lock:
            self._closed = True
            stack, self._exit_stack, self._client = self._exit_stack, None, None
            threaded, self._threaded = self._threaded, None
        if threaded is not None:  # first: an upload failing meanwhile schedules its aborts before the drain
            await asyncio.to_thread(threaded.close)
        while self._follow_ups:  # on the aiobotocore client, still open
            await asyncio.gather(*self._follow_ups, return_exceptions=True)
        if stack is not None:
            await stack.aclose()

    # -- writes ----------------------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`."""
        validate_key(key)
        client = await self._get_client()
        with translating("put", key):
            await client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent`: ``PutObject`` with ``If-None-Match: *``.

        Services known to honour the header: AWS S3 (since 2024), MinIO, LocalStack (the contract suite's
        race test checks each backend it runs against). moto honours it but not atomically: two racing
        writers can both be told they created the key, so the test suite runs moto with its writes locked.
        A service that answers ``NotImplemented`` raises :class:`InvalidRequestError` naming the fallback.
        With ``conditional_writes=False`` the store falls back to HEAD-then-PUT, which is **not** safe
        against concurrent writers: use it only where a single broker writes each partition's manifest.
        """
        validate_key(key)
        if not self.conditional_writes:
            try:
                await self.head(key)
                return False
            except NotFoundError:
                await self.put(key, data)
                return True
        client = await self._get_client()
        try:
            with translating("put_if_absent", key):
                await client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data), IfNoneMatch="*")
        except ConflictError:
            return False  # 412 PreconditionFailed: the key exists
        except UnavailableError as err:
            cause = err.__cause__
            if isinstance(cause, ClientError) and s3_error_code(cause)[0] == "NotImplemented":
                raise InvalidRequestError(
                    f"{self.endpoint_url or 'the S3 service'} does not support conditional writes "
                    "(If-None-Match); conditional_writes=False is a single-writer-only fallback"
                ) from err
            raise
        return True

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`: one ``PutObject`` up to ``multipart_threshold`` bytes, else a
        multipart upload with ``part_size`` parts and ``upload_concurrency`` parallel part uploads.
        """
        validate_key(key)
        with translating("put_file", key):
            size = (await asyncio.to_thread(os.stat, path)).st_size
        if size <= self.multipart_threshold:
            with translating("put_file", key):
                data = await asyncio.to_thread(Path(path).read_bytes)
            await self.put(key, data)
            return
        client = await self._get_client()
        threaded = await self._get_threaded()
        with translating("put_file", key):
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY)
        try:
            await self._multipart(client, threaded, key, fd, size)
        finally:
            os.close(fd)  # never blocks, and must run even if this task is being cancelled

    async def _multipart(self, client: Any, threaded: _Threaded, key: str, fd: int, size: int) -> None:
        """Create, upload ``upload_concurrency`` parts at a time on the upload threads, complete; on any
        failure or cancellation abort at once, and again once the parts still running have ended."""
        with translating("create_multipart_upload", key):
            created = await client.create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id: str = created["UploadId"]
        part_count = (size + self.part_size - 1) // self.part_size
        etags: dict[int, str] = {}
        next_part = iter(range(1, part_count + 1))
        sent: list[concurrent.futures.Future[str]] = []

        async def worker() -> None:
            for number in next_part:  # a shared iterator: each part is taken by exactly one worker
                offset = (number - 1) * self.part_size
                length = min(self.part_size, size - offset)
                params = {"Bucket": self.bucket, "Key": key, "UploadId": upload_id, "PartNumber": number}
                with translating("upload_part", key):
                    # each part reads through a descriptor of its own: ``fd`` is closed when put_file
                    # returns, which may be before a part still running in its thread has read
                    part = threaded.upload_part(os.dup(fd), offset, length, params)
                    sent.append(part)
                    try:
                        etags[number] = await asyncio.wrap_future(part)
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise  # this upload is cancelled
                        # the part was dropped from the queue by close(): a failure, not a cancellation
                        # (the task group would ignore a worker that ends cancelled)
                        raise InvalidRequestError("S3 object store is closed") from None

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.upload_concurrency, part_count)):
                    group.create_task(worker())
            if len(etags) != part_count:  # never completes an object with a part missing
                raise InvalidRequestError(f"{part_count - len(etags)} parts of {key!r} were not uploaded")
            parts = [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]
            with translating("complete_multipart_upload", key):
                await client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
        except BaseException as err:
            for part in sent:
                part.cancel()  # the queued ones never start
            running = [part for part in sent if not part.done()]  # before the abort: in flight during it
            aborted = asyncio.ensure_future(self._abort(client, key, upload_id))
            follow_up = asyncio.create_task(self._abort_after(aborted, running, client, key, upload_id))
            self._follow_ups.add(follow_up)  # owns the first abort too, should this wait be cancelled
            follow_up.add_done_callback(self._follow_ups.discard)
            await asyncio.shield(aborted)
            if isinstance(err, BaseExceptionGroup):
                # TaskGroup wraps worker failures; surface the first one as the tierlog kind it already is.
                first = err.exceptions[0]
                raise first from first.__cause__
            raise

    async def _abort(self, client: Any, key: str, upload_id: str) -> None:
        with contextlib.suppress(Exception):
            await client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    async def _abort_after(
        self,
        first: asyncio.Future[None],
        running: list[concurrent.futures.Future[str]],
        client: Any,
        key: str,
        upload_id: str,
    ) -> None:
        """Once the ``first`` abort of ``upload_id`` has ended, wait for the parts that were ``running`` when
        the upload failed and, if there were any, abort again (a part in flight during an abort may still
        be stored). Owned by :meth:`close`."""
        await first
        if not running:
            return
        ended = [asyncio.wrap_future(part) for part in running]
        await asyncio.wait(ended)
        for part in ended:  # their errors were the upload's to report, and it has ended
            if not part.cancelled():
                part.exception()
        await self._abort(client, key, upload_id)

    # -- reads -----------------------------------------------------------------------------------

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        validate_key(key)
        client = await self._get_client()
        with translating("get", key):
            resp = await client.get_object(Bucket=self.bucket, Key=key)
            async with resp["Body"] as body:
                data: bytes = await body.read()
        return data

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`: a ``Range: bytes=start-(end-1)`` GET; 416 means past the end.

        Runs on the threaded botocore client (see the module docstring); at most ``read_threads`` run at
        once, more wait their turn. Cancelling the caller does not abort a GET already running: its
        result is dropped. Idempotent; safe to call concurrently.
        """
        validate_range(start, end)
        validate_key(key)
        if end is not None and end == start:
            return b""
        header = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        threaded = await self._get_threaded()
        try:
            with translating("get_range", key):
                data, resp = await threaded.get(self.bucket, key, header)
        except Exception as err:
            cause = err.__cause__
            if isinstance(cause, ClientError) and s3_error_code(cause)[0] == "InvalidRange":
                return b""  # the key exists (else NoSuchKey) and start is at or past its end
            raise
        if start == 0 and end is None:
            return data
        # A service that ignores Range answers 200 with the whole object: slice it ourselves.
        if resp.get("ContentRange") is None and resp["ResponseMetadata"]["HTTPStatusCode"] == 200:
            return data[start:end]
        return data

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        validate_key(key)
        client = await self._get_client()
        with translating("head", key):
            resp = await client.head_object(Bucket=self.bucket, Key=key)
        return ObjectInfo(
            key=key,
            size=int(resp["ContentLength"]),
            etag=str(resp["ETag"]),
            last_modified=resp["LastModified"],
        )

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`: ``ListObjectsV2`` pages of ``page_size`` keys, fetched lazily."""
        validate_prefix(prefix)
        client = await self._get_client()
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": self.page_size}
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        while True:
            with translating("list", prefix):
                page = await client.list_objects_v2(**kwargs)
            for item in page.get("Contents", ()):
                yield ObjectInfo(
                    key=item["Key"],
                    size=int(item["Size"]),
                    etag=str(item.get("ETag", "")),
                    last_modified=item["LastModified"],
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            kwargs.pop("StartAfter", None)
            kwargs["ContinuationToken"] = token

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete` (S3 deletes are idempotent)."""
        validate_key(key)
        client = await self._get_client()
        with translating("delete", key):
            await client.delete_object(Bucket=self.bucket, Key=key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`: ``DeleteObjects`` in batches of 1000 keys.

        Raises the kind of the first per-key error the service reports.
        """
        keys = [validate_key(k) for k in keys]
        if not keys:
            return
        client = await self._get_client()
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = keys[i : i + _DELETE_BATCH]
            with translating("delete_many", batch[0]):
                resp = await client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                errors = [e for e in resp.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
                if errors:
                    first = errors[0]
                    raise ClientError(
                        {"Error": {"Code": first.get("Code", ""), "Message": ""}, "ResponseMetadata": {}},
                        "DeleteObjects",
                    )
