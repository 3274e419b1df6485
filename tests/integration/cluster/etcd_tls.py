"""A real etcd process that speaks TLS only and requires client certificates, for tests of the etcd store and
of brokers over TLS: ``TlsEtcdServer(base_dir, pki).start()``.

:class:`EtcdPki` issues (with ``trustme``) a CA, etcd's server certificate for ``127.0.0.1`` and a client
certificate, written as PEM files under one directory. The server runs the venv's ``etcd`` binary (see
:func:`tests.integration.cluster.etcd.etcd_binary`) with ``--client-cert-auth``, https client URLs on a free
loopback port, and waits (bounded) until ``/health`` answers over TLS with the client certificate.
"""

from __future__ import annotations

import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import trustme

from tests.integration.cluster.etcd import EtcdServer

__all__ = ["EtcdPki", "TlsEtcdServer"]


@dataclass(frozen=True)
class EtcdPki:
    """PEM files: ``ca`` (the CA etcd and its clients trust), etcd's ``server_cert``/``server_key`` (for
    127.0.0.1), a ``client_cert``/``client_key`` signed by the same CA, and ``other_ca`` (a CA that signed
    nothing here: trusting only it must fail)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path

    @classmethod
    def issue(cls, directory: Path) -> EtcdPki:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("broker.tierlog.test", common_name="tierlog-broker")  # Go refuses an empty SAN
        pki = cls(
            ca=directory / "ca.pem",
            server_cert=directory / "etcd.pem",
            server_key=directory / "etcd-key.pem",
            client_cert=directory / "client.pem",
            client_key=directory / "client-key.pem",
            other_ca=directory / "other-ca.pem",
        )
        ca.cert_pem.write_to_path(str(pki.ca))
        server.cert_chain_pems[0].write_to_path(str(pki.server_cert))
        server.private_key_pem.write_to_path(str(pki.server_key))
        client.cert_chain_pems[0].write_to_path(str(pki.client_cert))
        client.private_key_pem.write_to_path(str(pki.client_key))
        trustme.CA().cert_pem.write_to_path(str(pki.other_ca))
        return pki


class TlsEtcdServer(EtcdServer):
    """One etcd member on loopback with TLS and client-certificate authentication: an
    :class:`~tests.integration.cluster.etcd.EtcdServer` with https client URLs and the PKI's files. Also a
    context manager (``start``/``stop``). Not thread-safe."""

    scheme = "https"

    def __init__(self, base_dir: Path, pki: EtcdPki) -> None:
        super().__init__(base_dir)
        self.pki = pki

    def _extra_args(self) -> list[str]:
        return [
            f"--cert-file={self.pki.server_cert}",
            f"--key-file={self.pki.server_key}",
            f"--trusted-ca-file={self.pki.ca}",
            "--client-cert-auth",
        ]

    def _health_opener(self) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        return urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def __enter__(self) -> TlsEtcdServer:
        self.start()
        return self
