"""SCRAM credentials as Kafka stores them (RFC 5802, RFC 7677), and their JSON form in the metadata store.

A credential never holds the password, only what a SCRAM server keeps::

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

with H = SHA-256 or SHA-512. A password is the UTF-8 encoding of the text as given, with no SASLprep
normalisation, as Kafka's ``ScramFormatter`` does: a password is checked byte for byte.

HTTP Basic is checked by :func:`verify`: it derives ``StoredKey`` from the offered password and compares it
with the stored one in constant time. PBKDF2 with thousands of iterations costs milliseconds of CPU: callers
on the event loop run it in a thread (``asyncio.to_thread``).

The store keeps one JSON document per user (``security/users/<name>``)::

    {"format": 1, "credentials": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
                                                    "stored_key": "<base64>", "server_key": "<base64>"}}}

The ``credentials`` map keeps Kafka's shape (a credential per mechanism), but our writers always store
exactly one: HTTP Basic has one password, so setting it replaces the whole document.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "DEFAULT_ITERATIONS",
    "FORMAT",
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "SALT_BYTES",
    "ScramCredential",
    "credential_from_salted",
    "decode_user",
    "dummy_credential",
    "encode_user",
    "make_credential",
    "verify",
]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096
#: Kafka's bounds on SCRAM iterations (``ScramMechanism.minIterations`` / ``maxIterations``): the one
#: range every writer (the users API, ``tierlog users``) and every stored credential is held to.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 32
#: The version of the stored JSON document.
FORMAT = 1

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def _hash_name(mechanism: str) -> str:
    name = _HASHES.get(mechanism)
    if name is None:
        raise InvalidRequestError(
            f"unknown SCRAM mechanism {mechanism!r}: expected one of {', '.join(MECHANISMS)}"
        )
    return name


@dataclass(frozen=True)
class ScramCredential:
    """One user's SCRAM credential for one mechanism. Its repr shows neither the salt nor the keys.

    Raises (on construction):
        InvalidRequestError: an unknown mechanism, iterations outside [MIN_ITERATIONS, MAX_ITERATIONS], an
            empty salt, or keys that are not the digest size of the mechanism's hash.
    """

    mechanism: str
    salt: bytes = field(repr=False)
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        size = hashlib.new(_hash_name(self.mechanism)).digest_size
        _check_iterations(self.iterations)
        if not self.salt:
            raise InvalidRequestError("a SCRAM salt must not be empty")
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise InvalidRequestError(f"{self.mechanism} keys are {size} bytes long")


def _check_iterations(iterations: object) -> None:
    if (
        not isinstance(iterations, int)
        or isinstance(iterations, bool)
        or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS
    ):
        raise InvalidRequestError(
            f"invalid SCRAM iterations {iterations!r}: expected {MIN_ITERATIONS} to {MAX_ITERATIONS}"
        )


def _salted(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def _stored_key(hash_name: str, salted: bytes) -> bytes:
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return hashlib.new(hash_name, client_key).digest()


def make_credential(
    password: str,
    mechanism: str = "SCRAM-SHA-256",
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """The credential of ``password``, with a fresh random salt of :data:`SALT_BYTES` unless ``salt`` is
    given. CPU-bound (PBKDF2): call it in a thread from an event loop. Thread-safe.

    Raises:
        InvalidRequestError: an empty password, an unknown mechanism, iterations out of range, an empty salt.
    """
    hash_name = _hash_name(mechanism)
    _check_iterations(iterations)
    if not isinstance(password, str) or not password:
        raise InvalidRequestError("a password must be a non-empty string")
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    if not salt:
        raise InvalidRequestError("a SCRAM salt must not be empty")
    return credential_from_salted(mechanism, salt, iterations, _salted(hash_name, password, salt, iterations))


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The credential of a ``SaltedPassword`` a client derived itself (Kafka's AlterUserScramCredentials
    sends the salt and salted password, never the password). Pure.

    Raises:
        InvalidRequestError: an unknown mechanism, iterations out of range, an empty salt or salted password.
    """
    hash_name = _hash_name(mechanism)
    if not salted_password:
        raise InvalidRequestError("a SCRAM salted password must not be empty")
    return ScramCredential(
        mechanism=mechanism,
        salt=salt,
        iterations=iterations,
        stored_key=_stored_key(hash_name, salted_password),
        server_key=hmac.digest(salted_password, b"Server Key", hash_name),
    )


def verify(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from, compared in constant time. Never raises
    for a wrong password. CPU-bound (PBKDF2): call it in a thread from an event loop. Thread-safe."""
    hash_name = _hash_name(credential.mechanism)
    salted = _salted(hash_name, password, credential.salt, credential.iterations)
    return hmac.compare_digest(_stored_key(hash_name, salted), credential.stored_key)


def dummy_credential(
    mechanism: str = "SCRAM-SHA-256", iterations: int = DEFAULT_ITERATIONS, *, user: str = ""
) -> ScramCredential:
    """A credential no password verifies against (random keys, made once per process and arguments), checked
    for an unknown user so that the answer and its cost are those of a wrong password. Its salt is derived
    from ``user`` with a per-process secret, so a SCRAM server-first message for an unknown name is stable
    and differs between names, as a real user's does. Thread-safe.

    Raises:
        InvalidRequestError: an unknown mechanism or iterations out of range.
    """
    salt = hmac.new(_DUMMY_SALT_KEY, user.encode(), hashlib.sha256).digest()[:SALT_BYTES]
    return dataclasses.replace(_dummy(mechanism, iterations), salt=salt)


_DUMMY_SALT_KEY = secrets.token_bytes(32)


@functools.lru_cache(maxsize=16)
def _dummy(mechanism: str, iterations: int) -> ScramCredential:
    size = hashlib.new(_hash_name(mechanism)).digest_size
    return ScramCredential(
        mechanism=mechanism,
        salt=secrets.token_bytes(SALT_BYTES),
        iterations=iterations,
        stored_key=secrets.token_bytes(size),
        server_key=secrets.token_bytes(size),
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_user(credentials: Mapping[str, ScramCredential]) -> bytes:
    """The stored JSON document of one user's credentials, keyed by mechanism (compact, sorted keys). Pure.

    Raises:
        ValueError: a key is not its credential's mechanism.
    """
    document: dict[str, Any] = {}
    for mechanism, credential in credentials.items():
        if mechanism != credential.mechanism:
            raise ValueError(f"credential of {credential.mechanism} stored under {mechanism!r}")
        document[mechanism] = {
            "salt": _b64(credential.salt),
            "iterations": credential.iterations,
            "stored_key": _b64(credential.stored_key),
            "server_key": _b64(credential.server_key),
        }
    return json.dumps(
        {"format": FORMAT, "credentials": document}, sort_keys=True, separators=(",", ":")
    ).encode()


def _unb64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not base64 text")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as err:
        raise ValueError(f"{what} is not base64 text") from err


def decode_user(raw: bytes) -> dict[str, ScramCredential]:
    """The credentials of a stored JSON document, keyed by mechanism. Pure.

    Raises:
        ValueError: not JSON, another format, an unknown mechanism, a missing or malformed field, or values a
            credential cannot have (the message names the field, never a key).
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError("a stored user is not JSON") from err
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"a stored user is not format {FORMAT}")
    entries = document.get("credentials")
    if not isinstance(entries, dict):
        raise ValueError("a stored user has no credentials object")
    credentials: dict[str, ScramCredential] = {}
    for mechanism, entry in entries.items():
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        if not isinstance(entry, dict):
            raise ValueError(f"the {mechanism} credential is not an object")
        try:
            credentials[mechanism] = ScramCredential(
                mechanism=mechanism,
                salt=_unb64(entry.get("salt"), "salt"),
                iterations=entry.get("iterations"),  # type: ignore[arg-type]  # checked on construction
                stored_key=_unb64(entry.get("stored_key"), "stored_key"),
                server_key=_unb64(entry.get("server_key"), "server_key"),
            )
        except InvalidRequestError as err:
            raise ValueError(f"invalid {mechanism} credential: {err.message}") from err
    return credentials
