"""Where ``tierlog users|acls`` act: a metadata store opened offline, or a running broker's v3 API.

Both targets answer the same calls (:class:`Target`), so the commands in :mod:`.cli` do not care which one
the options named. Offline, a :class:`~tierlog.service.security.security_store.SecurityStore` is opened on
the store
itself (refused with :class:`TargetError` while a broker holds its file); online, requests go through
aiohttp with the client's TLS context and ``Authorization`` header. A password is hashed into a SCRAM
credential offline, or sent to the broker (over the connection the security options protect) online; it is
never printed or logged.
"""

from __future__ import annotations

import abc
import asyncio
import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from tierlog.client.security import ClientSecurity
from tierlog.service.cluster.etcd_store import EtcdMetadataStore, EtcdTls
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.admin_routes import ACL_FIELDS
from tierlog.service.security.model import AclBinding, AclFilter
from tierlog.service.security.scram import ScramCredential, make_credential
from tierlog.service.security.security_store import SecurityStore
from tierlog.service.settings.config import parse_metadata_uri
from tierlog.service.topics.data_dir import CLUSTER_METADATA_FILE
from tierlog.wire.errors import UnavailableError, error_from_answer

__all__ = ["BrokerTarget", "OfflineTarget", "Target", "TargetError", "UserInfo"]

REQUEST_TIMEOUT_S = 30.0


class TargetError(Exception):
    """The target cannot be used as named (a broker holds the offline store, the directory is missing)."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A user as listed: its name and, per mechanism, the iteration count."""

    name: str
    mechanisms: tuple[tuple[str, int], ...]


class Target(abc.ABC):
    """What the commands act on. Use from one event loop: :meth:`open`, the calls, then :meth:`close`.

    Every call raises a TierlogError for what the store or the broker refused (NotFoundError for an unknown
    user, InvalidRequestError for an invalid value, UnavailableError when it cannot be reached)."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect. Raises TargetError, TierlogError."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything. Idempotent."""

    @abc.abstractmethod
    async def list_users(self) -> list[UserInfo]: ...

    @abc.abstractmethod
    async def put_user(self, name: str, password: str, mechanism: str, iterations: int) -> bool:
        """Create ``name`` or replace its password: its one credential becomes the one of ``mechanism``
        (another mechanism's is dropped); whether the user is new."""

    @abc.abstractmethod
    async def remove_user(self, name: str) -> None: ...

    @abc.abstractmethod
    async def list_acls(self, f: AclFilter) -> list[AclBinding]: ...

    @abc.abstractmethod
    async def create_acls(self, bindings: Sequence[AclBinding]) -> None: ...

    @abc.abstractmethod
    async def delete_acls(self, f: AclFilter) -> list[AclBinding]: ...


def _lock_held(lock_path: Path) -> bool:
    """Whether another process holds ``lock_path`` (a LocalMetadataStore's lock). Blocking I/O."""
    if not lock_path.parent.is_dir():
        return False
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's lock
    return False


class OfflineTarget(Target):
    """A :class:`SecurityStore` opened on the metadata store itself (no broker involved)."""

    def __init__(
        self, store: SecurityStore, *, lock_path: Path | None, running: str, create: Path | None
    ) -> None:
        self._store = store
        self._lock_path = lock_path
        self._running = running
        self._create = create
        self._opened = False

    @classmethod
    def data_dir(cls, raw: str, *, create: bool) -> OfflineTarget:
        """The local metadata store of the broker data directory ``raw`` (a broker without
        ``metadata.uri``); ``create`` makes the directory if it does not exist (else opening it is a
        TargetError)."""
        data_dir = Path(raw).expanduser().absolute()
        path = data_dir / CLUSTER_METADATA_FILE
        store = SecurityStore(LocalMetadataStore(path), owns_store=True)
        running = f"the broker at {data_dir} is running: use --bootstrap-server"
        return cls(store, lock_path=_lock_of(path), running=running, create=data_dir if create else None)

    @classmethod
    def metadata_uri(cls, raw: str, *, etcd_tls: EtcdTls | None = None) -> OfflineTarget:
        """The store of ``metadata.uri`` ``raw`` (etcd:// or file://); etcd over TLS with ``etcd_tls``.
        Raises ValueError for a bad URI, or TLS options with a file:// URI."""
        uri = parse_metadata_uri(raw)
        if uri.scheme == "file" and etcd_tls is not None:
            raise ValueError("the --metadata-ssl-* options are for an etcd:// metadata URI")
        if uri.scheme == "file":
            assert uri.path is not None
            store = SecurityStore(LocalMetadataStore(uri.path), owns_store=True)
            running = f"the broker using {uri.path} is running: use --bootstrap-server"
            return cls(store, lock_path=_lock_of(uri.path), running=running, create=None)
        return cls(
            SecurityStore(EtcdMetadataStore(uri, tls=etcd_tls), owns_store=True),
            lock_path=None,
            running="",
            create=None,
        )

    async def open(self) -> None:
        if self._lock_path is not None:
            directory = self._lock_path.parent
            if self._create is not None:
                await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
            elif not await asyncio.to_thread(directory.is_dir):
                raise TargetError(f"{directory} does not exist")
            if await asyncio.to_thread(_lock_held, self._lock_path):
                raise TargetError(self._running)
        await self._store.start()
        self._opened = True

    async def close(self) -> None:
        if self._opened:
            self._opened = False
            await self._store.close()

    async def list_users(self) -> list[UserInfo]:
        found = []
        for name in self._store.user_names():
            credentials = self._store.user(name)
            if credentials is not None:
                found.append(_user_info(name, credentials))
        return found

    async def put_user(self, name: str, password: str, mechanism: str, iterations: int) -> bool:
        credential = await asyncio.to_thread(make_credential, password, mechanism, iterations)
        return await self._store.put_user(name, credential)

    async def remove_user(self, name: str) -> None:
        await self._store.remove_user(name)

    async def list_acls(self, f: AclFilter) -> list[AclBinding]:
        return self._store.acls.select(f)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await self._store.create_acls(bindings)

    async def delete_acls(self, f: AclFilter) -> list[AclBinding]:
        return await self._store.delete_acls(f)


def _lock_of(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _user_info(name: str, credentials: dict[str, ScramCredential]) -> UserInfo:
    return UserInfo(name, tuple((m, credentials[m].iterations) for m in sorted(credentials)))


class BrokerTarget(Target):
    """A running broker's v3 API (the first of ``urls`` that answers), with ``security``'s TLS context and
    credentials."""

    def __init__(self, urls: Sequence[str], security: ClientSecurity) -> None:
        self._urls = tuple(urls)
        self._security = security
        self._session: aiohttp.ClientSession | None = None
        self._base = ""

    async def open(self) -> None:
        ssl = await asyncio.to_thread(self._security.connector_ssl)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl),
            headers=self._security.headers(),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )
        failures = []
        for url in self._urls:
            try:
                clusters = await self._request("GET", f"{url}/v3/clusters")
            except (aiohttp.ClientError, TimeoutError) as err:
                failures.append(f"{url}: {err or type(err).__name__}")
                continue
            self._base = f"{url}/v3/clusters/{clusters['data'][0]['cluster_id']}"
            return
        raise UnavailableError("no broker answered: " + "; ".join(failures))

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _request(
        self, method: str, url: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Any:
        """The JSON answer (None for an empty one). Raises the TierlogError an error answer carries,
        aiohttp.ClientError / TimeoutError when the broker cannot be reached."""
        assert self._session is not None, "open() first"
        async with self._session.request(method, url, params=params, json=body) as resp:
            payload = await resp.read()
            if resp.status >= 400:
                raise error_from_answer(resp.status, payload)
            return await resp.json() if payload else None

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return await self._request(method, self._base + path, **kwargs)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UnavailableError(f"{method} {self._base + path}: {err or type(err).__name__}") from err

    async def list_users(self) -> list[UserInfo]:
        answer = await self._call("GET", "/users")
        return [
            UserInfo(u["name"], tuple((m["mechanism"], int(m["iterations"])) for m in u["mechanisms"]))
            for u in answer["data"]
        ]

    async def put_user(self, name: str, password: str, mechanism: str, iterations: int) -> bool:
        body = {"password": password, "mechanism": mechanism, "iterations": iterations}
        path = "/users/" + quote(name, safe="")
        assert self._session is not None, "open() first"
        try:
            async with self._session.put(self._base + path, json=body) as resp:
                payload = await resp.read()
                if resp.status >= 400:
                    raise error_from_answer(resp.status, payload)
                return resp.status == 201
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UnavailableError(f"PUT {self._base + path}: {err or type(err).__name__}") from err

    async def remove_user(self, name: str) -> None:
        await self._call("DELETE", "/users/" + quote(name, safe=""))

    async def list_acls(self, f: AclFilter) -> list[AclBinding]:
        answer = await self._call("GET", "/acls", params=_query(f, fill_any=False))
        return [_binding(entry) for entry in answer["data"]]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        data = [{name: _text(getattr(b, name)) for name in ACL_FIELDS} for b in bindings]
        await self._call("POST", "/acls:batch", body={"data": data})

    async def delete_acls(self, f: AclFilter) -> list[AclBinding]:
        answer = await self._call("DELETE", "/acls", params=_query(f, fill_any=True))
        return [_binding(entry) for entry in answer["data"]]


def _text(value: Any) -> str:
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def _query(f: AclFilter, *, fill_any: bool) -> dict[str, str]:
    """The query string of a filter; ``fill_any`` spells the delete's required fields ANY when unset."""
    query = {name: _text(getattr(f, name)) for name in ACL_FIELDS if getattr(f, name) is not None}
    if fill_any:
        for name in ("resource_type", "pattern_type", "operation", "permission"):
            query.setdefault(name, "ANY")
    return query


def _binding(entry: Any) -> AclBinding:
    return validate_binding(*(entry[name] for name in ACL_FIELDS))
