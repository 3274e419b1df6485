"""``tierlog users`` and ``tierlog acls``: offline on a data directory (bootstrapping the first users before
the broker starts) and on etcd, online against a running broker (in a thread of its own, since the CLI runs
its own event loop), with authentication off and on."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.e2e.process import DEADLINE_S, clean_env, run_cli, tierlog_command
from tests.integration.broker import StartThread
from tests.integration.cluster.etcd_tls import EtcdPki, TlsEtcdServer
from tierlog.cli import main as tierlog_main
from tierlog.client.security import PASSWORD_ENV
from tierlog.service.cluster.etcd_store import EtcdMetadataStore
from tierlog.service.security.acl import validate_binding
from tierlog.service.security.cli import main
from tierlog.service.security.scram import verify
from tierlog.service.security.security_store import SecurityStore
from tierlog.service.settings.config import parse_metadata_uri

ADMIN_PASSWORD = "admin-pass-1"
ALICE_PASSWORD = "alice pass with spaces"


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def users_of(url: str, auth: tuple[str, str]) -> list[str]:
    cluster = requests.get(f"{url}/v3/clusters", auth=auth, timeout=10).json()["data"][0]["cluster_id"]
    resp = requests.get(f"{url}/v3/clusters/{cluster}/users", auth=auth, timeout=10)
    assert resp.status_code == 200, resp.text
    return [u["name"] for u in resp.json()["data"]]


def test_offline_users_then_a_secured_broker_accepts_them(
    data_dir: Path,
    broker_threads: StartThread,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    offline = ("--data-dir", str(data_dir))
    feed_stdin(monkeypatch, f"{ADMIN_PASSWORD}\n".encode())
    assert run(capsys, "users", "add", "admin", "--password-stdin", *offline)[0] == 0
    feed_stdin(monkeypatch, ALICE_PASSWORD.encode())  # no trailing newline: taken as is
    code, out, _ = run(
        capsys, "users", "add", "alice", "--password-stdin", "--mechanism", "scram-sha-512",
        "--iterations", "8192", *offline,
    )  # fmt: skip
    assert code == 0 and "created user alice (SCRAM-SHA-512, 8192 iterations)" in out
    code, out, _ = run(capsys, "users", "list", "--json", *offline)
    assert json.loads(out) == [
        {"name": "admin", "mechanisms": [{"iterations": 4096, "mechanism": "SCRAM-SHA-256"}]},
        {"name": "alice", "mechanisms": [{"iterations": 8192, "mechanism": "SCRAM-SHA-512"}]},
    ]
    code, out, _ = run(capsys, "acls", "add", "--principal", "User:alice", "--operation", "Describe",
                       "--cluster", *offline)  # fmt: skip
    assert code == 0 and "added 1 ACL(s)" in out

    broker = broker_threads({"authentication.methods": "basic", "super.users": "User:admin"})
    assert requests.get(f"{broker.url}/v3/clusters", timeout=10).status_code == 401
    assert users_of(broker.url, auth=("admin", ADMIN_PASSWORD)) == ["admin", "alice"]
    assert users_of(broker.url, auth=("alice", ALICE_PASSWORD)) == ["admin", "alice"]  # Describe on Cluster

    # while the broker runs it holds the store: offline use is refused, online use works
    code, _, err = run(capsys, "users", "list", *offline)
    assert code == 1
    assert f"the broker at {data_dir.absolute()} is running: use --bootstrap-server" in err

    online = ("--bootstrap-server", broker.url, "--username", "admin")
    monkeypatch.setenv(PASSWORD_ENV, ADMIN_PASSWORD)
    feed_stdin(monkeypatch, b"bob-pass\n")
    assert run(capsys, "users", "add", "bob", "--password-stdin", *online)[0] == 0
    code, out, _ = run(capsys, "users", "list", *online)
    assert code == 0 and out.split() == ["NAME", "MECHANISMS", "admin", "SCRAM-SHA-256(4096)", "alice",
                                         "SCRAM-SHA-512(8192)", "bob", "SCRAM-SHA-256(4096)"]  # fmt: skip
    assert requests.get(f"{broker.url}/v3/clusters", auth=("bob", "bob-pass"), timeout=10).status_code == 403

    # a new password (default mechanism) replaces alice's SCRAM-SHA-512 credential: the old one stops working
    feed_stdin(monkeypatch, b"alice-new-pass\n")
    code, out, err = run(capsys, "users", "add", "alice", "--password-stdin", *online)
    assert code == 0 and "replaced the password of user alice (SCRAM-SHA-256, 4096 iterations)" in out
    assert "alice-new-pass" not in out + err
    code, out, _ = run(capsys, "users", "list", *online)
    assert code == 0 and out.split() == ["NAME", "MECHANISMS", "admin", "SCRAM-SHA-256(4096)", "alice",
                                         "SCRAM-SHA-256(4096)", "bob", "SCRAM-SHA-256(4096)"]  # fmt: skip
    old = requests.get(f"{broker.url}/v3/clusters", auth=("alice", ALICE_PASSWORD), timeout=10)
    assert old.status_code == 401
    assert users_of(broker.url, auth=("alice", "alice-new-pass")) == ["admin", "alice", "bob"]

    monkeypatch.setenv(PASSWORD_ENV, "wrong")
    code, _, err = run(capsys, "users", "list", *online)
    assert code == 1 and "(error code 40101)" in err and "wrong" not in err
    monkeypatch.setenv(PASSWORD_ENV, "alice-new-pass")
    code, _, err = run(
        capsys, "users", "remove", "bob", "--bootstrap-server", broker.url, "--username", "alice"
    )
    assert code == 1 and "(error code 40301)" in err  # alice may Describe the cluster, not Alter it
    broker.close()

    code, out, _ = run(capsys, "users", "remove", "bob", *offline)  # stopped: offline works again
    assert code == 0 and "removed user bob" in out
    assert run(capsys, "users", "remove", "bob", *offline)[0] == 1
    code, out, _ = run(capsys, "acls", "list", "--json", *offline)
    assert json.loads(out) == [
        {"host": "*", "operation": "DESCRIBE", "pattern_type": "LITERAL", "permission": "ALLOW",
         "principal": "User:alice", "resource_name": "kafka-cluster", "resource_type": "CLUSTER"},
    ]  # fmt: skip


def test_acls_online_against_an_open_broker(
    broker_threads: StartThread, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_threads()
    online = ("--bootstrap-server", broker.url)
    code, out, _ = run(
        capsys, "acls", "add", "--principal", "User:alice", "--principal", "User:bob", "--operation", "read",
        "--operation", "write", "--topic", "orders", *online,
    )  # fmt: skip
    assert code == 0 and "added 4 ACL(s)" in out
    deny = ("--principal", "User:*", "--host", "10.0.0.1", "--operation", "describe", "--deny")
    code, _, _ = run(
        capsys, "acls", "add", *deny, "--group", "app-", "--resource-pattern-type", "prefixed", *online
    )
    assert code == 0

    code, out, _ = run(capsys, "acls", "list", "--json", *online)
    listed = json.loads(out)
    assert len(listed) == 5
    assert {"host": "10.0.0.1", "operation": "DESCRIBE", "pattern_type": "PREFIXED", "permission": "DENY",
            "principal": "User:*", "resource_name": "app-", "resource_type": "GROUP"} in listed  # fmt: skip
    code, out, _ = run(
        capsys, "acls", "list", "--group", "app-1", "--resource-pattern-type", "match", *online
    )
    assert code == 0 and out.splitlines()[1].split() == ["User:*", "10.0.0.1", "DESCRIBE", "DENY", "GROUP",
                                                           "app-", "PREFIXED"]  # fmt: skip
    code, out, _ = run(capsys, "acls", "remove", "--topic", "orders", "--principal", "User:bob", *online)
    assert code == 0 and "removed 2 ACL(s)" in out
    code, out, _ = run(capsys, "acls", "list", "--topic", "orders", "--json", *online)
    assert sorted((a["principal"], a["operation"]) for a in json.loads(out)) == [
        ("User:alice", "READ"),
        ("User:alice", "WRITE"),
    ]

    # the global --bootstrap-server of ``tierlog`` reaches these commands too
    assert tierlog_main(["--bootstrap-server", broker.url, "acls", "list", "--principal", "User:alice"]) == 0
    assert "User:alice" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["users", "add", "alice"],  # the password comes from stdin only
        ["users", "add", "alice", "--password-stdin", "--mechanism", "MD5"],
        ["acls", "add", "--principal", "User:a", "--operation", "read"],  # no resource
        ["acls", "add", "--operation", "read", "--topic", "t"],  # no principal
        ["acls", "add", "--principal", "User:a", "--operation", "read", "--topic", "t", "--cluster"],
        ["acls", "add", "--principal", "User:a", "--operation", "read", "--topic", "t",
         "--resource-pattern-type", "match"],
        ["acls", "remove", "--principal", "User:a"],  # a remove names its resource
        ["users", "list", "--data-dir", "/tmp/x", "--metadata-uri", "etcd://127.0.0.1:1/x"],
        ["users", "list", "--metadata-uri", "http://nope"],
    ],
)  # fmt: skip
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_invalid_values_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    offline = ("--data-dir", str(tmp_path))
    code, _, err = run(
        capsys, "acls", "add", "--principal", "alice", "--operation", "read", "--topic", "t", *offline
    )
    assert code == 1 and "invalid principal" in err
    code, _, err = run(
        capsys, "acls", "add", "--principal", "User:a", "--operation", "fly", "--topic", "t", *offline
    )
    assert code == 1 and "invalid operation" in err
    feed_stdin(monkeypatch, b"\n")
    code, _, err = run(capsys, "users", "add", "a", "--password-stdin", *offline)
    assert code == 1 and "no password" in err
    feed_stdin(monkeypatch, b"pw")
    code, _, err = run(capsys, "users", "add", "a", "--password-stdin", "--iterations", "100", *offline)
    assert code == 1 and "iterations" in err
    assert run(capsys, "users", "list", "--data-dir", str(tmp_path / "missing"))[0] == 1


@pytest.mark.integration
def test_offline_on_etcd(
    etcd_uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = ("--metadata-uri", etcd_uri)
    feed_stdin(monkeypatch, b"pw-1\n")
    assert run(capsys, "users", "add", "carol", "--password-stdin", *target)[0] == 0
    assert (
        run(
            capsys, "acls", "add", "--principal", "User:carol", "--operation", "all", "--topic", "*", *target
        )[0]
        == 0
    )

    async def read() -> None:
        store = SecurityStore(EtcdMetadataStore(parse_metadata_uri(etcd_uri)), owns_store=True)
        await store.start()
        try:
            credentials = store.user("carol")
            assert credentials is not None and verify(credentials["SCRAM-SHA-256"], "pw-1")
            assert store.acls.bindings == frozenset(
                [validate_binding("TOPIC", "*", "LITERAL", "User:carol", "*", "ALL", "ALLOW")]
            )
        finally:
            await store.close()

    asyncio.run(read())
    code, out, _ = run(capsys, "users", "list", *target)
    assert code == 0 and "carol" in out


def test_the_console_script(tmp_path: Path) -> None:
    """``tierlog users|acls`` as an operator runs them: processes of their own, the password piped in."""
    offline = ("--data-dir", str(tmp_path / "data"))
    usage = run_cli("--help")
    assert usage.returncode == 0 and "users" in usage.stdout and "acls" in usage.stdout
    added = run_cli("users", "add", "admin", "--password-stdin", *offline, stdin=b"piped-secret\n")
    assert added.returncode == 0, added.stderr
    assert "piped-secret" not in added.stdout + added.stderr
    listed = run_cli("users", "list", "--json", *offline)
    assert listed.returncode == 0, listed.stderr
    assert [u["name"] for u in json.loads(listed.stdout)] == ["admin"]
    acl = run_cli("acls", "add", "--principal", "User:admin", "--operation", "All", "--cluster", *offline)
    assert acl.returncode == 0, acl.stderr


@pytest.mark.integration
def test_offline_on_an_etcd_that_requires_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pki = EtcdPki.issue(tmp_path / "pki")
    with TlsEtcdServer(tmp_path / "etcd", pki) as server:
        uri = ("--metadata-uri", server.uri("tls-cli"))
        tls = ("--metadata-ssl-cafile", str(pki.ca), "--metadata-ssl-certfile", str(pki.client_cert),
               "--metadata-ssl-keyfile", str(pki.client_key))  # fmt: skip
        feed_stdin(monkeypatch, b"pw-2\n")
        assert run(capsys, "users", "add", "dave", "--password-stdin", *uri, *tls)[0] == 0
        code, out, _ = run(capsys, "users", "list", "--json", *uri, *tls)
        assert code == 0 and [u["name"] for u in json.loads(out)] == ["dave"]
        code, _, err = run(capsys, "users", "list", *uri, "--metadata-ssl-cafile", str(pki.other_ca))
        assert code == 1 and "error" in err  # an untrusted etcd certificate (and no client certificate)
    assert main(["users", "list", "--metadata-uri", "file:///tmp/x.json", "--metadata-ssl-cafile", "ca"]) == 2
    assert (
        main(["users", "list", "--metadata-uri", "etcd://127.0.0.1:1/x", "--metadata-ssl-keyfile", "k"]) == 2
    )


def test_on_a_terminal_the_password_is_asked_twice_without_echo(tmp_path: Path) -> None:
    argv = [*tierlog_command(), "users", "add", "tty-user", "--password-stdin", "--data-dir", str(tmp_path)]
    fd, terminal = pty.openpty()
    child = subprocess.Popen(
        argv, stdin=terminal, stdout=terminal, stderr=terminal, env=clean_env(), start_new_session=True
    )
    os.close(terminal)
    seen = b""

    def read_until(token: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + DEADLINE_S
        while token not in seen:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {token!r} from the child; it wrote {seen!r}"
            seen += os.read(fd, 1024)

    try:
        read_until(b"Password: ")
        os.write(fd, b"typed-secret\n")
        read_until(b"again: ")
        os.write(fd, b"typed-secret\n")
        read_until(b"created user tty-user")
        assert child.wait(DEADLINE_S) == 0
    finally:
        child.kill()
        child.wait(DEADLINE_S)
        os.close(fd)
    assert b"typed-secret" not in seen
