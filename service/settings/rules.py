"""The rules between broker settings: every check and every derived value that needs more than one setting.

:func:`tierlog.service.settings.config.build_settings` parses each setting by its row, then runs
:data:`RULES` in
order over the parsed values (:class:`~tierlog.service.settings.spec.ParsedSettings`); a rule raises
:class:`~tierlog.service.settings.spec.SettingsError` (one line naming the settings) or fills in a value
derived from others. Rules are pure apart from :func:`s3_endpoint_from_environment`, which reads
``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tierlog.service.security import settings as sec
from tierlog.service.security.throttle import ADDRESS_LIMIT_FACTOR
from tierlog.service.settings import table as t
from tierlog.service.settings.http import credentials_need_origins
from tierlog.service.settings.spec import ParsedSettings, SettingsError, parse_url
from tierlog.service.settings.uris import RemoteUri
from tierlog.service.topics.configs import check_combination, effective_configs
from tierlog.wire.errors import InvalidRequestError

__all__ = ["RULES", "Rule", "topic_defaults"]

Rule = Callable[[ParsedSettings], None]


def remote_uri_under_data_dir(values: ParsedSettings) -> None:
    """``remote.uri`` unset (or blank): the directory ``<data.dir>/remote``."""
    if values.get(t.REMOTE_URI) is None:
        values.set(t.REMOTE_URI, RemoteUri("file", path=values.get(t.DATA_DIR) / "remote"))


def s3_endpoint_from_environment(values: ParsedSettings) -> None:
    """``s3.endpoint.url`` unset: ``AWS_ENDPOINT_URL`` when that is set (checked as the setting is)."""
    raw = os.environ.get("AWS_ENDPOINT_URL")
    if values.optional(t.S3_ENDPOINT_URL) is None and raw:
        try:
            values.set(t.S3_ENDPOINT_URL, parse_url(raw))
        except ValueError as err:
            raise SettingsError(f"invalid AWS_ENDPOINT_URL {raw!r}: {err}") from None


def topic_defaults(values: ParsedSettings) -> dict[str, str]:
    """The topic defaults (``log.*`` and the rest) by the topic config each stands for."""
    return {
        spec.topic_config: values.get(spec)
        for spec in t.TOPIC_DEFAULTS_TABLE
        if spec.topic_config is not None
    }


def topic_defaults_combine(values: ParsedSettings) -> None:
    """The topic defaults pass the topic configs' own combination rules (``local.retention.ms`` at most
    ``retention.ms``, ...)."""
    try:
        check_combination(effective_configs(topic_defaults(values), {}))
    except InvalidRequestError as err:
        raise SettingsError(f"invalid log.* defaults: {err.message}") from None


def heartbeat_within_session(values: ParsedSettings) -> None:
    session_ms, heartbeat_ms = (
        values.get(t.BROKER_SESSION_TIMEOUT_MS),
        values.get(t.BROKER_HEARTBEAT_INTERVAL_MS),
    )
    if heartbeat_ms * 2 > session_ms:
        raise SettingsError(
            f"broker.heartbeat.interval.ms={heartbeat_ms} must be at most half of "
            f"broker.session.timeout.ms={session_ms}"
        )


def consumer_heartbeat_within_session(values: ParsedSettings) -> None:
    """KIP-848 members heartbeat more often than the session timeout that removes them (Kafka's rule)."""
    session_ms = values.get(t.GROUP_CONSUMER_SESSION_TIMEOUT_MS)
    heartbeat_ms = values.get(t.GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS)
    if heartbeat_ms >= session_ms:
        raise SettingsError(
            f"group.consumer.heartbeat.interval.ms={heartbeat_ms} must be less than "
            f"group.consumer.session.timeout.ms={session_ms}"
        )


def _security(reason: str) -> SettingsError:
    return SettingsError(f"invalid security settings: {reason}")


def tls_listener(values: ParsedSettings) -> None:
    """The TLS listener's files and the settings that need it."""
    tls = values.optional(sec.SSL_CERTFILE) is not None
    if tls != (values.optional(sec.SSL_KEYFILE) is not None):
        raise _security("ssl.certfile and ssl.keyfile are set together")
    client_auth = values.get(sec.SSL_CLIENT_AUTH)
    if client_auth != "none" and (not tls or values.optional(sec.SSL_CAFILE) is None):
        raise _security(f"ssl.client.auth={client_auth} needs ssl.certfile, ssl.keyfile and ssl.cafile")
    if values.optional(sec.PLAINTEXT_PORT) is not None and not tls:
        raise _security("plaintext.port is an extra listener beside the TLS one: set ssl.certfile first")


def authentication_methods(values: ParsedSettings) -> None:
    """What each authentication method needs, and a JWKS that cannot be replaced on the way."""
    methods = values.get(sec.AUTHENTICATION_METHODS)
    jwks = values.optional(sec.AUTHENTICATION_BEARER_JWKS)
    if "mtls" in methods and values.get(sec.SSL_CLIENT_AUTH) == "none":
        raise _security("authentication.methods=mtls needs ssl.client.auth=requested or required")
    if "bearer" in methods and not jwks:
        raise _security("authentication.methods=bearer needs authentication.bearer.jwks")
    if "bearer" in methods and not values.optional(sec.AUTHENTICATION_BEARER_AUDIENCE):
        raise _security(
            "authentication.methods=bearer needs authentication.bearer.audience (without it a token the "
            "issuer made for any other service would be accepted)"
        )
    if jwks and "://" in jwks and not jwks.lower().startswith("https://"):
        raise _security(
            "authentication.bearer.jwks must be a file path or an https:// URL (keys fetched over plaintext "
            "could be replaced on the way)"
        )


def credentials_in_pairs(values: ParsedSettings) -> None:
    """The broker's own credentials: a user with its password, etcd's client certificate with its key and
    a CA to verify etcd."""
    if (values.optional(sec.INTER_BROKER_USERNAME) is None) != (
        values.optional(sec.INTER_BROKER_PASSWORD) is None
    ):
        raise _security("inter.broker.username and inter.broker.password are set together")
    certfile = values.optional(sec.METADATA_SSL_CERTFILE)
    if (certfile is None) != (values.optional(sec.METADATA_SSL_KEYFILE) is None):
        raise _security("metadata.ssl.certfile and metadata.ssl.keyfile are set together")
    if certfile is not None and values.optional(sec.METADATA_SSL_CAFILE) is None:
        raise _security("metadata.ssl.certfile needs metadata.ssl.cafile (etcd over TLS)")


def address_limit_from_user_limit(values: ParsedSettings) -> None:
    """``authentication.failure.address.limit`` unset: ``ADDRESS_LIMIT_FACTOR`` (5) times
    ``authentication.failure.limit``, capped at 2^31-1."""
    if values.optional(sec.AUTHENTICATION_FAILURE_ADDRESS_LIMIT) is None:
        limit = values.get(sec.AUTHENTICATION_FAILURE_LIMIT) * ADDRESS_LIMIT_FACTOR
        values.set(sec.AUTHENTICATION_FAILURE_ADDRESS_LIMIT, min(limit, 2**31 - 1))


def advertised_url_from_listener(values: ParsedSettings) -> None:
    """``advertised.url`` unset: ``http://host:port``, ``https://`` when the listener speaks TLS."""
    if values.optional(t.ADVERTISED_URL) is None:
        scheme = "https" if values.optional(sec.SSL_CERTFILE) is not None else "http"
        values.set(t.ADVERTISED_URL, f"{scheme}://{values.get(t.HOST)}:{values.get(t.PORT)}")


RULES: tuple[Rule, ...] = (
    remote_uri_under_data_dir,
    s3_endpoint_from_environment,
    topic_defaults_combine,
    heartbeat_within_session,
    consumer_heartbeat_within_session,
    tls_listener,
    authentication_methods,
    credentials_in_pairs,
    address_limit_from_user_limit,
    advertised_url_from_listener,
    credentials_need_origins,
)
