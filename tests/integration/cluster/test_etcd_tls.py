"""The etcd metadata store over TLS, against a real etcd that speaks TLS only and requires client
certificates (``--client-cert-auth``), with certificates issued by ``trustme`` for 127.0.0.1.

Checks: reads, transactions, watches and leases work over the secure channel; a store built from the
broker's settings (``metadata.ssl.*``) reaches it, and so does a ``tierlog serve`` process given them; and a
store that does not trust etcd's CA, has no client certificate, or speaks plaintext fails to start with a
MetadataStoreError that says so, within its connect timeout (never a hang).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e.process import BrokerProcess
from tests.integration.cluster.etcd_tls import EtcdPki, TlsEtcdServer
from tierlog.service.cluster.etcd_store import EtcdMetadataStore, EtcdTls
from tierlog.service.cluster.metadata_store import (
    Compare,
    LeaseExpiredError,
    MetadataStoreError,
    Put,
    WatchEvent,
)
from tierlog.service.settings.config import build_settings, parse_metadata_uri

pytestmark = pytest.mark.integration

EVENT_TIMEOUT_S = 20.0  # a bound for an event that must come, never a timing the test asserts
CONNECT_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> EtcdPki:
    return EtcdPki.issue(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, pki: EtcdPki) -> Iterator[TlsEtcdServer]:
    with TlsEtcdServer(tmp_path_factory.mktemp("etcd-tls"), pki) as server:
        yield server


def _uri(server: TlsEtcdServer) -> str:
    return server.uri(f"tls-{uuid.uuid4().hex[:10]}")


@pytest.fixture
async def store(tls_etcd: TlsEtcdServer, pki: EtcdPki) -> AsyncIterator[EtcdMetadataStore]:
    tls = EtcdTls(pki.ca, pki.client_cert, pki.client_key)
    opened = EtcdMetadataStore(parse_metadata_uri(_uri(tls_etcd)), tls=tls)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


async def _next(events: AsyncIterator[WatchEvent]) -> WatchEvent:
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        return await anext(events)


async def test_reads_writes_watches_and_leases_over_tls(store: EtcdMetadataStore) -> None:
    first = await store.commit([Compare("topics/a", 0)], [Put("topics/a", b"1")])
    assert first is not None
    kv = await store.get("topics/a")
    assert kv is not None and (kv.value, kv.mod_revision) == (b"1", first)
    assert await store.commit([Compare("topics/a", 0)], [Put("topics/a", b"again")]) is None

    events = store.watch("brokers/", first + 1)
    try:
        lease = await store.grant_lease(30)
        await store.commit([], [Put("brokers/1", b"me", lease=lease)])
        await store.keep_alive(lease)
        put = await _next(events)
        await store.revoke_lease(lease)
        gone = await _next(events)
    finally:
        await events.aclose()
    assert (put.kind, put.key, put.value) == ("put", "brokers/1", b"me")
    assert (gone.kind, gone.key) == ("delete", "brokers/1")
    with pytest.raises(LeaseExpiredError):
        await store.keep_alive(lease)
    keys, revision = await store.range("")
    assert [k.key for k in keys] == ["topics/a"] and revision > first


async def test_the_store_built_from_the_broker_settings_uses_tls(
    tls_etcd: TlsEtcdServer, pki: EtcdPki, tmp_path: Path
) -> None:
    settings = build_settings(
        {
            "data.dir": str(tmp_path / "data"),
            "metadata.uri": _uri(tls_etcd),
            "metadata.ssl.cafile": str(pki.ca),
            "metadata.ssl.certfile": str(pki.client_cert),
            "metadata.ssl.keyfile": str(pki.client_key),
        }
    )
    store = EtcdMetadataStore.from_settings(settings)
    await store.start()
    try:
        await store.commit([], [Put("k", b"v")])
        kv = await store.get("k")
        assert kv is not None and kv.value == b"v"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("plaintext", "over plaintext"),
        ("untrusted CA", "over TLS"),
        ("no client certificate", "over TLS"),
    ],
)
async def test_a_store_that_cannot_set_up_tls_fails_to_start_with_a_clear_error(
    tls_etcd: TlsEtcdServer, pki: EtcdPki, case: str, expected: str
) -> None:
    tls = {
        "plaintext": None,
        "untrusted CA": EtcdTls(pki.other_ca, pki.client_cert, pki.client_key),
        "no client certificate": EtcdTls(pki.ca),
    }[case]
    store = EtcdMetadataStore(
        parse_metadata_uri(_uri(tls_etcd)), tls=tls, connect_timeout_s=CONNECT_TIMEOUT_S
    )
    try:
        async with asyncio.timeout(EVENT_TIMEOUT_S):  # a hang fails here instead of at the suite timeout
            with pytest.raises(MetadataStoreError, match=f"cannot reach etcd at .* {expected}") as caught:
                await store.start()
    finally:
        await store.close()
    assert tls_etcd.endpoint in str(caught.value)


async def test_an_unreadable_ca_file_is_a_store_error_naming_it(
    tls_etcd: TlsEtcdServer, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-ca.pem"
    store = EtcdMetadataStore(parse_metadata_uri(_uri(tls_etcd)), tls=EtcdTls(missing))
    try:
        with pytest.raises(MetadataStoreError, match=r"no-such-ca\.pem"):
            await store.start()
    finally:
        await store.close()


def test_a_broker_given_metadata_ssl_joins_the_cluster_through_tls_etcd(
    tls_etcd: TlsEtcdServer, pki: EtcdPki, tmp_path: Path
) -> None:
    broker = BrokerProcess(
        tmp_path / "broker",
        "--data-dir", str(tmp_path / "broker" / "data"),
        "--metadata-uri", _uri(tls_etcd),
        "--broker-id", "1",
        "--metadata-ssl-cafile", str(pki.ca),
        "--metadata-ssl-certfile", str(pki.client_cert),
        "--metadata-ssl-keyfile", str(pki.client_key),
    )  # fmt: skip
    try:
        with urllib.request.urlopen(broker.url + "/native/v1/metadata", timeout=30) as response:
            metadata = json.loads(response.read())
    finally:
        assert broker.stop() == 0, broker.log()
    assert [b["broker_id"] for b in metadata["brokers"]] == [1]
    assert metadata["controller_id"] == 1
