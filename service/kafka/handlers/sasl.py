"""SaslHandshake (key 17) and SaslAuthenticate (key 36): a connection proves who it is with PLAIN,
SCRAM-SHA-256/512 or OAUTHBEARER against the broker's security store, before any other request but
ApiVersions.

SaslHandshake v1 is followed by SaslAuthenticate requests; v0 (Kafka's clients before 1.0) by the SASL
tokens as bare size-prefixed frames, each answered by the server's token the same way (:func:`raw_token`),
and a failure closes the connection without an answer, as Kafka does. A failed SaslAuthenticate is
answered SASL_AUTHENTICATION_FAILED with Kafka's message and the connection closed after the answer;
failures count toward the same throttle and metrics as HTTP Basic
(:class:`~tierlog.service.security.authn.Authenticator`), and a user or host over its limit is refused
without its credentials being looked at. An unsupported mechanism is answered UNSUPPORTED_SASL_MECHANISM
and the connection closed.

KIP-368: a session lasts ``connections.max.reauth.ms`` (0: forever), an OAUTHBEARER one at most until its
token's ``exp``; SaslAuthenticate v1+ tells the client (``session_lifetime_ms``). Before then the client
re-authenticates on the same connection: a SaslHandshake on an authenticated connection whose session
expires starts it (at most once a second, else ILLEGAL_SASL_STATE as without expiry), with the same
mechanism and the same principal, or it fails and the connection closes. The listener closes a
connection that sends any other request once its session has expired (clients of SaslAuthenticate v0,
which cannot re-authenticate, included).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jwt

from tierlog.service.kafka.apis import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, CloseConnection, api
from tierlog.service.kafka.context import KafkaRequest, Session
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.kafka.sasl import (
    SCRAM_MECHANISMS,
    SaslError,
    parse_oauthbearer,
    parse_plain,
    start_scram,
)
from tierlog.service.security.model import Principal
from tierlog.service.security.throttle import TooManyFailuresError
from tierlog.wire.errors import UnauthorizedError

if TYPE_CHECKING:
    from tierlog.service.security.authn import Authenticator

__all__ = ["SASL_AUTHENTICATE_KEY", "SASL_HANDSHAKE_KEY", "abandon_scram", "raw_token", "session_expired"]

log = logging.getLogger("tierlog.kafka")

_REAUTHENTICATION_INTERVAL_S = 1.0  # Kafka's floor between two re-authentications of one connection


class AuthenticationFailed(CloseConnection):
    """A SASL exchange after SaslHandshake v0 failed: the connection closes without an answer."""

    reason = "authentication"


def _now() -> float:
    return asyncio.get_running_loop().time()


def session_expired(session: Session) -> bool:
    """Whether the connection's authenticated session has ended (KIP-368)."""
    return session.expires_at is not None and _now() >= session.expires_at


def _may_reauthenticate(session: Session) -> bool:
    """Kafka's rule: only a session that expires re-authenticates, at most once a second."""
    began = session.reauthentication_began
    return session.expires_at is not None and (
        began is None or _now() - began >= _REAUTHENTICATION_INTERVAL_S
    )


@api(SASL_HANDSHAKE_KEY, "SaslHandshake", 0, 1)
async def handshake(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    offered = list(request.listener.sasl_mechanisms)
    session = request.session
    idle = session.mechanism is None and session.scram is None
    if not offered or (session.principal is not None and idle and not session.reauthenticating):
        # a listener without SASL, or an authenticated connection: re-authentication, or Kafka's refusal
        if not offered or request.version == 0 or not _may_reauthenticate(session):
            return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": offered}
        session.reauthenticating = True
        session.reauthentication_began = _now()
    if body.mechanism not in offered:
        session.close_after_answer = True
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered}
    session.reauthentication_refusal = None
    if session.reauthenticating and body.mechanism != session.authenticated_with:
        session.reauthentication_refusal = (
            f"SASL mechanism '{body.mechanism}' requested by client is not supported for re-authentication "
            f"of mechanism '{session.authenticated_with}'"
        )
    session.mechanism = body.mechanism
    session.raw_tokens = request.version == 0
    abandon_scram(request.listener.authenticator, session)
    return {"error_code": ErrorCode.none, "mechanisms": offered}


def abandon_scram(authenticator: Authenticator | None, session: Session) -> None:
    """End a SCRAM exchange left between its two messages (a new handshake, a closed connection) as a
    failed attempt, so its place among the attempts in flight is released. Idempotent."""
    exchange, session.scram = session.scram, None
    if exchange is not None and authenticator is not None and session.mechanism_of_scram is not None:
        authenticator.scram_settled(exchange.user, session.host, session.mechanism_of_scram, verified=False)
    session.mechanism_of_scram = None


def _failed(session: Session, message: str) -> dict[str, Any]:
    session.close_after_answer = True
    return {
        "error_code": ErrorCode.sasl_authentication_failed,
        "error_message": message,
        "auth_bytes": b"",
    }


def _invalid_credentials(mechanism: str) -> str:
    if mechanism == "PLAIN":
        return "Authentication failed: Invalid username or password"
    return (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        + mechanism
    )


@api(SASL_AUTHENTICATE_KEY, "SaslAuthenticate", 0, 2)
async def authenticate(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    session = request.session
    if session.mechanism is None or session.raw_tokens:
        # before a handshake the connection can never authenticate; after authentication (or on a
        # listener without SASL) Kafka answers and serves on
        session.close_after_answer = session.principal is None
        return {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate before a SaslHandshake, or after authentication",
            "auth_bytes": b"",
        }
    return await _exchange(request, body.auth_bytes)


async def raw_token(request: KafkaRequest, token: bytes) -> bytes:
    """After a SaslHandshake v0: the frame answering one bare SASL token (the server's token, size-prefixed,
    no response header). Raises AuthenticationFailed when authentication fails (no answer is sent)."""
    session = request.session
    answer = await _exchange(request, token)
    if answer["error_code"] != ErrorCode.none:
        raise AuthenticationFailed(f"SASL authentication failed: {answer['error_message']}")
    if session.mechanism is None:  # authenticated: Kafka's framing from now on
        session.raw_tokens = False
    data: bytes = answer["auth_bytes"]
    return struct.pack(">i", len(data)) + data


async def _exchange(request: KafkaRequest, auth_bytes: bytes) -> dict[str, Any]:
    """One step of the chosen mechanism's exchange: the SaslAuthenticate answer."""
    session = request.session
    mechanism = session.mechanism
    assert mechanism is not None
    if session.reauthentication_refusal is not None:
        return _failed(session, session.reauthentication_refusal)
    try:
        if mechanism == "PLAIN":
            return await _plain(request, auth_bytes)
        if mechanism == "OAUTHBEARER":
            return await _oauthbearer(request, auth_bytes)
        return _scram(request, mechanism, auth_bytes)
    except TooManyFailuresError as err:
        authenticator = request.listener.authenticator
        if authenticator is not None:
            authenticator.throttled()
        return _failed(session, f"Authentication failed: {err.message}")
    except SaslError as err:
        return _failed(session, f"Authentication failed: {err}")


def _authenticated(
    request: KafkaRequest, principal: Principal, mechanism: str, expires_ms: int | None = None
) -> dict[str, Any]:
    """Settle a successful exchange: the session's principal, its lifetime (KIP-368: the smaller of
    ``connections.max.reauth.ms`` and the credential's remaining life ``expires_ms``, epoch ms), and the
    answer. A re-authentication as another principal fails, as in Kafka."""
    session = request.session
    if session.reauthenticating and principal != session.principal:
        return _failed(
            session,
            f"Cannot change principals during re-authentication from {session.principal} to {principal}",
        )
    limits = (
        [request.settings.connections_max_reauth_ms] if request.settings.connections_max_reauth_ms else []
    )
    if expires_ms is not None:
        limits.append(max(0, expires_ms - int(time.time() * 1000)))
    lifetime = min(limits, default=0)
    session.expires_at = _now() + lifetime / 1000 if limits else None
    session.principal = principal
    session.authenticated_with = mechanism
    session.mechanism = None
    session.scram = None
    session.reauthenticating = False
    log.debug("Kafka connection from %s:%d authenticated as %s (%s)", *request.peer, principal, mechanism)
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "auth_bytes": b"",
        "session_lifetime": lifetime,
    }


async def _plain(request: KafkaRequest, auth_bytes: bytes) -> dict[str, Any]:
    authenticator = request.listener.authenticator
    assert authenticator is not None, "SASL is offered only with an authenticator"
    user, password = parse_plain(auth_bytes)
    try:
        principal = await authenticator.authenticate_password(user, password, request.session.host)
    except TooManyFailuresError:
        raise
    except UnauthorizedError:
        return _failed(request.session, _invalid_credentials("PLAIN"))
    return _authenticated(request, principal, "PLAIN")


def _token_expiry_ms(token: str) -> int | None:
    """A verified JWT's ``exp`` in epoch milliseconds (the signature was checked: read without it)."""
    claims = jwt.decode(token, options={"verify_signature": False})
    exp = claims.get("exp")
    return int(exp * 1000) if isinstance(exp, int | float) else None


async def _oauthbearer(request: KafkaRequest, auth_bytes: bytes) -> dict[str, Any]:
    authenticator = request.listener.authenticator
    assert authenticator is not None, "SASL is offered only with an authenticator"
    token = parse_oauthbearer(auth_bytes)
    try:
        principal = await authenticator.authenticate_token(token, request.session.host)
    except TooManyFailuresError:
        raise
    except UnauthorizedError as err:
        return _failed(request.session, f"Authentication failed: {err.message}")
    return _authenticated(request, principal, "OAUTHBEARER", _token_expiry_ms(token))


def _scram(request: KafkaRequest, mechanism: str, auth_bytes: bytes) -> dict[str, Any]:
    authenticator = request.listener.authenticator
    assert authenticator is not None and mechanism in SCRAM_MECHANISMS
    session = request.session
    exchange = session.scram
    if exchange is None:  # the client-first message
        exchange = start_scram(mechanism, auth_bytes)
        credential = authenticator.scram_credential(exchange.user, mechanism, session.host)
        session.scram = exchange
        session.mechanism_of_scram = mechanism
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": exchange.server_first(credential),
        }
    session.scram = session.mechanism_of_scram = None  # settled below, whatever happens
    try:
        final = exchange.server_final(auth_bytes)
    except SaslError:
        authenticator.scram_settled(exchange.user, session.host, mechanism, verified=False)
        raise
    authenticator.scram_settled(exchange.user, session.host, mechanism, verified=final is not None)
    if final is None:
        return _failed(session, _invalid_credentials(mechanism))
    answer = _authenticated(request, Principal.user(exchange.user), mechanism)
    if answer["error_code"] == ErrorCode.none:
        answer["auth_bytes"] = final
    return answer
