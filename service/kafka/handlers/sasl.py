"""SaslHandshake (key 17) and SaslAuthenticate (key 36): a connection proves who it is with PLAIN or
SCRAM-SHA-256/512 against the broker's security store, before any other request but ApiVersions.

Only SaslHandshake v1 is served: v0 is followed by raw, unframed SASL tokens, which this listener does
not read (every client of Kafka 1.0 or newer uses v1 and SaslAuthenticate). A failed authentication is
answered SASL_AUTHENTICATION_FAILED with Kafka's message and the connection closed after the answer, as
Kafka does; failures count toward the same throttle and metrics as HTTP Basic
(:class:`~tierlog.service.security.authn.Authenticator`), and a user or host over its limit is refused
without its credentials being looked at.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tierlog.service.kafka.apis import api
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

__all__ = ["SASL_AUTHENTICATE_KEY", "SASL_HANDSHAKE_KEY", "abandon_scram"]

log = logging.getLogger("tierlog.kafka")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


@api(SASL_HANDSHAKE_KEY, "SaslHandshake", 1, 1)
async def handshake(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    offered = list(request.listener.sasl_mechanisms)
    session = request.session
    if not offered or (session.principal is not None and session.scram is None):
        # Kafka's answer on a listener without SASL, or after authentication (no re-authentication)
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": offered}
    if body.mechanism not in offered:
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered}
    session.mechanism = body.mechanism
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
    mechanism = session.mechanism
    if mechanism is None:
        # before a handshake the connection can never authenticate; after authentication (or on a
        # listener without SASL) Kafka answers and serves on
        session.close_after_answer = session.principal is None
        return {
            "error_code": ErrorCode.illegal_sasl_state,
            "error_message": "SaslAuthenticate before a SaslHandshake, or after authentication",
            "auth_bytes": b"",
        }
    try:
        if mechanism == "PLAIN":
            return await _plain(request, body.auth_bytes)
        if mechanism == "OAUTHBEARER":
            return await _oauthbearer(request, body.auth_bytes)
        return _scram(request, mechanism, body.auth_bytes)
    except TooManyFailuresError as err:
        authenticator = request.listener.authenticator
        if authenticator is not None:
            authenticator.throttled()
        return _failed(session, f"Authentication failed: {err.message}")
    except SaslError as err:
        return _failed(session, f"Authentication failed: {err}")


def _authenticated(request: KafkaRequest, principal: Principal, mechanism: str) -> dict[str, Any]:
    session = request.session
    session.principal = principal
    session.mechanism = None
    session.scram = None
    log.debug("Kafka connection from %s:%d authenticated as %s (%s)", *request.peer, principal, mechanism)
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": b""}


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
    return _authenticated(request, principal, "OAUTHBEARER")


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
    answer["auth_bytes"] = final
    return answer
