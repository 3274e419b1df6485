"""The client's security options (:mod:`tierlog.client.security`) and the broker's TLS contexts
(:mod:`tierlog.service.security.tls`): validation, headers, the SSL context's flags, the URL scheme rules,
the CLI options, and the broker's own outgoing identity. PEM files come from ``trustme``."""

from __future__ import annotations

import argparse
import base64
import ssl
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import trustme

from tierlog.client.config import ConsumerConfig, ProducerConfig
from tierlog.client.security import (
    PASSWORD_ENV,
    ClientSecurity,
    add_security_arguments,
    security_from_args,
)
from tierlog.client.transport import BrokerClient
from tierlog.service.security.settings import SecuritySettings
from tierlog.service.security.tls import ServerTls, TlsError, broker_client_security, server_context
from tierlog.service.settings.config import Settings, load_settings
from tierlog.wire.errors import InvalidRequestError


@dataclass(frozen=True)
class Pems:
    ca: Path
    cert: Path
    key: Path
    other_key: Path


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Pems:
    root = tmp_path_factory.mktemp("pems")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    other = ca.issue_cert("other.example")
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    leaf.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(root / "key.pem"))
    other.private_key_pem.write_to_path(str(root / "other-key.pem"))
    return Pems(root / "ca.pem", root / "cert.pem", root / "key.pem", root / "other-key.pem")


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"ssl_cafile": "ca.pem"}, "ssl_cafile"),
        ({"security_protocol": "SSL", "ssl_keyfile": "k.pem"}, "ssl_keyfile"),
        ({"security_protocol": "SSL", "ssl_check_hostname": "no"}, "ssl_check_hostname"),
        ({"sasl_plain_username": "alice", "sasl_plain_password": "pw"}, "sasl_plain_username"),
        ({"security_protocol": "SASL_SSL"}, "sasl_plain_username"),
        ({"security_protocol": "SASL_SSL", "sasl_plain_username": "alice"}, "sasl_plain_password"),
        (
            {"security_protocol": "SASL_SSL", "sasl_plain_username": "a:b", "sasl_plain_password": "p"},
            "sasl_plain_username",
        ),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256"}, "sasl_mechanism"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, "sasl_oauth_token"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token": "a b",
            },
            "sasl_oauth_token",
        ),
        ({"security_protocol": "SSL", "sasl_oauth_token": "t"}, "sasl_oauth_token"),
    ],
)
def test_a_bad_option_is_refused_naming_it(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidRequestError, match=named):
        ClientSecurity(**options)  # type: ignore[arg-type]


def test_secrets_stay_out_of_repr_and_describe() -> None:
    basic = ClientSecurity("SASL_SSL", sasl_plain_username="alice", sasl_plain_password="s3cret-pw")
    bearer = ClientSecurity("SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token="tok-123")
    for security in (basic, bearer):
        for text in (repr(security), security.describe()):
            assert "s3cret-pw" not in text and "tok-123" not in text
    assert "alice" in basic.describe()


def test_a_bad_password_message_does_not_echo_it() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        ClientSecurity("SASL_SSL", sasl_plain_username="alice", sasl_plain_password="pw\nline")
    assert "pw\nline" not in str(raised.value)


# -- headers --------------------------------------------------------------------------------------


def test_plain_is_http_basic_and_oauthbearer_is_bearer() -> None:
    basic = ClientSecurity("SASL_PLAINTEXT", sasl_plain_username="alice", sasl_plain_password="pä:ss")
    scheme, _, encoded = basic.headers()["Authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode() == "alice:pä:ss"
    bearer = ClientSecurity("SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token="eyJ.x.y")
    assert bearer.headers() == {"Authorization": "Bearer eyJ.x.y"}


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_no_credentials_no_header(protocol: str) -> None:
    assert ClientSecurity(protocol).headers() == {}


# -- SSL context ----------------------------------------------------------------------------------


def test_plaintext_protocols_have_no_context() -> None:
    security = ClientSecurity("SASL_PLAINTEXT", sasl_plain_username="a", sasl_plain_password="p")
    assert security.ssl_context() is None
    assert security.connector_ssl() is True
    assert security.ssl_loaded


def test_the_ssl_context_verifies_by_default_and_is_built_once(pems: Pems) -> None:
    security = ClientSecurity("SSL", ssl_cafile=str(pems.ca))
    assert not security.ssl_loaded
    context = security.ssl_context()
    assert context is not None and security.ssl_loaded
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert security.ssl_context() is context
    assert security.connector_ssl() is context


def test_turning_the_hostname_check_off_keeps_chain_verification(pems: Pems) -> None:
    context = ClientSecurity("SSL", ssl_cafile=str(pems.ca), ssl_check_hostname=False).ssl_context()
    assert context is not None
    assert not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_a_client_certificate_loads(pems: Pems) -> None:
    security = ClientSecurity(
        "SSL", ssl_cafile=str(pems.ca), ssl_certfile=str(pems.cert), ssl_keyfile=str(pems.key)
    )
    assert security.ssl_context() is not None


@pytest.mark.parametrize(
    ("which", "named"),
    [("cafile", "ssl_cafile"), ("certfile", "ssl_certfile"), ("mismatch", "ssl_certfile")],
)
def test_an_unusable_pem_file_is_an_error_naming_the_option(pems: Pems, which: str, named: str) -> None:
    missing = str(pems.ca.parent / "missing.pem")
    options = {
        "cafile": {"ssl_cafile": missing},
        "certfile": {"ssl_cafile": str(pems.ca), "ssl_certfile": missing},
        "mismatch": {
            "ssl_cafile": str(pems.ca),
            "ssl_certfile": str(pems.cert),
            "ssl_keyfile": str(pems.other_key),
        },
    }[which]
    security = ClientSecurity("SSL", **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=named):
        security.ssl_context()


# -- URL schemes ----------------------------------------------------------------------------------


def test_an_https_url_makes_a_plaintext_protocol_tls() -> None:
    assert ClientSecurity().for_urls(["https://b:1"]).security_protocol == "SSL"
    sasl = ClientSecurity("SASL_PLAINTEXT", sasl_plain_username="a", sasl_plain_password="p")
    assert sasl.for_urls(["https://b:1", "https://c:2"]).security_protocol == "SASL_SSL"
    assert ClientSecurity().for_urls(["http://b:1", "https://c:2"]).security_protocol == "PLAINTEXT"


def test_an_http_url_under_ssl_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="http://"):
        ClientSecurity("SSL").for_urls(["https://a:1", "http://b:1"])


def test_config_takes_the_security_options_and_gives_bare_hosts_https(pems: Pems) -> None:
    config = ProducerConfig.from_kwargs(
        {"bootstrap_servers": "b1:9443,b2:9443", "security_protocol": "SSL", "ssl_cafile": str(pems.ca)}
    )
    assert config.bootstrap_list == ("https://b1:9443", "https://b2:9443")
    assert config.security.security_protocol == "SSL"
    assert config.security.ssl_cafile == str(pems.ca)
    default = ConsumerConfig.from_kwargs({"security_protocol": "SSL"})
    assert default.bootstrap_list == ("https://127.0.0.1:8082",)
    assert ConsumerConfig.from_kwargs({"bootstrap_servers": "https://b:1"}).security.tls


def test_config_refuses_bad_security_options() -> None:
    with pytest.raises(InvalidRequestError, match="sasl_plain_username"):
        ProducerConfig.from_kwargs({"security_protocol": "SASL_SSL"})
    with pytest.raises(InvalidRequestError, match="http://"):
        ProducerConfig.from_kwargs({"bootstrap_servers": "http://b:1", "security_protocol": "SSL"})


def test_the_config_repr_hides_the_password() -> None:
    config = ConsumerConfig.from_kwargs(
        {"security_protocol": "SASL_SSL", "sasl_plain_username": "u", "sasl_plain_password": "pw-zz"}
    )
    assert "pw-zz" not in repr(config)


# -- CLI options ----------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_security_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_options_infer_the_protocol(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "pw")
    assert security_from_args(_args()).security_protocol == "PLAINTEXT"
    assert security_from_args(_args("--ssl-cafile", "ca.pem")).security_protocol == "SSL"
    assert security_from_args(_args("--username", "alice")).security_protocol == "SASL_PLAINTEXT"
    both = security_from_args(_args("--username", "alice", "--no-ssl-check-hostname"))
    assert both.security_protocol == "SASL_SSL" and not both.ssl_check_hostname
    assert both.sasl_plain_password == "pw"
    token = tmp_path / "token"
    token.write_text("eyJ.a.b\n")
    bearer = security_from_args(_args("--bearer-token-file", str(token), "--security-protocol", "SASL_SSL"))
    assert bearer.headers() == {"Authorization": "Bearer eyJ.a.b"}


def test_cli_username_needs_the_password_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(InvalidRequestError, match=PASSWORD_ENV):
        security_from_args(_args("--username", "alice"))


def test_cli_refuses_an_empty_or_missing_token_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidRequestError, match="empty"):
        security_from_args(_args("--bearer-token-file", str(empty)))
    with pytest.raises(InvalidRequestError, match="cannot read"):
        security_from_args(_args("--bearer-token-file", str(tmp_path / "none")))


# -- the broker's side ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client_auth", "mode"),
    [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_server_context_flags(pems: Pems, client_auth: str, mode: ssl.VerifyMode) -> None:
    security = _security(
        ssl_certfile=pems.cert, ssl_keyfile=pems.key, ssl_cafile=pems.ca, ssl_client_auth=client_auth
    )
    context = server_context(security)
    assert context.verify_mode == mode
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(
    ("change", "named"),
    [("cert", "ssl.certfile"), ("key", "ssl.keyfile"), ("mismatch", "ssl.certfile"), ("ca", "ssl.cafile")],
)
def test_server_context_errors_name_the_setting(pems: Pems, change: str, named: str) -> None:
    missing = pems.ca.parent / "missing.pem"
    files = {"ssl_certfile": pems.cert, "ssl_keyfile": pems.key, "ssl_cafile": pems.ca}
    files.update(
        {
            "cert": {"ssl_certfile": missing},
            "key": {"ssl_keyfile": missing},
            "ca": {"ssl_cafile": missing},
        }.get(change, {"ssl_keyfile": pems.other_key})
    )
    with pytest.raises(TlsError, match=named):
        server_context(_security(**files))


def test_a_reload_serves_new_handshakes_from_a_new_context(pems: Pems) -> None:
    good = _security(ssl_certfile=pems.cert, ssl_keyfile=pems.key)
    listening = server_context(good)
    tls = ServerTls(listening)
    with pytest.raises(TlsError):
        server_context(_security(ssl_certfile=pems.cert, ssl_keyfile=pems.other_key))
    assert tls.current is listening
    fresh = server_context(good)
    tls.install(fresh)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    connection = listening.wrap_bio(incoming, outgoing, server_side=True)
    select = listening.sni_callback
    assert select is not None
    select(connection, None, listening)  # type: ignore[arg-type]  # typeshed: OpenSSL passes None without SNI
    assert connection.context is fresh


def _security(**changes: Any) -> SecuritySettings:
    """The default security settings (all off) with ``changes``, unchecked: a server context or a broker
    client is built from them directly."""
    return replace(load_settings({}, {}, None).security, **changes)


def _settings(security: SecuritySettings | None = None) -> Settings:
    settings = load_settings({}, {}, None)
    return settings if security is None else replace(settings, security=security)


def test_broker_client_security(pems: Pems) -> None:
    assert broker_client_security(_settings()).security_protocol == "PLAINTEXT"
    tls = _security(ssl_certfile=pems.cert, ssl_keyfile=pems.key, ssl_cafile=pems.ca)
    plain_tls = broker_client_security(_settings(tls))
    assert plain_tls.security_protocol == "SSL" and plain_tls.ssl_cafile == str(pems.ca)
    assert plain_tls.ssl_certfile is None
    mtls = _security(
        ssl_certfile=pems.cert,
        ssl_keyfile=pems.key,
        ssl_cafile=pems.ca,
        ssl_client_auth="required",
        authentication_methods=("mtls",),
        inter_broker_username="broker",
        inter_broker_password="pw",
    )
    own = broker_client_security(_settings(mtls))
    assert own.security_protocol == "SASL_SSL"
    assert own.ssl_certfile == str(pems.cert) and own.ssl_keyfile == str(pems.key)
    assert own.headers()["Authorization"].startswith("Basic ")
    basic_only = _security(inter_broker_username="broker", inter_broker_password="pw")
    assert broker_client_security(_settings(basic_only)).security_protocol == "SASL_PLAINTEXT"


def test_a_tls_client_refuses_a_plaintext_broker_url() -> None:
    # a broker learned from metadata that advertises http:// would get the credentials in the clear
    secured = ClientSecurity(security_protocol="SASL_SSL", sasl_plain_username="u", sasl_plain_password="p")
    with pytest.raises(InvalidRequestError, match=r"advertised\.url"):
        BrokerClient("http://127.0.0.1:8082", security=secured)
    assert BrokerClient("https://127.0.0.1:8082", security=secured).base_url == "https://127.0.0.1:8082"
    assert BrokerClient("http://127.0.0.1:8082").base_url == "http://127.0.0.1:8082"
