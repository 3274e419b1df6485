"""The SASL mechanisms' server side (PLAIN, SCRAM-SHA-256/512) against a client written from RFC 5802."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from tierlog.service.kafka.sasl import (
    SCRAM_MECHANISMS,
    SaslError,
    parse_oauthbearer,
    parse_plain,
    start_scram,
)
from tierlog.service.security.scram import make_credential

SALT = b"0123456789abcdef"


def test_plain_parses_user_and_password() -> None:
    assert parse_plain(b"\x00alice\x00s3cr\xc3\xa9t") == ("alice", "s3cr\u00e9t")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "pw")


@pytest.mark.parametrize(
    "message", [b"alice\x00pw", b"\x00\x00pw", b"\x00alice\x00", b"bob\x00alice\x00pw", b"\xff"]
)
def test_plain_refuses_malformed_messages(message: bytes) -> None:
    with pytest.raises(SaslError):
        parse_plain(message)


def _client_final(
    mechanism: str, password: str, client_first_bare: str, server_first: str
) -> tuple[str, bytes]:
    """The client-final message and the server signature the client expects (RFC 5802 section 3)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    expected = b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, hash_name))
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected


@pytest.mark.parametrize("mechanism", sorted(SCRAM_MECHANISMS))
def test_scram_accepts_the_right_password_and_proves_the_server(mechanism: str) -> None:
    credential = make_credential("pw", mechanism, salt=SALT)
    exchange = start_scram(mechanism, b"n,,n=alice,r=clientnonce")
    assert exchange.user == "alice"
    server_first = exchange.server_first(credential).decode()
    assert server_first.startswith("r=clientnonce") and f"i={credential.iterations}" in server_first
    final, expected = _client_final(mechanism, "pw", "n=alice,r=clientnonce", server_first)
    assert exchange.server_final(final.encode()) == expected


def test_scram_refuses_a_wrong_password() -> None:
    credential = make_credential("pw", salt=SALT)
    exchange = start_scram("SCRAM-SHA-256", b"n,,n=alice,r=abc")
    server_first = exchange.server_first(credential).decode()
    final, _ = _client_final("SCRAM-SHA-256", "wrong", "n=alice,r=abc", server_first)
    assert exchange.server_final(final.encode()) is None


def test_scram_refuses_another_nonce() -> None:
    exchange = start_scram("SCRAM-SHA-256", b"n,,n=alice,r=abc")
    exchange.server_first(make_credential("pw", salt=SALT))
    with pytest.raises(SaslError):
        exchange.server_final(b"c=biws,r=abcOTHER,p=AAAA")


@pytest.mark.parametrize(
    "message",
    [b"p=tls-unique,,n=alice,r=a", b"n,,r=a", b"n,,n=alice", b"n,a=bob,n=alice,r=a", b"n,,n=a=b,r=x"],
)
def test_scram_refuses_malformed_client_first_messages(message: bytes) -> None:
    with pytest.raises(SaslError):
        start_scram("SCRAM-SHA-256", message)


def test_scram_decodes_escaped_user_names() -> None:
    assert start_scram("SCRAM-SHA-512", b"n,a=a=2Cb,n=a=2Cb,r=x").user == "a,b"


def test_oauthbearer_finds_the_token() -> None:
    assert parse_oauthbearer(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01") == "abc.def.ghi"
    assert parse_oauthbearer(b"n,a=alice,\x01host=x\x01auth=bearer tok\x01\x01") == "tok"


@pytest.mark.parametrize(
    "message", [b"auth=Bearer t", b"n,,\x01auth=Basic t\x01\x01", b"n,,\x01\x01", b"\xff"]
)
def test_oauthbearer_refuses_malformed_messages(message: bytes) -> None:
    with pytest.raises(SaslError):
        parse_oauthbearer(message)
