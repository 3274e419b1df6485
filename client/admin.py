"""Topic and group administration over the broker's v3 admin API and native group routes.

Used by the CLI and by the producer's topic auto-creation. Every method is a coroutine on the client's loop,
safe to call concurrently, and raises the typed errors importable from :mod:`tierlog.client` (for example
:class:`~tierlog.wire.errors.UnknownTopicError`, :class:`~tierlog.wire.errors.InvalidConfigError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.client.config import DEFAULT_BOOTSTRAP, bootstrap_urls
from tierlog.client.router import Requester, Router
from tierlog.client.security import ClientSecurity
from tierlog.client.transport import PartitionInfo, TopicMetadata, segment
from tierlog.client.types import TopicPartition
from tierlog.wire.errors import NoSuchRouteError, UnavailableError, UnknownTopicError
from tierlog.wire.native import GROUPS_PREFIX, METADATA_PATH, group_path

__all__ = ["AsyncAdmin", "TopicConfig"]


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    value: str | None
    is_default: bool
    source: str


class AsyncAdmin:
    """Topic and group administration. Use as ``async with AsyncAdmin(url) as admin:``.

    ``bootstrap_servers`` is one URL, a comma-separated string or a list: requests go to a broker that
    answers, the next one when a connection is refused (any broker of a cluster serves admin requests).
    ``security`` is how to reach them (TLS, credentials; see :mod:`tierlog.client.security`).

    Raises (from the constructor): InvalidRequestError for a bad URL or one that contradicts ``security``.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        request_timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
    ) -> None:
        security = ClientSecurity() if security is None else security
        if security.tls and bootstrap_servers == DEFAULT_BOOTSTRAP:
            bootstrap_servers = DEFAULT_BOOTSTRAP.replace("http://", "https://", 1)
        urls = bootstrap_urls(bootstrap_servers, scheme=security.scheme)
        self._router: Router | None = Router(
            urls, request_timeout_ms=request_timeout_ms, security=security.for_urls(urls)
        )
        self._broker: Requester = self._router.any
        self._cluster_id: str | None = None

    @classmethod
    def over(cls, broker: Requester) -> AsyncAdmin:
        """An admin sending through ``broker`` (a BrokerClient or a router's AnyBroker the caller keeps
        owning)."""
        admin = cls.__new__(cls)
        admin._router = None
        admin._broker = broker
        admin._cluster_id = None
        return admin

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections this admin opened (none for one made with :meth:`over`). Idempotent."""
        if self._router is not None:
            await self._router.close()

    async def cluster_id(self) -> str:
        """The broker's cluster id (cached), from the native metadata, which any authenticated caller may
        read (``GET /v3/clusters`` needs Describe on the Cluster). Idempotent."""
        if self._cluster_id is None:
            try:
                answer = await self._broker.json("GET", METADATA_PATH)
                self._cluster_id = str(answer["cluster_id"])
            except NoSuchRouteError:  # a broker older than the native metadata route
                answer = await self._broker.json("GET", "/v3/clusters")
                self._cluster_id = str(answer["data"][0]["cluster_id"])
        return self._cluster_id

    async def _topics_path(self, topic: str | None = None) -> str:
        path = f"/v3/clusters/{segment(await self.cluster_id())}/topics"
        return path if topic is None else f"{path}/{segment(topic)}"

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        """Topic names, sorted; internal topics (``__consumer_offsets``) only with ``internal``."""
        answer = await self._broker.json("GET", await self._topics_path())
        return sorted(t["topic_name"] for t in answer["data"] if internal or not t.get("is_internal"))

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
    ) -> int:
        """Create ``name``; answer its partition count (the broker default when ``partitions`` is None).
        ``replication_factor`` replicas per partition (default: the cluster's default.replication.factor).

        Not idempotent. Raises InvalidConfigError (40002) when it exists, a config is invalid or the
        replication factor is larger than the live brokers.
        """
        body: dict[str, Any] = {"topic_name": name}
        if partitions is not None:
            body["partitions_count"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = [{"name": k, "value": v} for k, v in configs.items()]
        answer = await self._broker.json("POST", await self._topics_path(), body=body)
        return int(answer["partitions_count"])

    async def delete_topic(self, name: str) -> None:
        """Delete ``name`` and its data. Raises UnknownTopicError."""
        await self._broker.call("DELETE", await self._topics_path(name))

    async def describe_topic(self, name: str) -> TopicMetadata:
        """Partitions with their log start, high watermark and log end, each as its leader reports it (a
        partition without a reachable leader shows -1 for all three). Idempotent. Raises UnknownTopicError.
        """
        if self._router is None:
            return await self._broker.topic_metadata(name)
        count = await self._router.partition_count(name)
        meta = self._router.snapshot
        assert meta is not None
        by_url: dict[str, list[int]] = {}
        for p in range(count):
            leader = meta.leader(TopicPartition(name, p))
            if leader is not None and leader.url:
                by_url.setdefault(leader.url, []).append(p)
        router = self._router

        async def ask(url: str, wanted: list[int]) -> list[PartitionInfo]:
            try:
                answer = await router.client(url).topic_metadata(name)
            except (UnavailableError, UnknownTopicError):
                return []
            return [info for info in answer.partitions if info.partition in wanted]

        found = {
            info.partition: info
            for infos in await asyncio.gather(*(ask(u, w) for u, w in by_url.items()))
            for info in infos
        }
        partitions = [found.get(p, PartitionInfo(p, -1, -1, -1)) for p in range(count)]
        return TopicMetadata(name, partitions, count)

    async def partition_tiering(self, name: str, partition: int) -> dict[str, Any] | None:
        """The partition's ``tiered_storage`` object of the v3 API (remote and local offsets, segments,
        upload lag and failures; docs/tiering.md "Describe output"), or None when the broker reports none.
        Idempotent. Raises UnknownTopicError, UnknownPartitionError."""
        answer = await self._broker.json("GET", await self._topics_path(name) + f"/partitions/{partition}")
        tiering = answer.get("tiered_storage")
        return dict(tiering) if isinstance(tiering, dict) else None

    async def topic_configs(self, name: str) -> list[TopicConfig]:
        """Every config of ``name`` with its value and source. Raises UnknownTopicError."""
        answer = await self._broker.json("GET", await self._topics_path(name) + "/configs")
        return [
            TopicConfig(c["name"], c.get("value"), bool(c.get("is_default")), str(c.get("source", "")))
            for c in answer["data"]
        ]

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: tuple[str, ...] = (),
    ) -> None:
        """Grow ``name`` to ``partitions`` and set or delete config overrides (configs first).

        Raises UnknownTopicError, InvalidConfigError (40002: invalid config or partition count).
        """
        path = await self._topics_path(name)
        updates = [{"name": k, "value": v, "operation": "SET"} for k, v in (set_configs or {}).items()]
        updates += [{"name": k, "operation": "DELETE"} for k in delete_configs]
        if updates:
            await self._broker.call("POST", path + "/configs:alter", body={"data": updates})
        if partitions is not None:
            await self._broker.call("PATCH", path, body={"partitions_count": partitions})

    async def list_groups(self) -> list[dict[str, Any]]:
        """``[{"group_id", "state"}]`` for every group the broker knows. Idempotent."""
        answer = await self._broker.json("GET", GROUPS_PREFIX)
        return list(answer["groups"])

    async def describe_group(self, group_id: str) -> dict[str, Any]:
        """State, generation, members with assignments and per-partition lag. Raises UnknownGroupError."""
        answer: dict[str, Any] = await self._broker.json("GET", group_path(group_id))
        return answer
