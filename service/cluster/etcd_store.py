"""The :class:`~tierlog.service.cluster.metadata_store.MetadataStore` on a real etcd 3.5 cluster, through
``aetcd``.

Every key lives under ``/<prefix>/`` (the metadata URI's prefix), so one etcd can hold several clusters.
Reads and transactions go to etcd's KV service directly (its response header carries the revision the
contract returns); leases and watches use ``aetcd``'s client. Every ``aetcd``, gRPC or connection error
becomes a :class:`MetadataStoreError`, raised ``from`` the original; a lease etcd does not know (expired
or revoked) becomes :class:`LeaseExpiredError`.

Endpoints are tried in the URI's order when connecting; after a connection error the next operation
connects again, from the first endpoint.

TLS (``metadata.ssl.cafile``, optionally with ``metadata.ssl.certfile``/``keyfile`` for etcd's
``--client-cert-auth``): ``aetcd`` only opens plaintext channels, so :class:`_TlsClient` opens a
``grpc.aio.secure_channel`` instead, with the same channel options. The PEM files are read (off the event
loop) on every connect, so a rotated certificate is used from the next reconnect on. etcd's certificate must
name the host of the endpoint (an ``IP`` subject alternative name for an address).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import aetcd
import grpc
from aetcd import rpc, watcher
from aetcd.utils import prefix_range_end

from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    KeyValue,
    LeaseExpiredError,
    LeaseTime,
    MetadataStore,
    MetadataStoreError,
    Op,
    Put,
    WatchEvent,
)
from tierlog.service.settings.config import MetadataUri

if TYPE_CHECKING:
    from tierlog.service.settings.config import Settings

__all__ = ["EtcdMetadataStore", "EtcdTls"]

_CONNECTION_ERRORS = (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError)
_CANCEL_TIMEOUT_S = 2.0
# HTTP/2 pings on open streams, so a watch on a silently dead connection breaks instead of waiting forever;
# not more often than etcd's --grpc-keepalive-min-time (5 s by default) allows. Subchannels of the
# channel's own: gRPC otherwise shares them process-wide, so a fresh client after etcd comes back inherits
# the failed connection's reconnect backoff (up to 2 minutes) and answers "connection refused" without
# trying; reconnects inside one channel back off at most 1 s.
_CHANNEL_OPTIONS = {
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.use_local_subchannel_pool": 1,
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1_000,
}


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """How to reach etcd over TLS: the CA bundle that signed etcd's certificate and, for etcd's
    ``--client-cert-auth``, this client's certificate chain and key (PEM files)."""

    cafile: Path
    certfile: Path | None = None
    keyfile: Path | None = None

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("an etcd client certificate needs both its certfile and its keyfile")

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the PEM files. Blocking file reads: call in a worker thread.

        Raises:
            OSError: a file cannot be read.
        """
        return grpc.ssl_channel_credentials(
            root_certificates=self.cafile.read_bytes(),
            private_key=None if self.keyfile is None else self.keyfile.read_bytes(),
            certificate_chain=None if self.certfile is None else self.certfile.read_bytes(),
        )


class _TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd ships no type hints
    """``aetcd.Client`` over a TLS channel. aetcd's own ``connect`` only opens plaintext channels; this one
    opens a secure channel with ``credentials`` and the same stubs. No etcd user authentication (the
    store never uses it: etcd authenticates the client certificate)."""

    def __init__(self, credentials: grpc.ChannelCredentials, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._credentials = credentials

    async def connect(self) -> None:
        """Open the channel (no I/O yet: gRPC connects on the first call). Idempotent."""
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        self.channel = rpc.secure_channel(target, self._credentials, options=list(self._options.items()))
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout)
        self._connected.set()


class EtcdMetadataStore(MetadataStore):
    """The metadata store in etcd (see the module doc). Use from one event loop.

    ``connect_timeout_s`` bounds reaching each endpoint on connect; ``request_timeout_s`` bounds every
    request (a watch stream itself has no deadline). ``tls``: reach etcd over TLS (None: plaintext).
    """

    def __init__(
        self,
        uri: MetadataUri,
        *,
        tls: EtcdTls | None = None,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 10.0,
    ) -> None:
        if not uri.endpoints:
            raise ValueError(f"the metadata URI {uri} names no endpoint")
        self._uri = uri
        self._tls = tls
        self._root = f"/{uri.prefix.strip('/')}/"
        self._connect_timeout_s = connect_timeout_s
        self._timeout_s = request_timeout_s
        self._client: Any = None  # aetcd.Client once connected
        self._connect_lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # old clients being closed after a connection error
        self._started = False
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings) -> EtcdMetadataStore:
        """The store ``metadata.uri`` names, over TLS when ``metadata.ssl.cafile`` is set. Pure (nothing is
        read or connected before :meth:`start`). Raises ValueError when ``metadata.uri`` is not etcd's."""
        uri = settings.metadata_uri
        if uri is None or uri.scheme == "file":
            raise ValueError("metadata.uri does not name an etcd cluster")
        security = settings.security
        tls = None
        if security.metadata_ssl_cafile is not None:
            tls = EtcdTls(
                security.metadata_ssl_cafile, security.metadata_ssl_certfile, security.metadata_ssl_keyfile
            )
        return cls(uri, tls=tls)

    # lifecycle

    async def start(self) -> None:
        """Connect to the first endpoint that answers. Idempotent. Raises MetadataStoreError (none answers,
        or the store is closed)."""
        if self._closed:
            raise MetadataStoreError("the metadata store is closed")
        self._started = True
        await self._connected()

    async def close(self) -> None:
        """Close the connection; every watch's iterator stops. Idempotent."""
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await _close_quietly(client)
        if self._closing:
            await asyncio.gather(*self._closing)

    # reads

    async def get(self, key: str) -> KeyValue | None:
        request = rpc.RangeRequest(key=self._full(key))
        response = await self._call("get", "kvstub", "Range", request)
        if not response.kvs:
            return None
        return self._key_value(response.kvs[0])

    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        full = self._full(prefix)
        request = rpc.RangeRequest(
            key=full,
            range_end=prefix_range_end(full),
            sort_order=rpc.RangeRequest.ASCEND,
            sort_target=rpc.RangeRequest.KEY,
        )
        response = await self._call("range", "kvstub", "Range", request)
        return [self._key_value(kv) for kv in response.kvs], int(response.header.revision)

    # writes

    async def commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int | None:
        request = rpc.TxnRequest(
            compare=[self._compare(c) for c in compares], success=[self._request_op(op) for op in ops]
        )
        response = await self._call("commit", "kvstub", "Txn", request, leases=True)
        return int(response.header.revision) if response.succeeded else None

    async def grant_lease(self, ttl_seconds: int) -> int:
        """A new lease (etcd may round a very short TTL up to its minimum). Raises ValueError for
        ``ttl_seconds < 1``, MetadataStoreError."""
        if ttl_seconds < 1:
            raise ValueError(f"a lease TTL must be at least 1 s, got {ttl_seconds}")
        response = await self._call(
            "grant_lease", "leasestub", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl_seconds)
        )
        if response.error:
            raise MetadataStoreError(f"etcd refused a lease: {response.error}")
        return int(response.ID)

    async def keep_alive(self, lease: int) -> None:
        client = await self._connected()
        with self._errors("keep_alive", leases=True):
            async with asyncio.timeout(self._timeout_s):  # not wait_for: 3.11's can swallow a cancel
                reply = await client.refresh_lease(lease)
        if reply is None or reply.TTL <= 0:
            raise LeaseExpiredError(f"lease {lease} is unknown to etcd (expired or revoked)")

    async def lease_time(self, lease: int) -> LeaseTime:
        response = await self._call(
            "lease_time", "leasestub", "LeaseTimeToLive", rpc.LeaseTimeToLiveRequest(ID=lease), leases=True
        )
        if int(response.TTL) < 0:
            raise LeaseExpiredError(f"lease {lease} is unknown to etcd (expired or revoked)")
        return LeaseTime(int(response.grantedTTL), int(response.TTL))

    async def revoke_lease(self, lease: int) -> None:
        with contextlib.suppress(LeaseExpiredError):
            await self._call(
                "revoke_lease", "leasestub", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease), leases=True
            )

    # watches

    def watch(self, prefix: str, start_revision: int) -> AsyncGenerator[WatchEvent, None]:
        """See :meth:`MetadataStore.watch`; an async generator, so ``aclose`` stops it."""
        return self._watch(prefix, max(start_revision, 1))

    async def _watch(self, prefix: str, start_revision: int) -> AsyncGenerator[WatchEvent, None]:
        client = await self._connected()
        full = self._full(prefix)
        with self._errors(f"watch of {prefix!r} from revision {start_revision}"):
            handle = await client.watch(full, range_end=prefix_range_end(full), start_revision=start_revision)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # aetcd waits for the watch's creation with asyncio.wait_for, which on Python 3.11 answers the
            # result and drops the cancel when one arrives as the watch is created: the task would then wait
            # on the watch for ever (a close awaiting it hung). The cancel is still requested: honour it.
            await _cancel_watch(handle)
            raise asyncio.CancelledError
        try:
            with self._errors(f"watch of {prefix!r}"):
                async for event in handle:
                    yield self._event(event)
        finally:
            await _cancel_watch(handle)
        if not self._closed:
            raise MetadataStoreError(f"the watch of {prefix!r} ended (the etcd connection was closed)")

    # internals

    def _full(self, key: str) -> bytes:
        return (self._root + key).encode()

    def _relative(self, key: bytes) -> str:
        return key.decode().removeprefix(self._root)

    def _key_value(self, kv: Any) -> KeyValue:
        return KeyValue(
            self._relative(kv.key),
            bytes(kv.value),
            int(kv.create_revision),
            int(kv.mod_revision),
            int(kv.version),
            int(kv.lease),
        )

    def _event(self, event: Any) -> WatchEvent:
        kv = event.kv
        if event.kind == "DELETE":
            return WatchEvent("delete", self._relative(kv.key), b"", int(kv.mod_revision))
        return WatchEvent("put", self._relative(kv.key), bytes(kv.value), int(kv.mod_revision))

    def _compare(self, compare: Compare) -> Any:
        if compare.mod_revision == 0:
            # "the key does not exist": etcd reports create_revision 0 for a missing key
            return rpc.Compare(
                key=self._full(compare.key),
                result=rpc.Compare.EQUAL,
                target=rpc.Compare.CREATE,
                create_revision=0,
            )
        return rpc.Compare(
            key=self._full(compare.key),
            result=rpc.Compare.EQUAL,
            target=rpc.Compare.MOD,
            mod_revision=compare.mod_revision,
        )

    def _request_op(self, op: Op) -> Any:
        if isinstance(op, Put):
            return rpc.RequestOp(
                request_put=rpc.PutRequest(key=self._full(op.key), value=op.value, lease=op.lease)
            )
        assert isinstance(op, Delete)
        full = self._full(op.key)
        if op.prefix:
            request = rpc.DeleteRangeRequest(key=full, range_end=prefix_range_end(full))
        else:
            request = rpc.DeleteRangeRequest(key=full)
        return rpc.RequestOp(request_delete_range=request)

    async def _call(self, what: str, stub: str, method: str, request: Any, *, leases: bool = False) -> Any:
        client = await self._connected()
        with self._errors(what, leases=leases):
            return await getattr(getattr(client, stub), method)(
                request, timeout=self._timeout_s, metadata=client.metadata
            )

    async def _connected(self) -> Any:
        """The connected client; connects (endpoints in order) when there is none."""
        if self._closed:
            raise MetadataStoreError("the metadata store is closed")
        if not self._started:
            raise MetadataStoreError("the metadata store is not started (call start() first)")
        if self._client is not None:
            return self._client
        async with self._connect_lock:
            if self._client is None:
                self._client = await self._connect_any()
            return self._client

    async def _connect_any(self) -> Any:
        credentials = await self._credentials()
        failures: list[str] = []
        for host, port in self._uri.endpoints:
            if credentials is None:
                client = aetcd.Client(host=host, port=port, timeout=self._timeout_s, options=_CHANNEL_OPTIONS)
            else:
                client = _TlsClient(
                    credentials, host=host, port=port, timeout=self._timeout_s, options=_CHANNEL_OPTIONS
                )
            try:
                await client.connect()
                probe = rpc.RangeRequest(key=self._full(""), count_only=True)
                await client.kvstub.Range(probe, timeout=self._connect_timeout_s)
            except (aetcd.ClientError, rpc.AioRpcError, OSError, TimeoutError) as err:
                failures.append(f"{host}:{port}: {_describe(err)}")
                with contextlib.suppress(Exception):
                    await client.close()
                continue
            return client
        over = "TLS" if credentials is not None else "plaintext (metadata.ssl.cafile is unset)"
        raise MetadataStoreError(f"cannot reach etcd at {self._uri} over {over}: {'; '.join(failures)}")

    async def _credentials(self) -> grpc.ChannelCredentials | None:
        """The TLS channel credentials (None: plaintext). Raises MetadataStoreError: a PEM file cannot be
        read."""
        if self._tls is None:
            return None
        try:
            return await asyncio.to_thread(self._tls.credentials)
        except OSError as err:
            raise MetadataStoreError(
                f"cannot read the etcd TLS files ({err.filename or 'metadata.ssl.*'}): {err.strerror or err}"
            ) from err

    @contextlib.contextmanager
    def _errors(self, what: str, *, leases: bool = False) -> Iterator[None]:
        """Translate every vendor error raised inside into MetadataStoreError (LeaseExpiredError for an
        unknown lease when ``leases``); a connection error also drops the client so the next call
        reconnects."""
        try:
            yield
        except MetadataStoreError:
            raise
        except aetcd.RevisionCompactedError as err:
            raise MetadataStoreError(
                f"etcd {what}: revisions below {err.compacted_revision} are compacted"
            ) from err
        except (aetcd.ClientError, rpc.AioRpcError, OSError, TimeoutError) as err:
            self._raise(what, err, leases)

    def _raise(self, what: str, err: BaseException, leases: bool) -> NoReturn:
        cause = err.__cause__ if isinstance(err, aetcd.ClientError) else err
        code = cause.code() if isinstance(cause, rpc.AioRpcError) else None
        if leases and code == rpc.StatusCode.NOT_FOUND:
            raise LeaseExpiredError(f"etcd {what}: the lease is unknown (expired or revoked)") from err
        if isinstance(err, _CONNECTION_ERRORS) or code in (
            rpc.StatusCode.UNAVAILABLE,
            rpc.StatusCode.DEADLINE_EXCEEDED,
        ):
            self._drop_client()
        raise MetadataStoreError(f"etcd {what} failed: {_describe(err)}") from err

    def _drop_client(self) -> None:
        """Forget the client after a connection error; the next call connects again. The old client is
        closed in the background (its watches break: they raise MetadataStoreError)."""
        client, self._client = self._client, None
        if client is not None:
            task = asyncio.get_running_loop().create_task(_close_quietly(client))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)


async def _cancel_watch(handle: Any) -> None:
    """Cancel an aetcd watch, within ``_CANCEL_TIMEOUT_S``; errors are ignored (the stream may be gone)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_CANCEL_TIMEOUT_S):
            await handle.cancel()


async def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.close()


def _describe(err: BaseException) -> str:
    if isinstance(err, rpc.AioRpcError):
        return f"{err.code().name}: {err.details()}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
