"""SCRAM credentials: RFC 7677's SCRAM-SHA-256 exchange, round trips, and malformed stored documents."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    SALT_BYTES,
    ScramCredential,
    decode_user,
    dummy_credential,
    encode_user,
    make_credential,
    verify,
)
from tierlog.wire.errors import InvalidRequestError

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL_WITHOUT_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_rfc7677_exchange_verifies_against_the_stored_keys() -> None:
    credential = make_credential("pencil", "SCRAM-SHA-256", 4096, RFC_SALT)
    auth_message = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_WITHOUT_PROOF}".encode()
    # The server's side of RFC 5802: recover ClientKey from the proof and hash it to StoredKey.
    client_signature = hmac.digest(credential.stored_key, auth_message, "sha256")
    client_key = bytes(a ^ b for a, b in zip(CLIENT_PROOF, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == credential.stored_key
    assert hmac.digest(credential.server_key, auth_message, "sha256") == SERVER_SIGNATURE
    assert verify(credential, "pencil")
    assert not verify(credential, "pencil ")


def test_keys_match_an_independent_derivation() -> None:
    for mechanism, name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
        credential = make_credential("pässword", mechanism, 4096, b"salt")
        salted = hashlib.pbkdf2_hmac(name, "pässword".encode(), b"salt", 4096)
        client_key = hmac.new(salted, b"Client Key", name).digest()
        assert credential.stored_key == hashlib.new(name, client_key).digest()
        assert credential.server_key == hmac.new(salted, b"Server Key", name).digest()


def test_fresh_salts_and_wrong_passwords() -> None:
    first, second = make_credential("secret"), make_credential("secret")
    assert len(first.salt) == SALT_BYTES and first.salt != second.salt
    assert first.stored_key != second.stored_key
    assert verify(first, "secret") and verify(second, "secret")
    assert not verify(first, "Secret") and not verify(first, "")


def test_dummy_credential_verifies_nothing_and_is_stable() -> None:
    dummy = dummy_credential()
    assert dummy == dummy_credential("SCRAM-SHA-256", 4096)
    assert dummy.iterations == 4096
    # one unknown name always gets the same salt, two names different ones (as real users have)
    assert dummy_credential(user="mallory").salt == dummy_credential(user="mallory").salt
    assert dummy_credential(user="mallory").salt != dummy_credential(user="trudy").salt
    assert not verify(dummy, "") and not verify(dummy, "password")
    assert dummy_credential("SCRAM-SHA-512", 8192).mechanism == "SCRAM-SHA-512"


def test_repr_shows_no_keys() -> None:
    credential = make_credential("secret", salt=b"visible-salt")
    text = repr(credential)
    assert "SCRAM-SHA-256" in text and "4096" in text
    for secret in (credential.salt, credential.stored_key, credential.server_key):
        assert repr(secret) not in text and base64.b64encode(secret).decode() not in text


@pytest.mark.parametrize(
    ("password", "mechanism", "iterations", "salt"),
    [
        ("", "SCRAM-SHA-256", 4096, None),
        ("pw", "SCRAM-SHA-1", 4096, None),
        ("pw", "SCRAM-SHA-256", MIN_ITERATIONS - 1, None),
        ("pw", "SCRAM-SHA-256", MAX_ITERATIONS + 1, None),
        ("pw", "SCRAM-SHA-256", 2**20, None),
        ("pw", "SCRAM-SHA-256", 4096, b""),
    ],
)
def test_make_credential_rejects(password: str, mechanism: str, iterations: int, salt: bytes | None) -> None:
    with pytest.raises(InvalidRequestError):
        make_credential(password, mechanism, iterations, salt)


def test_the_iteration_bounds_are_kafkas() -> None:
    assert (MIN_ITERATIONS, MAX_ITERATIONS) == (4096, 16384)
    for iterations in (MIN_ITERATIONS, MAX_ITERATIONS):
        credential = make_credential("pw", "SCRAM-SHA-512", iterations, b"s")
        assert credential.iterations == iterations and verify(credential, "pw")


@settings(max_examples=10)
@given(
    mechanisms=st.sets(st.sampled_from(MECHANISMS), min_size=1),
    salt=st.binary(min_size=1, max_size=64),
    iterations=st.integers(4096, 5000),
)
def test_encode_decode_round_trip(mechanisms: set[str], salt: bytes, iterations: int) -> None:
    credentials = {m: make_credential("pw", m, iterations, salt) for m in mechanisms}
    raw = encode_user(credentials)
    assert decode_user(raw) == credentials
    document = json.loads(raw)
    assert document["format"] == 1 and set(document["credentials"]) == mechanisms


def test_the_stored_document_shape() -> None:
    credential = make_credential("pencil", "SCRAM-SHA-256", 4096, RFC_SALT)
    document = json.loads(encode_user({"SCRAM-SHA-256": credential}))
    assert document == {
        "format": 1,
        "credentials": {
            "SCRAM-SHA-256": {
                "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
                "iterations": 4096,
                "stored_key": base64.b64encode(credential.stored_key).decode(),
                "server_key": base64.b64encode(credential.server_key).decode(),
            }
        },
    }
    with pytest.raises(ValueError):
        encode_user({"SCRAM-SHA-512": credential})


def _good() -> dict[str, object]:
    raw = encode_user({"SCRAM-SHA-256": make_credential("pw", salt=b"s")})
    document: dict[str, object] = json.loads(raw)
    return document


def _entry(document: dict[str, object]) -> dict[str, object]:
    credentials = document["credentials"]
    assert isinstance(credentials, dict)
    entry: dict[str, object] = credentials["SCRAM-SHA-256"]
    return entry


def _corruptions() -> list[bytes]:
    found = [b"", b"not json", b"\xff\xfe", b"[]", b'{"format": 2, "credentials": {}}', b'{"format": 1}']
    found.append(json.dumps({"format": 1, "credentials": {"SCRAM-SHA-1": {}}}).encode())
    found.append(json.dumps({"format": 1, "credentials": {"SCRAM-SHA-256": []}}).encode())
    for key, value in (
        ("salt", "!!!"),
        ("salt", ""),
        ("salt", 5),
        ("stored_key", base64.b64encode(b"short").decode()),
        ("server_key", None),
        ("iterations", "4096"),
        ("iterations", 1),
        ("iterations", MAX_ITERATIONS + 1),
        ("iterations", True),
        ("iterations", None),
    ):
        document = _good()
        _entry(document)[key] = value
        found.append(json.dumps(document).encode())
    document = _good()
    del _entry(document)["stored_key"]
    found.append(json.dumps(document).encode())
    return found


@pytest.mark.parametrize("raw", _corruptions())
def test_decode_rejects_corrupt_documents(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_user(raw)


def test_direct_construction_is_checked() -> None:
    with pytest.raises(InvalidRequestError):
        ScramCredential("SCRAM-SHA-256", b"s", 4096, b"k", b"k")
