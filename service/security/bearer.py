"""Bearer tokens: OAuth 2 / OIDC JWTs checked against the issuer's JWKS (``authentication.bearer.*``).

A token is accepted when:

- its header names one of the asymmetric algorithms in :data:`ALGORITHMS` (never ``none``, never HMAC: a
  public key can never be used as an HMAC secret) and a key of the JWKS that fits it: the header's ``kid``
  (any fitting key when the token has none), the algorithm's key type and curve, the key's own ``alg`` and
  ``use`` when it states them;
- its signature verifies with that key;
- ``exp`` is present and not past, and ``nbf`` (when present) is not in the future, by the injected clock
  with :data:`LEEWAY_S` of leeway;
- ``aud`` names the configured audience (required when one is configured), ``iss`` is the configured
  issuer (when one is configured);
- the principal claim (``sub`` by default) is a non-empty string: the user name.

The JWKS is a file path or an ``http(s)://`` URL. It is loaded by :meth:`BearerVerifier.start` and again,
lazily on use, once ``refresh_ms`` have passed; a token naming an unknown ``kid`` also reloads it, at most
once per :data:`UNKNOWN_KID_REFRESH_S` (the issuer rotated its keys). A reload that fails keeps the keys
already loaded and is retried no sooner than :data:`UNKNOWN_KID_REFRESH_S` later. Files are read in a
thread; URLs are fetched with an ``aiohttp.ClientSession`` the verifier owns.

Failure reasons are short and never contain the token or any of its claims' values.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt

from tierlog.wire.errors import UnauthorizedError

__all__ = [
    "ALGORITHMS",
    "LEEWAY_S",
    "MAX_JWKS_BYTES",
    "MAX_TOKEN_BYTES",
    "UNKNOWN_KID_REFRESH_S",
    "BearerVerifier",
]

log = logging.getLogger("tierlog.security.bearer")

#: The signature algorithms a token may use, with the key type (and EC curve) each needs.
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None),
    "RS384": ("RSA", None),
    "RS512": ("RSA", None),
    "PS256": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
}
LEEWAY_S = 30.0
UNKNOWN_KID_REFRESH_S = 60.0
MAX_JWKS_BYTES = 1 << 20
MAX_TOKEN_BYTES = 16 << 10
_FETCH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class _Key:
    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    key: Any

    def fits(self, alg: str) -> bool:
        kty, crv = ALGORITHMS[alg]
        return self.kty == kty and (crv is None or self.crv == crv) and self.alg in (None, alg)


def _parse_jwks(raw: bytes) -> list[_Key]:
    """The usable signing keys of a JWKS document.

    Raises:
        ValueError: not a JWKS, or no usable signing key in it.
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError("the JWKS is not JSON") from err
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the JWKS has no 'keys' list")
    keys: list[_Key] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC"):
            continue
        if entry.get("use", "sig") != "sig":
            continue
        alg = entry.get("alg")
        if alg is not None and alg not in ALGORITHMS:
            continue
        try:
            parsed = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue
        kid = entry.get("kid")
        keys.append(
            _Key(kid if isinstance(kid, str) else None, entry["kty"], entry.get("crv"), alg, parsed.key)
        )
    if not keys:
        raise ValueError("the JWKS holds no usable RSA or EC signing key")
    return keys


def _is_url(jwks: str) -> bool:
    return jwks.startswith(("https://", "http://"))


class BearerVerifier:
    """Checks bearer JWTs against one JWKS. Use from one event loop; :meth:`verify` may run concurrently
    with itself (reloads are serialised by a lock; while one runs, the others use the keys already loaded).
    """

    def __init__(
        self,
        jwks: str,
        *,
        audience: str | None,
        issuer: str | None,
        principal_claim: str = "sub",
        refresh_ms: int = 300_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._jwks = jwks
        self._audience = audience
        self._issuer = issuer
        self._claim = principal_claim
        self._refresh_s = refresh_ms / 1000
        self._clock = clock
        self._keys: list[_Key] = []
        self._next_refresh = float("-inf")
        self._next_kid_refresh = float("-inf")
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def start(self) -> None:
        """Load the JWKS. A URL that cannot be fetched is logged and retried on use.

        Raises:
            ValueError: a JWKS file that cannot be read or holds no usable key.
        """
        if _is_url(self._jwks):
            await self._reload()
            return
        self._keys = _parse_jwks(await self._read_file())
        self._next_refresh = self._clock() + self._refresh_s

    async def close(self) -> None:
        """Close the HTTP session, if any. Idempotent."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _read_file(self) -> bytes:
        try:
            raw = await asyncio.to_thread(Path(self._jwks).read_bytes)
        except OSError as err:
            raise ValueError(f"cannot read the JWKS file {self._jwks}: {err.strerror}") from err
        if len(raw) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS file {self._jwks} is larger than {MAX_JWKS_BYTES} bytes")
        return raw

    async def _fetch(self) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_FETCH_TIMEOUT_S))
        try:
            async with self._session.get(self._jwks, allow_redirects=False) as response:
                if response.status != 200:
                    raise ValueError(f"the JWKS URL answered HTTP {response.status}")
                raw = await response.content.read(MAX_JWKS_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise ValueError(f"cannot fetch the JWKS URL: {type(err).__name__}") from err
        if len(raw) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS at the URL is larger than {MAX_JWKS_BYTES} bytes")
        return raw

    async def _reload(self) -> None:
        """Load the JWKS again; on failure keep the old keys and retry no sooner than a minute later."""
        try:
            raw = await (self._fetch() if _is_url(self._jwks) else self._read_file())
            keys = _parse_jwks(raw)
        except ValueError as err:
            log.warning("bearer: JWKS not reloaded, keeping %d keys: %s", len(self._keys), err)
            self._next_refresh = self._clock() + min(self._refresh_s, UNKNOWN_KID_REFRESH_S)
            return
        self._keys = keys
        self._next_refresh = self._clock() + self._refresh_s

    async def _fitting(self, kid: str | None, alg: str) -> list[_Key]:
        due = self._clock() >= self._next_refresh and not self._closed
        if due and not (self._lock.locked() and self._keys):
            async with self._lock:
                if self._clock() >= self._next_refresh:
                    await self._reload()
        found = [k for k in self._keys if (kid is None or k.kid == kid) and k.fits(alg)]
        if found or kid is None or self._closed:
            return found
        async with self._lock:
            if not any(k.kid == kid for k in self._keys) and self._clock() >= self._next_kid_refresh:
                self._next_kid_refresh = self._clock() + UNKNOWN_KID_REFRESH_S
                await self._reload()
        return [k for k in self._keys if k.kid == kid and k.fits(alg)]

    async def verify(self, token: str) -> str:
        """The user name a valid token names (see the module docstring for what is checked).

        Raises:
            UnauthorizedError: the token is malformed, uses another algorithm, names no known key, fails
                its signature, is expired or not yet valid, has the wrong audience or issuer, or lacks the
                principal claim. The message gives the reason only.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
            raise _refused("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as err:
            raise _refused("malformed token") from err
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise _refused("algorithm not allowed")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _refused("malformed token")
        keys = await self._fitting(kid, alg)
        if not keys:
            raise _refused("unknown signing key")
        claims = self._decode(token, alg, keys)
        self._check_times(claims)
        name = claims.get(self._claim)
        if not isinstance(name, str) or not name.strip():
            raise _refused(f"no {self._claim} claim")
        return name

    def _decode(self, token: str, alg: str, keys: list[_Key]) -> dict[str, Any]:
        options: dict[str, Any] = {
            "verify_exp": False,
            "verify_nbf": False,
            "verify_iat": False,
            "verify_aud": self._audience is not None,
            "verify_iss": self._issuer is not None,
        }
        failure: jwt.PyJWTError | None = None
        for key in keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    options=options,  # type: ignore[arg-type]
                    audience=self._audience,
                    issuer=self._issuer,
                )
                return claims
            except jwt.InvalidSignatureError as err:
                failure = err
            except jwt.PyJWTError as err:
                raise _refused(_reason(err)) from err
        assert failure is not None
        raise _refused("bad signature") from failure

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock()
        exp = _number(claims.get("exp"))
        if exp is None:
            raise _refused("no exp claim")
        if now > exp + LEEWAY_S:
            raise _refused("token expired")
        if "nbf" in claims:
            nbf = _number(claims["nbf"])
            if nbf is None or nbf > now + LEEWAY_S:
                raise _refused("token not yet valid")


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _reason(err: jwt.PyJWTError) -> str:
    if isinstance(err, jwt.MissingRequiredClaimError):
        return f"no {err.claim} claim"
    if isinstance(err, jwt.InvalidAudienceError):
        return "wrong audience"
    if isinstance(err, jwt.InvalidIssuerError):
        return "wrong issuer"
    if isinstance(err, jwt.InvalidAlgorithmError):
        return "algorithm not allowed"
    if isinstance(err, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(err, jwt.DecodeError):
        return "malformed token"
    return "invalid token"


def _refused(reason: str) -> UnauthorizedError:
    return UnauthorizedError(f"bearer token refused: {reason}")
