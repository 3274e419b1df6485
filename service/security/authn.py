"""Authentication: who a request acts as (``docs/design/0012-security.md``).

:func:`authn_middleware` sets :data:`PRINCIPAL` and :data:`CLIENT_HOST` on every request. With
``authentication.methods`` empty every request is ``User:ANONYMOUS`` and nothing else happens. Otherwise
``/health``, ``/ready`` and ``/openapi.json`` (and ``/metrics`` with ``metrics.public``) stay open, and every
other request needs, in this order: a client certificate mapped to a user (``mtls``), or an ``Authorization``
header whose scheme is listed: ``Basic`` checked against the user's SCRAM credentials, ``Bearer`` checked by
:class:`~tierlog.service.security.bearer.BearerVerifier`. Anything else is a 401 (40101); the error
middleware adds the ``WWW-Authenticate`` challenge. An unknown user is checked against a dummy credential, and
every failed Basic verification (unknown user, wrong password, malformed credentials) answers no sooner than
:data:`FAILED_BASIC_FLOOR_S` after it started, waiting on the event loop: a user's own mechanism and iteration
count (up to SCRAM-SHA-512 at 16384) cost more than the dummy's, and the floor hides the difference, so a
refusal tells nothing about whether the user exists.

A user name that failed ``authentication.failure.limit`` times from one host within the window, or a host
that failed ``authentication.failure.address.limit`` times whatever the names, is answered 429 (42901)
without its credentials being looked at (:mod:`~tierlog.service.security.throttle`): the right password of
a user who did not fail still works from a host where someone else guessed. A Basic verification in flight
counts toward both limits, so a burst of concurrent guesses for one user from one host costs at most
``limit`` PBKDF2s. They run on the authenticator's own small thread pool (:data:`PBKDF2_THREADS`), never on
the default executor the log's file I/O uses, so a flood of bad passwords cannot starve it. A successful
Basic verification is cached under an HMAC of the header (a per-process random key: the cache never holds a
password), bounded, and dropped when that user's credentials change, so a client pays the PBKDF2 once, not
per request.

Until the security store has loaded, authenticated routes answer 503 (50301, retriable).

The request keys the rest of the broker reads (:data:`PRINCIPAL`, :data:`CLIENT_HOST`) and the headers a
broker forwarding a client's request to another broker sets (:data:`FORWARDED_PRINCIPAL`,
:data:`FORWARDED_HOST`) live here; :mod:`~tierlog.service.security.authz` honours those headers only from a
super user (a broker).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import hashlib
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tierlog.service import metrics as metric_names
from tierlog.service.security import scram
from tierlog.service.security.acl import canonical_host
from tierlog.service.security.model import ANONYMOUS, Principal
from tierlog.service.security.principal_rules import PrincipalMapper, subject_name
from tierlog.service.security.throttle import FailureThrottle, TooManyFailuresError
from tierlog.wire.errors import UnauthorizedError, UnavailableError

if TYPE_CHECKING:
    from tierlog.service.metrics import Metrics
    from tierlog.service.security.bearer import BearerVerifier
    from tierlog.service.security.security_store import SecurityStore
    from tierlog.service.security.settings import SecuritySettings

__all__ = [
    "AUTHENTICATOR",
    "CLIENT_HOST",
    "FAILED_BASIC_FLOOR_S",
    "FORWARDED_HOST",
    "FORWARDED_PRINCIPAL",
    "OPEN_PATHS",
    "PBKDF2_THREADS",
    "PRINCIPAL",
    "Authenticator",
    "authn_middleware",
    "challenges",
]

log = logging.getLogger("tierlog.security")

#: The authenticated principal of a request (``User:ANONYMOUS`` when authentication is off).
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("tierlog.principal", Principal)
#: The host the request comes from, as ACLs name it (:func:`~tierlog.service.security.acl.canonical_host`; the
#: forwarding broker's client's, when forwarded).
CLIENT_HOST: web.RequestKey[str] = web.RequestKey("tierlog.client_host", str)
#: Set by a broker that forwards a client's request: the client's principal (``User:alice``).
FORWARDED_PRINCIPAL = "Tierlog-Forwarded-Principal"
#: Set by a broker that forwards a client's request: the client's host.
FORWARDED_HOST = "Tierlog-Forwarded-Host"

#: Paths answered without credentials.
OPEN_PATHS = frozenset({"/health", "/ready", "/openapi.json"})
METRICS_PATH = "/metrics"
CACHE_SIZE = 10_000

_T = TypeVar("_T")

REFUSED = "authentication failed: missing or invalid credentials"

#: The least time a failed Basic verification takes to answer, from its start. Above the dearest credential
#: the users API allows: SCRAM-SHA-512 at 16384 iterations measured 30 ms idle (37 ms worst of 10) on the
#: 2-core CI machine, SCRAM-SHA-256 at 4096 (the dummy) 6 ms; 150 ms leaves room for a loaded host.
FAILED_BASIC_FLOOR_S = 0.15
#: Longer user names are tracked by the failure throttle as their hash.
THROTTLE_NAME_CHARS = 256
#: Threads of the authenticator's PBKDF2 pool: at most this many verifications use CPU at once.
PBKDF2_THREADS = 2


def challenges(methods: Sequence[str]) -> list[str]:
    """The ``WWW-Authenticate`` challenges of a 401 for these ``authentication.methods``. Pure."""
    found = []
    if "basic" in methods:
        found.append('Basic realm="tierlog"')
    if "bearer" in methods:
        found.append('Bearer realm="tierlog"')
    return found


class _VerifiedCache:
    """Successful Basic verifications: HMAC(header) -> user name, LRU-bounded, dropped per user."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[bytes, str] = OrderedDict()
        self._by_user: dict[str, set[bytes]] = {}
        self._generation: dict[str, int] = {}

    def digest(self, header: str) -> bytes:
        return hmac.new(self._key, header.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()

    def get(self, digest: bytes) -> str | None:
        name = self._entries.get(digest)
        if name is not None:
            self._entries.move_to_end(digest)
        return name

    def generation(self, name: str) -> int:
        return self._generation.get(name, 0)

    def put(self, digest: bytes, name: str, generation: int) -> None:
        if self.generation(name) != generation:
            return  # the credentials changed while this verification ran
        self._entries[digest] = name
        self._by_user.setdefault(name, set()).add(digest)
        while len(self._entries) > self._size:
            old, owner = self._entries.popitem(last=False)
            keys = self._by_user.get(owner)
            if keys is not None:
                keys.discard(old)
                if not keys:
                    del self._by_user[owner]

    def drop_user(self, name: str) -> None:
        self._generation[name] = self.generation(name) + 1
        for digest in self._by_user.pop(name, ()):
            self._entries.pop(digest, None)


def _credentials(stored: object) -> list[scram.ScramCredential]:
    """A user's credentials as the store gives them (one, or a mapping by mechanism); none when unknown."""
    if isinstance(stored, scram.ScramCredential):
        return [stored]
    if isinstance(stored, Mapping):
        return [c for c in stored.values() if isinstance(c, scram.ScramCredential)]
    return []


def _verify_any(credentials: Sequence[scram.ScramCredential], password: str) -> bool:
    verified = False
    for credential in credentials:
        verified = scram.verify(credential, password) or verified
    return verified


class Authenticator:
    """Checks a request's credentials; one per application, used from its event loop only.

    ``clock`` (milliseconds) drives the failure window; tests inject one. ``bearer`` is started and closed by
    :meth:`start`/:meth:`close` (the application's cleanup context), as is the PBKDF2 thread pool (its
    threads start with the first verification). :attr:`failed_basic_floor_s` (from
    :data:`FAILED_BASIC_FLOOR_S`) may be lowered by tests that make many failed attempts and do not measure
    their timing.
    """

    def __init__(
        self,
        security: SecuritySettings,
        store: SecurityStore,
        metrics: Metrics,
        *,
        clock: Callable[[], float] | None = None,
        bearer: BearerVerifier | None = None,
    ) -> None:
        self.methods = security.authentication_methods
        self._metrics_public = security.metrics_public
        self._store = store
        self._metrics = metrics
        self._cache = _VerifiedCache(CACHE_SIZE)
        self._throttle = FailureThrottle(
            security.authentication_failure_limit,
            security.authentication_failure_window_ms,
            address_limit=security.authentication_failure_address_limit,
            clock=clock,
        )
        self._mapper = (
            PrincipalMapper.parse(security.ssl_principal_mapping_rules) if "mtls" in self.methods else None
        )
        self._bearer = bearer
        self._dummy: list[scram.ScramCredential] | None = None
        self.failed_basic_floor_s = FAILED_BASIC_FLOOR_S
        self._hashing = concurrent.futures.ThreadPoolExecutor(
            PBKDF2_THREADS, thread_name_prefix="tierlog-pbkdf2"
        )
        store.on_user_change(self._cache.drop_user)
        metric_names.describe_security_metrics(metrics)

    async def start(self) -> None:
        """Start the bearer verifier (loads its JWKS) and make the dummy credential. Raises what
        :meth:`BearerVerifier.start` raises."""
        self._dummy = [await self._in_pool(scram.dummy_credential)]
        if self._bearer is not None:
            await self._bearer.start()

    async def close(self) -> None:
        """Close the bearer verifier and the PBKDF2 pool: queued verifications are cancelled, running ones
        finish in their threads without being waited for. Idempotent."""
        self._hashing.shutdown(wait=False, cancel_futures=True)
        if self._bearer is not None:
            await self._bearer.close()

    async def _in_pool(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._hashing, fn, *args)

    def is_open(self, path: str) -> bool:
        """Whether ``path`` is served without credentials. Pure."""
        return path in OPEN_PATHS or (self._metrics_public and path == METRICS_PATH)

    async def authenticate(self, request: web.Request, host: str) -> Principal:
        """The principal ``request`` proves it is.

        Raises:
            TooManyFailuresError: (42901) the Basic user name (``""`` for other methods) from ``host``,
                or ``host`` whatever the name, is over its failure limit (failures in the window, and for
                Basic verifications in flight); nothing was checked.
            UnavailableError: (50301) the security store has not loaded yet.
            UnauthorizedError: (40101) no credentials of a listed method, or credentials that do not verify.
        """
        header = request.headers.get("Authorization")
        scheme, _, value = (header or "").strip().partition(" ")
        scheme, value = scheme.lower(), value.strip()
        basic = scheme == "basic" and "basic" in self.methods and header is not None
        name = _basic_name(value) if basic else ""
        self._throttle.check(name, host)
        if not self._store.loaded:
            raise UnavailableError("the security store is loading; retry shortly")
        if self._mapper is not None:
            der = _peer_certificate(request)
            if der is not None:
                return self._certificate_principal(der, host)
        if basic:
            assert header is not None
            return await self._basic(header, _basic_credentials(value), name, host)
        if header is not None and scheme == "bearer" and self._bearer is not None:
            return await self._bearer_principal(value, host)
        raise UnauthorizedError(REFUSED)

    def _failed(self, method: str, host: str) -> UnauthorizedError:
        self._throttle.failed("", host)
        self._metrics.inc(metric_names.AUTHENTICATION_FAILURES, 1.0, method=method)
        return UnauthorizedError(REFUSED)

    def _certificate_principal(self, der: bytes, host: str) -> Principal:
        assert self._mapper is not None
        try:
            return Principal.user(self._mapper.map(subject_name(der)))
        except ValueError:
            raise self._failed("mtls", host) from None

    async def authenticate_password(self, user: str, password: str, host: str) -> Principal:
        """The principal a user name and password prove (the Kafka listener's SASL PLAIN): checked as a
        Basic header is, with the same cache, throttle, failure floor and metrics.

        Raises:
            TooManyFailuresError: (42901) ``user`` from ``host``, or ``host``, is over its failure limit.
            UnavailableError: (50301) the security store has not loaded yet.
            UnauthorizedError: (40101) the password does not verify, or the user is unknown.
        """
        name = _throttle_name(user)
        self._throttle.check(name, host)
        if not self._store.loaded:
            raise UnavailableError("the security store is loading; retry shortly")
        # the cache key: a NUL cannot occur in a PLAIN user name, so no Basic header collides with it
        key = f"sasl-plain\x00{user}\x00{password}"
        return await self._basic(key, (user, password), name, host, method="sasl_plain")

    async def authenticate_token(self, token: str, host: str) -> Principal:
        """The principal a bearer token proves (the Kafka listener's SASL OAUTHBEARER): checked as an
        ``Authorization: Bearer`` header is, with the same throttle and metrics.

        Raises:
            TooManyFailuresError: (42901) ``host`` is over its failure limit.
            UnavailableError: (50301) the security store has not loaded yet.
            UnauthorizedError: (40101) the token does not verify, or bearer tokens are not configured.
        """
        self._throttle.check("", host)
        if not self._store.loaded:
            raise UnavailableError("the security store is loading; retry shortly")
        if self._bearer is None:
            raise self._failed("bearer", host)
        return await self._bearer_principal(token, host)

    def scram_credential(self, user: str, mechanism: str, host: str) -> scram.ScramCredential:
        """The credential a SCRAM exchange for ``user`` checks against (the Kafka listener's SASL SCRAM):
        the user's own for ``mechanism``, else a dummy no proof verifies (so an unknown user looks like a
        wrong password). Report the outcome with :meth:`scram_settled`.

        Raises:
            TooManyFailuresError: (42901) ``user`` from ``host``, or ``host``, is over its failure limit.
            UnavailableError: (50301) the security store has not loaded yet.
            InvalidRequestError: an unknown mechanism.
        """
        if not self._store.loaded:
            raise UnavailableError("the security store is loading; retry shortly")
        # a place among the attempts in flight, as for a password: many connections sending their first
        # message at once cannot each get a guess past the limit
        self._throttle.reserve(_throttle_name(user), host)
        for credential in _credentials(self._store.user(user)):
            if credential.mechanism == mechanism:
                return credential
        return scram.dummy_credential(mechanism, user=user)

    def scram_settled(self, user: str, host: str, mechanism: str, *, verified: bool) -> None:
        """End a SCRAM exchange :meth:`scram_credential` admitted (exactly once each; an exchange its
        connection abandoned counts as failed): its place among the attempts in flight is released, and a
        failure counts toward ``user``'s and ``host``'s limits and the failures metric."""
        self._throttle.settle(_throttle_name(user), host, failed=not verified)
        if not verified:
            self._metrics.inc(metric_names.AUTHENTICATION_FAILURES, 1.0, method=mechanism.lower())

    async def _basic(
        self,
        header: str,
        credentials: tuple[str, str] | None,
        name: str,
        host: str,
        *,
        method: str = "basic",
    ) -> Principal:
        digest = self._cache.digest(header)
        cached = self._cache.get(digest)
        if cached is not None:
            return Principal.user(cached)
        self._throttle.reserve(name, host)
        started = asyncio.get_running_loop().time()
        verified = None
        try:
            verified = await self._verify_password(credentials)
        finally:
            # a cancelled attempt counts as failed: its PBKDF2 may still be running
            self._throttle.settle(name, host, failed=verified is None)
        if verified is None:
            self._metrics.inc(metric_names.AUTHENTICATION_FAILURES, 1.0, method=method)
            await self._hold_until(started + self.failed_basic_floor_s)
            raise UnauthorizedError(REFUSED)
        user, generation = verified
        self._cache.put(digest, user, generation)
        return Principal.user(user)

    async def _verify_password(self, parsed: tuple[str, str] | None) -> tuple[str, int] | None:
        """The user ``(name, password)`` proves it is (None: malformed), with the cache generation of that
        user's credentials when the check began; None when it proves nothing. Every well-formed attempt, for
        a known user or not, costs one PBKDF2 in the pool."""
        if parsed is None:
            return None
        name, password = parsed
        generation = self._cache.generation(name)
        credentials = _credentials(self._store.user(name))
        if not credentials:
            if self._dummy is None:
                self._dummy = [await self._in_pool(scram.dummy_credential)]
            await self._in_pool(_verify_any, self._dummy, password)
            return None
        if not await self._in_pool(_verify_any, credentials, password):
            return None
        return name, generation

    @staticmethod
    async def _hold_until(deadline: float) -> None:
        delay = deadline - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _bearer_principal(self, token: str, host: str) -> Principal:
        assert self._bearer is not None
        try:
            return Principal.user(await self._bearer.verify(token))
        except UnauthorizedError:
            raise self._failed("bearer", host) from None

    def throttled(self) -> None:
        """Count one request refused by the failure limit."""
        self._metrics.inc(metric_names.AUTHENTICATION_THROTTLED)


def _basic_credentials(value: str) -> tuple[str, str] | None:
    """The (name, password) of a Basic value (``base64(name:password)``); None when malformed. Pure."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    if not sep or not name:
        return None
    return name, password


def _basic_name(value: str) -> str:
    """The user name a Basic value claims, ``""`` when malformed: the throttle's key (a name longer than
    :data:`THROTTLE_NAME_CHARS` by its SHA-256, so tracked names stay small). Pure."""
    parsed = _basic_credentials(value)
    if parsed is None:
        return ""
    return _throttle_name(parsed[0])


def _throttle_name(name: str) -> str:
    if len(name) <= THROTTLE_NAME_CHARS:
        return name
    return "sha256:" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()


def _peer_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


AUTHENTICATOR: web.AppKey[Authenticator] = web.AppKey("tierlog.authenticator", Authenticator)


def authn_middleware(security: SecuritySettings) -> Middleware:
    """The authentication middleware for these settings: place it right after the error middleware.

    Off, it only sets ``User:ANONYMOUS``. On, it reads the application's :data:`AUTHENTICATOR`. Raises what
    :meth:`Authenticator.authenticate` raises. Safe concurrently.
    """
    if not security.enabled:

        @web.middleware
        async def anonymous(request: web.Request, handler: Handler) -> web.StreamResponse:
            request[PRINCIPAL] = ANONYMOUS
            request[CLIENT_HOST] = canonical_host(request.remote or "")
            return await handler(request)

        return anonymous

    @web.middleware
    async def authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request[CLIENT_HOST] = canonical_host(request.remote or "")
        authenticator = request.app[AUTHENTICATOR]
        if authenticator.is_open(request.path):
            request[PRINCIPAL] = ANONYMOUS
            return await handler(request)
        try:
            request[PRINCIPAL] = await authenticator.authenticate(request, host)
        except TooManyFailuresError:
            authenticator.throttled()
            raise
        return await handler(request)

    return authenticated
