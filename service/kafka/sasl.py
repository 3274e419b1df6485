"""The server side of Kafka's SASL mechanisms, as pure message logic (no I/O, no store):
PLAIN (RFC 4616), SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) against the stored
:class:`~tierlog.service.security.scram.ScramCredential`, and OAUTHBEARER's client message (RFC 7628:
``n,[a=authzid], 0x01 auth=Bearer <token> 0x01 [key=value 0x01]... 0x01``), whose token the caller checks.

PLAIN's one message is ``authzid NUL user NUL password`` (UTF-8). SCRAM is two round trips::

    client-first   n,[a=authzid],n=user,r=client-nonce
    server-first   r=client-nonce+server-nonce,s=base64(salt),i=iterations
    client-final   c=base64(gs2-header),r=nonce,p=base64(ClientKey XOR ClientSignature)
    server-final   v=base64(HMAC(ServerKey, AuthMessage))

with ``AuthMessage = client-first-bare "," server-first "," client-final-without-proof`` and
``ClientSignature = HMAC(StoredKey, AuthMessage)``. The proof is checked by ``H(ClientKey) == StoredKey``
in constant time: the server never runs PBKDF2. Channel binding is not offered (``p=`` is refused), as
Kafka does; an authorization id, when given, must be the user itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from tierlog.service.security.scram import ScramCredential

__all__ = [
    "SCRAM_MECHANISMS",
    "SaslError",
    "ScramExchange",
    "parse_oauthbearer",
    "parse_plain",
    "start_scram",
]

SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_NONCE_BYTES = 24


class SaslError(ValueError):
    """A SASL message that does not follow its mechanism (answered as an authentication failure)."""


def parse_plain(auth_bytes: bytes) -> tuple[str, str]:
    """The ``(user, password)`` of a PLAIN message. Pure.

    Raises:
        SaslError: not three NUL-separated UTF-8 parts, an empty user or password, or an authorization
            id other than the user.
    """
    try:
        authzid, user, password = auth_bytes.decode("utf-8").split("\x00")
    except (UnicodeDecodeError, ValueError):
        raise SaslError("a PLAIN message is authzid NUL user NUL password") from None
    if not user or not password:
        raise SaslError("a PLAIN message needs a user and a password")
    if authzid and authzid != user:
        raise SaslError("an authorization id other than the user is not supported")
    return user, password


def parse_oauthbearer(auth_bytes: bytes) -> str:
    """The bearer token of an OAUTHBEARER client message. Pure.

    Raises:
        SaslError: not UTF-8, no ``n,`` GS2 header, or no ``auth=Bearer`` field.
    """
    try:
        text = auth_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("an OAUTHBEARER message is UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith(("n,", "y,")):
        raise SaslError("an OAUTHBEARER message starts with a GS2 header and 0x01")
    for field in rest.split("\x01"):
        key, _, value = field.partition("=")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    raise SaslError("an OAUTHBEARER message needs auth=Bearer <token>")


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"malformed SCRAM attribute {part[:40]!r}")
        out.append((key, value))
    return out


def _sasl_name(value: str) -> str:
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise SaslError("malformed SCRAM user name")
    return value.replace("=2C", ",").replace("=3D", "=")


@dataclass(slots=True)
class ScramExchange:
    """One SCRAM exchange after the client's first message. Not thread-safe (one per connection)."""

    mechanism: str
    user: str
    gs2_header: str
    client_first_bare: str
    nonce: str  # the client's nonce, then (after :meth:`server_first`) client's + server's
    server_first_message: str = ""
    credential: ScramCredential | None = None

    def server_first(self, credential: ScramCredential) -> bytes:
        """The server-first message for ``credential`` (the user's, or a dummy for an unknown user, so
        the answer looks the same). Call once."""
        self.credential = credential
        self.nonce += secrets.token_urlsafe(_NONCE_BYTES)
        salt = base64.b64encode(credential.salt).decode("ascii")
        self.server_first_message = f"r={self.nonce},s={salt},i={credential.iterations}"
        return self.server_first_message.encode("ascii")

    def server_final(self, client_final: bytes) -> bytes | None:
        """The server-final message when ``client_final`` proves the password; None when the proof is
        wrong. Pure apart from hashing.

        Raises:
            SaslError: a malformed message, a channel binding or nonce not those of this exchange.
        """
        assert self.credential is not None, "server_first() first"
        try:
            text = client_final.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("a SCRAM message is UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise SaslError("the SCRAM client-final message has no proof")
        found = dict(_attributes(without_proof))
        expected_binding = base64.b64encode(self.gs2_header.encode("utf-8")).decode("ascii")
        if found.get("c") != expected_binding or found.get("r") != self.nonce:
            raise SaslError("the SCRAM client-final message does not match this exchange")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except binascii.Error:
            raise SaslError("the SCRAM proof is not base64") from None
        hash_name = SCRAM_MECHANISMS[self.mechanism]
        auth_message = ",".join((self.client_first_bare, self.server_first_message, without_proof)).encode()
        signature = hmac.digest(self.credential.stored_key, auth_message, hash_name)
        if len(proof) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), self.credential.stored_key):
            return None
        verifier = hmac.digest(self.credential.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(verifier)


def start_scram(mechanism: str, client_first: bytes) -> ScramExchange:
    """The exchange a client-first message opens. Pure.

    Raises:
        SaslError: an unknown mechanism, a malformed message, channel binding asked for, no user or nonce,
            or an authorization id other than the user.
    """
    if mechanism not in SCRAM_MECHANISMS:
        raise SaslError(f"not a SCRAM mechanism: {mechanism}")
    try:
        text = client_first.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("a SCRAM message is UTF-8") from None
    cbind, sep1, rest = text.partition(",")
    authzid, sep2, bare = rest.partition(",")
    if not sep1 or not sep2 or cbind not in ("n", "y"):
        raise SaslError("SCRAM channel binding is not supported; the message must start with n,")
    found = dict(_attributes(bare))
    user = _sasl_name(found.get("n", ""))
    nonce = found.get("r", "")
    if not user or not nonce or "m" in found:
        raise SaslError("the SCRAM client-first message needs n= and r=")
    if authzid and _sasl_name(authzid.removeprefix("a=")) != user:
        raise SaslError("an authorization id other than the user is not supported")
    return ScramExchange(mechanism, user, f"{cbind},{authzid},", bare, nonce)
