"""Bearer JWTs against a JWKS file and a JWKS URL served by a real aiohttp server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from pytest_aiohttp import AiohttpServer

from tierlog.service.security.bearer import BearerVerifier
from tierlog.wire.errors import UnauthorizedError

NOW = 1_800_000_000.0
AUDIENCE = "tierlog"
ISSUER = "https://issuer.example"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        found: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    else:
        found = json.loads(ECAlgorithm.to_jwk(key.public_key()))
    found["kid"] = kid
    return found


def write_jwks(path: Path, *keys: dict[str, Any]) -> str:
    path.write_text(json.dumps({"keys": list(keys)}))
    return str(path)


def claims(**overrides: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "exp": NOW + 300, "iat": NOW}
    found.update(overrides)
    return {k: v for k, v in found.items() if v is not None}


def sign(key: Any, kid: str | None = "k1", alg: str = "RS256", **overrides: Any) -> str:
    headers = {} if kid is None else {"kid": kid}
    return jwt.encode(claims(**overrides), key, algorithm=alg, headers=headers)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None = None) -> str:
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
    signature = b"" if secret is None else hmac.digest(secret, signing_input.encode(), hashlib.sha256)
    return f"{signing_input}.{b64url(signature)}"


@pytest.fixture
async def verifier(tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> AsyncIterator[BearerVerifier]:
    v = BearerVerifier(
        write_jwks(tmp_path / "jwks.json", jwk(rsa_key, "k1")),
        audience=AUDIENCE,
        issuer=ISSUER,
        clock=Clock(),
    )
    await v.start()
    yield v
    await v.close()


async def refused(v: BearerVerifier, token: str, reason: str) -> None:
    with pytest.raises(UnauthorizedError) as caught:
        await v.verify(token)
    assert reason in str(caught.value)
    assert (not token or token not in str(caught.value)) and "alice" not in str(caught.value)


async def test_good_token(verifier: BearerVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    assert await verifier.verify(sign(rsa_key)) == "alice"
    assert await verifier.verify(sign(rsa_key, alg="PS256")) == "alice"
    assert await verifier.verify(sign(rsa_key, kid=None, alg="RS512")) == "alice"


async def test_expiry_and_not_before_use_the_injected_clock(
    verifier: BearerVerifier, rsa_key: rsa.RSAPrivateKey
) -> None:
    await refused(verifier, sign(rsa_key, exp=NOW - 31), "token expired")
    assert await verifier.verify(sign(rsa_key, exp=NOW - 29)) == "alice"
    await refused(verifier, sign(rsa_key, nbf=NOW + 31), "not yet valid")
    assert await verifier.verify(sign(rsa_key, nbf=NOW + 29)) == "alice"
    await refused(verifier, sign(rsa_key, exp=None), "no exp claim")
    # Real time is far from NOW: a token valid now by the wall clock is expired by the injected one.
    await refused(
        verifier, sign(rsa_key, exp=time.time() + 10**9, iat=None, nbf=time.time() + 10**9), "not yet"
    )


async def test_audience_issuer_and_principal(verifier: BearerVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    await refused(verifier, sign(rsa_key, aud="other"), "wrong audience")
    await refused(verifier, sign(rsa_key, aud=None), "no aud claim")
    await refused(verifier, sign(rsa_key, iss="https://evil.example"), "wrong issuer")
    await refused(verifier, sign(rsa_key, iss=None), "no iss claim")
    await refused(verifier, sign(rsa_key, sub=None), "no sub claim")
    await refused(verifier, sign(rsa_key, sub=" "), "no sub claim")


async def test_signature_key_and_algorithm_attacks(
    verifier: BearerVerifier, rsa_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    await refused(verifier, sign(other_key), "bad signature")
    await refused(verifier, sign(rsa_key, kid="k9"), "unknown signing key")
    await refused(verifier, unsigned({"alg": "none", "kid": "k1"}, claims()), "algorithm not allowed")
    public_pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    await refused(
        verifier, unsigned({"alg": "HS256", "kid": "k1"}, claims(), public_pem), "algorithm not allowed"
    )
    await refused(verifier, sign(ec.generate_private_key(ec.SECP256R1()), alg="ES256"), "unknown signing key")
    await refused(verifier, "not.a.token", "malformed token")
    await refused(verifier, "", "malformed token")
    token = sign(rsa_key)
    await refused(verifier, token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"), "bad signature")


async def test_ec_keys_and_custom_claim(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP384R1())
    v = BearerVerifier(
        write_jwks(tmp_path / "jwks.json", jwk(key, "e1")),
        audience=None,
        issuer=None,
        principal_claim="preferred_username",
        clock=Clock(),
    )
    await v.start()
    try:
        token = sign(key, kid="e1", alg="ES384", preferred_username="bob", aud="anything", iss=None)
        assert await v.verify(token) == "bob"
        await refused(v, unsigned({"alg": "ES256", "kid": "e1"}, claims()), "unknown signing key")
    finally:
        await v.close()


async def test_jwks_file_is_reloaded_after_refresh_ms_and_on_an_unknown_kid(
    tmp_path: Path, rsa_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    path = tmp_path / "jwks.json"
    v = BearerVerifier(
        write_jwks(path, jwk(rsa_key, "k1")), audience=AUDIENCE, issuer=ISSUER, refresh_ms=60_000, clock=clock
    )
    await v.start()
    try:
        write_jwks(path, jwk(other_key, "k1"))
        assert await v.verify(sign(rsa_key)) == "alice"  # not reloaded yet
        clock.now += 61
        await refused(v, sign(rsa_key), "bad signature")
        assert await v.verify(sign(other_key, exp=clock.now + 60)) == "alice"
        write_jwks(path, jwk(other_key, "k1"), jwk(rsa_key, "k2"))
        assert await v.verify(sign(rsa_key, kid="k2", exp=clock.now + 60)) == "alice"
    finally:
        await v.close()


async def test_bad_jwks_files(tmp_path: Path) -> None:
    for name, text in (("missing.json", None), ("bad.json", "{"), ("empty.json", '{"keys": []}')):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        v = BearerVerifier(str(path), audience=None, issuer=None)
        with pytest.raises(ValueError):
            await v.start()
        await v.close()
    secret_only = tmp_path / "oct.json"
    secret_only.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "k1"}]}))
    with pytest.raises(ValueError, match="no usable"):
        await BearerVerifier(str(secret_only), audience=None, issuer=None).start()


async def test_jwks_url_fetch_and_unknown_kid_refresh(
    aiohttp_server: AiohttpServer, rsa_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey
) -> None:
    served: list[dict[str, Any]] = [jwk(rsa_key, "k1")]
    fetches: list[float] = []
    clock = Clock()

    async def jwks(request: web.Request) -> web.Response:
        fetches.append(clock.now)
        return web.json_response({"keys": served})

    app = web.Application()
    app.router.add_get("/jwks", jwks)
    server = await aiohttp_server(app)
    v = BearerVerifier(str(server.make_url("/jwks")), audience=AUDIENCE, issuer=ISSUER, clock=clock)
    await v.start()
    try:
        assert len(fetches) == 1
        assert await v.verify(sign(rsa_key)) == "alice"
        assert len(fetches) == 1
        # The issuer rotates: the unknown kid refetches at once, but at most once a minute.
        await refused(v, sign(other_key, kid="k2"), "unknown signing key")
        assert len(fetches) == 2
        served.append(jwk(other_key, "k2"))
        await refused(v, sign(other_key, kid="k2"), "unknown signing key")
        assert len(fetches) == 2
        clock.now += 61
        assert await v.verify(sign(other_key, kid="k2", exp=clock.now + 60)) == "alice"
        assert len(fetches) == 3
    finally:
        await v.close()


async def test_jwks_url_failing_at_start_is_retried_on_use(
    aiohttp_server: AiohttpServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    clock = Clock()
    up: list[bool] = [False]

    async def jwks(request: web.Request) -> web.Response:
        if not up[0]:
            return web.Response(status=503)
        return web.json_response({"keys": [jwk(rsa_key, "k1")]})

    app = web.Application()
    app.router.add_get("/jwks", jwks)
    server = await aiohttp_server(app)
    v = BearerVerifier(str(server.make_url("/jwks")), audience=AUDIENCE, issuer=ISSUER, clock=clock)
    await v.start()
    try:
        await refused(v, sign(rsa_key), "unknown signing key")
        up[0] = True
        clock.now += 61
        assert await v.verify(sign(rsa_key, exp=clock.now + 60)) == "alice"
    finally:
        await v.close()
