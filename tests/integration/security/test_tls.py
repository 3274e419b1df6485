"""TLS end to end: ``tierlog serve --ssl-*`` as a child process with real certificates from ``trustme``,
reached by the Python client, ``requests`` and the ``tierlog`` CLI.

Checked: produce and consume over verified TLS; a client without the CA, a plaintext request to the TLS port,
a client without a certificate where one is required, and a certificate for another host name are all
refused; ``plaintext.port`` is the only plaintext listener; SIGHUP rotates the certificate for new
connections while open ones keep working. Protocol mix-ups are named (issue 35): plain HTTP to the TLS port
is answered 400 saying to use https:// (curl, aiohttp, the client and CLI show it), a TLS handshake to the
plaintext port and a Kafka client (confluent-kafka) to either port are logged; the CLI without the CA names
``--ssl-cafile``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import requests
import trustme
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from cryptography import x509

from tests.e2e.process import DEADLINE_S, BrokerProcess, clean_env, run_cli
from tierlog.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    BrokerUnavailableError,
    ClientSecurity,
    UnauthorizedError,
)
from tierlog.wire.errors import InvalidRequestError

pytestmark = pytest.mark.integration

HTTPS_LISTENING = re.compile(r"listening on (https://127\.0\.0\.1:(\d+))")
PLAINTEXT_LISTENING = re.compile(r"listening on plaintext (http://127\.0\.0\.1:\d+)")
READY = re.compile(r"ready: cluster")


@dataclass(frozen=True)
class Leaf:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    authority: trustme.CA
    root: Path
    ca: Path
    server: Leaf
    other_name: Leaf
    alice: Leaf

    def issue(self, name: str, *identities: str) -> Leaf:
        return _write(self.authority.issue_cert(*identities), self.root, name)


def _write(leaf: trustme.LeafCert, root: Path, name: str) -> Leaf:
    cert, key = root / f"{name}.pem", root / f"{name}-key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return Leaf(cert, key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(root / "ca.pem"))
    alice = authority.issue_cert(
        "alice.clients.example", common_name="alice", organization_unit_name="eng", organization_name="acme"
    )
    return Pki(
        authority,
        root,
        root / "ca.pem",
        _write(authority.issue_cert("127.0.0.1", "localhost"), root, "server"),
        _write(authority.issue_cert("other.example"), root, "other"),
        _write(alice, root, "alice"),
    )


class TlsBroker(BrokerProcess):
    """``tierlog serve --port 0`` with TLS: its HTTPS URL (and plaintext URL, if any) read from its log."""

    def __init__(self, workdir: Path, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tierlog", "serve", "--port", "0", "--data-dir", "data", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                cwd=workdir,
            )
        try:
            listening = self.wait_for_line(HTTPS_LISTENING)
            self.url, self.port = listening.group(1), int(listening.group(2))
            self.wait_for_line(READY)
        except BaseException:
            self.kill()
            raise
        plaintext = PLAINTEXT_LISTENING.search(self.log())
        self.plaintext_url = plaintext.group(1) if plaintext else None


def _serve(tmp: Path, pki: Pki, leaf: Leaf, client_auth: str, *extra: str) -> Iterator[TlsBroker]:
    broker = TlsBroker(
        tmp,
        "--ssl-certfile", str(leaf.cert),
        "--ssl-keyfile", str(leaf.key),
        "--ssl-cafile", str(pki.ca),
        "--ssl-client-auth", client_auth,
        *extra,
    )  # fmt: skip
    yield broker
    broker.kill()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    """Client certificates not asked for; a plaintext listener on plaintext.port."""
    yield from _serve(tmp_path_factory.mktemp("tls"), pki, pki.server, "none", "--plaintext-port", "0")


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsBroker]:
    """Client certificates required; no plaintext listener."""
    yield from _serve(tmp_path_factory.mktemp("mtls"), pki, pki.server, "required")


def _security(pki: Pki, **options: object) -> dict[str, object]:
    return {"security_protocol": "SSL", "ssl_cafile": str(pki.ca), **options}


async def test_the_client_produces_and_consumes_over_verified_tls(tls_broker: TlsBroker, pki: Pki) -> None:
    options = _security(pki)
    async with AsyncProducer(tls_broker.url, **options) as producer:
        sent = [await producer.send_and_wait("secure", f"v{i}".encode(), key=b"k") for i in range(3)]
    assert [m.offset for m in sent] == [0, 1, 2]
    bare_host = tls_broker.url.removeprefix("https://")  # under SSL a bare host:port is https
    consumer = AsyncConsumer(
        "secure",
        bootstrap_servers=bare_host,
        group_id="secure-group",
        auto_offset_reset="earliest",
        **options,
    )
    async with consumer:
        values: list[bytes | None] = []
        while len(values) < 3:
            records = await consumer.poll(timeout=DEADLINE_S)
            assert records, "no records within the deadline"
            values += [record.value for record in records]
    assert values == [b"v0", b"v1", b"v2"]


async def test_the_client_refuses_a_broker_its_ca_does_not_sign(tls_broker: TlsBroker) -> None:
    async with AsyncAdmin(tls_broker.url, security=ClientSecurity("SSL")) as admin:  # the system's CAs only
        with pytest.raises(UnauthorizedError, match=r"TLS handshake.*--ssl-cafile"):
            await admin.list_topics()


def test_requests_verifies_with_the_ca_and_fails_without(tls_broker: TlsBroker, pki: Pki) -> None:
    answer = requests.get(f"{tls_broker.url}/health", verify=str(pki.ca), timeout=DEADLINE_S)
    assert answer.status_code == 200
    localhost = tls_broker.url.replace("127.0.0.1", "localhost")
    assert requests.get(f"{localhost}/health", verify=str(pki.ca), timeout=DEADLINE_S).status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{tls_broker.url}/health", timeout=DEADLINE_S)


@pytest.mark.parametrize("broker", ["tls_broker", "mtls_broker"])
def test_the_tls_port_serves_no_plaintext(broker: str, request: pytest.FixtureRequest, pki: Pki) -> None:
    served: TlsBroker = request.getfixturevalue(broker)
    plain = served.url.replace("https://", "http://")
    answer = requests.get(f"{plain}/health", timeout=DEADLINE_S)  # answered in plain HTTP, naming https
    assert answer.status_code == 400
    assert f"This is tierlog's TLS port: use https://127.0.0.1:{served.port}/" in answer.text
    served.wait_for_line(re.compile(f"plain HTTP request from .* reached tierlog's TLS port {served.port}"))
    leaf = (str(pki.alice.cert), str(pki.alice.key))
    assert requests.get(f"{served.url}/health", verify=str(pki.ca), cert=leaf, timeout=DEADLINE_S).ok


def test_plaintext_port_is_the_only_plaintext_listener(
    tls_broker: TlsBroker, mtls_broker: TlsBroker, pki: Pki
) -> None:
    assert tls_broker.plaintext_url is not None
    assert requests.get(f"{tls_broker.plaintext_url}/health", timeout=DEADLINE_S).json()["status"] == "UP"
    assert mtls_broker.plaintext_url is None
    assert "listening on http://" not in mtls_broker.log()


def test_a_required_client_certificate_is_enforced(mtls_broker: TlsBroker, pki: Pki) -> None:
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.get(f"{mtls_broker.url}/health", verify=str(pki.ca), timeout=DEADLINE_S)
    leaf = (str(pki.alice.cert), str(pki.alice.key))
    answer = requests.get(f"{mtls_broker.url}/health", verify=str(pki.ca), cert=leaf, timeout=DEADLINE_S)
    assert answer.status_code == 200


async def test_the_client_presents_its_certificate(mtls_broker: TlsBroker, pki: Pki) -> None:
    without = ClientSecurity("SSL", ssl_cafile=str(pki.ca))
    async with AsyncAdmin(mtls_broker.url, security=without) as admin:
        # TLS 1.3: the refusal follows the handshake and usually shows as a closed connection
        with pytest.raises((UnauthorizedError, BrokerUnavailableError), match="certificate"):
            await admin.list_topics()
    with_cert = ClientSecurity(
        "SSL", ssl_cafile=str(pki.ca), ssl_certfile=str(pki.alice.cert), ssl_keyfile=str(pki.alice.key)
    )
    async with AsyncAdmin(mtls_broker.url, security=with_cert) as admin:
        await admin.create_topic("mtls-topic", partitions=1)
        assert "mtls-topic" in await admin.list_topics()


def test_the_cli_speaks_tls(mtls_broker: TlsBroker, pki: Pki) -> None:
    tls_options = ["--ssl-cafile", str(pki.ca), "--ssl-certfile", str(pki.alice.cert)]
    tls_options += ["--ssl-keyfile", str(pki.alice.key)]
    bare = mtls_broker.url.removeprefix("https://")
    done = run_cli("produce", "cli-secure", "--bootstrap-server", bare, *tls_options, stdin=b"one\ntwo\n")
    assert done.returncode == 0, done.stderr
    done = run_cli(
        "consume", "cli-secure", "--from-beginning", "--max-messages", "2", "--bootstrap-server", bare,
        *tls_options,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [line.count('"value"') for line in done.stdout.splitlines()] == [1, 1]
    refused = run_cli("topics", "list", "--bootstrap-server", mtls_broker.url, "--ssl-cafile", str(pki.ca))
    assert refused.returncode == 1
    assert "certificate" in refused.stderr


async def test_hostname_verification_refuses_another_name(
    tmp_path: Path, pki: Pki, request: pytest.FixtureRequest
) -> None:
    broker = TlsBroker(
        tmp_path,
        "--ssl-certfile", str(pki.other_name.cert),
        "--ssl-keyfile", str(pki.other_name.key),
    )  # fmt: skip
    request.addfinalizer(broker.kill)
    async with AsyncAdmin(broker.url, security=ClientSecurity("SSL", ssl_cafile=str(pki.ca))) as admin:
        with pytest.raises(UnauthorizedError, match=r"TLS handshake.*--ssl-cafile"):
            await admin.list_topics()
    unchecked = ClientSecurity("SSL", ssl_cafile=str(pki.ca), ssl_check_hostname=False)
    async with AsyncAdmin(broker.url, security=unchecked) as admin:
        assert isinstance(await admin.list_topics(), list)
    with pytest.raises(requests.exceptions.SSLError):
        await asyncio.to_thread(requests.get, f"{broker.url}/health", verify=str(pki.ca), timeout=DEADLINE_S)


def _peer_serial(port: int, pki: Pki) -> int:
    context = ssl.create_default_context(cafile=str(pki.ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def _serial(leaf: Leaf) -> int:
    return int(x509.load_pem_x509_certificate(leaf.cert.read_bytes()).serial_number)


def test_sighup_rotates_the_certificate_for_new_connections_and_requested_auth_is_optional(
    tmp_path: Path, pki: Pki
) -> None:
    live = _write(pki.authority.issue_cert("127.0.0.1", "localhost"), tmp_path, "live")
    broker = TlsBroker(
        tmp_path / "broker",
        "--ssl-certfile", str(live.cert),
        "--ssl-keyfile", str(live.key),
        "--ssl-cafile", str(pki.ca),
        "--ssl-client-auth", "requested",
    )  # fmt: skip
    try:
        first = _serial(live)
        assert _peer_serial(broker.port, pki) == first
        session = requests.Session()  # requested: a client without a certificate is served too
        assert session.get(f"{broker.url}/health", verify=str(pki.ca), timeout=DEADLINE_S).ok
        leaf = (str(pki.alice.cert), str(pki.alice.key))
        assert requests.get(f"{broker.url}/health", verify=str(pki.ca), cert=leaf, timeout=DEADLINE_S).ok

        live.cert.write_text("not a certificate\n")  # a broken rotation: the old certificate stays
        broker.proc.send_signal(signal.SIGHUP)
        broker.wait_for_line(re.compile(r"SIGHUP: kept the old certificate: ssl\.certfile"))
        assert _peer_serial(broker.port, pki) == first

        rotated = _write(pki.authority.issue_cert("127.0.0.1", "localhost"), tmp_path, "live")
        second = _serial(rotated)
        assert second != first
        broker.proc.send_signal(signal.SIGHUP)
        broker.wait_for_line(re.compile(r"SIGHUP: reloaded the TLS certificate"))
        assert _peer_serial(broker.port, pki) == second
        assert session.get(f"{broker.url}/health", verify=str(pki.ca), timeout=DEADLINE_S).ok
        session.close()
        assert broker.stop() == 0
    finally:
        broker.kill()


def test_unusable_certificate_files_stop_serve_with_one_line(tmp_path: Path, pki: Pki) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "tierlog", "serve", "--port", "0", "--data-dir", str(tmp_path / "data"),
            "--ssl-certfile", str(pki.server.cert), "--ssl-keyfile", str(pki.alice.key),
        ],
        capture_output=True,
        env=clean_env(),
        timeout=DEADLINE_S,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "ssl.certfile" in lines[0] and "ssl.keyfile" in lines[0]


def test_mtls_principal_mapping_names_the_user(tmp_path: Path, pki: Pki) -> None:
    """``ssl.principal.mapping.rules`` maps the subject CN=alice,OU=eng,O=acme to User:alice: the super user
    alice is allowed the Cluster describe that bob (mapped the same way, no ACL) is refused."""
    bob = _write(
        pki.authority.issue_cert(
            "bob.clients.example", common_name="bob", organization_unit_name="eng", organization_name="acme"
        ),
        tmp_path,
        "bob",
    )
    broker = TlsBroker(
        tmp_path / "broker",
        "--ssl-certfile", str(pki.server.cert),
        "--ssl-keyfile", str(pki.server.key),
        "--ssl-cafile", str(pki.ca),
        "--ssl-client-auth", "required",
        "--authentication-methods", "mtls",
        "--ssl-principal-mapping-rules", "RULE:^CN=([^,]+),OU=eng,O=acme$/$1/L,DEFAULT",
        "--super-users", "User:alice",
    )  # fmt: skip
    try:
        url = f"{broker.url}/v3/clusters"
        as_alice = requests.get(
            url, verify=str(pki.ca), cert=(str(pki.alice.cert), str(pki.alice.key)), timeout=DEADLINE_S
        )
        assert as_alice.status_code == 200, as_alice.text
        as_bob = requests.get(url, verify=str(pki.ca), cert=(str(bob.cert), str(bob.key)), timeout=DEADLINE_S)
        assert as_bob.status_code == 403, as_bob.text
        assert as_bob.json()["error_code"] == 40301
    finally:
        broker.kill()


# -- protocol mix-ups on the HTTP ports are named (issue 35) ------------------------------------------


def test_curl_to_the_tls_port_with_http_shows_the_answer(tls_broker: TlsBroker) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    plain = tls_broker.url.replace("https://", "http://")
    done = subprocess.run(
        [curl, "-sS", "-w", "\\n%{http_code}", f"{plain}/v3/clusters"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.stdout.endswith("\n400"), done
    assert "use https://" in done.stdout


async def test_aiohttp_and_the_python_client_are_told_to_use_https(tls_broker: TlsBroker) -> None:
    plain = tls_broker.url.replace("https://", "http://")
    async with aiohttp.ClientSession() as session, session.get(f"{plain}/health") as answer:
        assert answer.status == 400
        assert "use https://" in await answer.text()
    async with AsyncAdmin(plain) as admin:
        with pytest.raises(InvalidRequestError, match=r"is a TLS port: use https://.*--ssl-cafile"):
            await admin.list_topics()


def test_the_cli_given_http_for_the_tls_port_says_what_to_do(tls_broker: TlsBroker) -> None:
    plain = tls_broker.url.replace("https://", "http://")
    done = run_cli("topics", "list", "--bootstrap-server", plain)
    assert done.returncode != 0
    assert "use https://" in done.stderr, done.stderr
    assert "Server disconnected" not in done.stderr


async def test_a_tls_handshake_to_the_plaintext_port_is_logged(tls_broker: TlsBroker) -> None:
    assert tls_broker.plaintext_url is not None
    secure = tls_broker.plaintext_url.replace("http://", "https://")
    context = ssl.create_default_context()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"{secure}/health", ssl=context):
                pass
    port = tls_broker.plaintext_url.rsplit(":", 1)[1]
    pattern = f"TLS handshake from .* reached tierlog's plaintext HTTP port {port}"
    tls_broker.wait_for_line(re.compile(pattern))


@pytest.mark.parametrize("port_of", ["plaintext", "tls"])
def test_a_kafka_client_on_an_http_port_is_closed_with_a_log_line(
    tls_broker: TlsBroker, port_of: str
) -> None:
    url = tls_broker.plaintext_url if port_of == "plaintext" else tls_broker.url
    assert url is not None
    port = url.rsplit(":", 1)[1]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": 2000})
    with pytest.raises(KafkaException):  # librdkafka: the broker is down, not a response-size error
        admin.list_topics(timeout=3)
    kind = "HTTP" if port_of == "plaintext" else "HTTPS"
    pattern = f"Kafka protocol client from .* reached tierlog's {kind} port {port}; point it at the Kafka"
    tls_broker.wait_for_line(re.compile(pattern))


def test_the_cli_without_the_ca_names_ssl_cafile(tls_broker: TlsBroker) -> None:
    done = run_cli("topics", "list", "--bootstrap-server", tls_broker.url)
    assert done.returncode != 0
    assert "--ssl-cafile" in done.stderr, done.stderr
