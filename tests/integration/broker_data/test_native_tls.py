"""Over TLS the transport cannot sendfile: the fetch falls back to pread + write, same bytes."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.broker import Brokers
from tests.integration.broker_data.helpers import BATCHES, as_stored
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record


def _server_context(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context


async def test_fetch_over_tls_falls_back_to_pread(tmp_path: Path, brokers: Brokers) -> None:
    client = (await brokers.start(ssl_context=_server_context(tmp_path))).client
    batches = [build_batch([Record(None, bytes([i]) * 1000)] * 200, base_offset=i * 200) for i in range(3)]
    body = b"".join(batches)
    response = await client.post(
        "/native/v1/topics/t/partitions/0/batches", data=body, headers={"Content-Type": BATCHES}, ssl=False
    )
    assert response.status == 200
    response = await client.get(
        "/native/v1/topics/t/partitions/0/batches",
        params={"offset": "0", "max_bytes": str(len(body))},
        ssl=False,
    )
    assert response.status == 200
    assert response.headers["Tierlog-High-Watermark"] == "600"
    assert await response.read() == as_stored(body)
