"""The log filter that keeps credentials out of the broker's log: each shape a credential is logged in,
the secret values the broker knows, and records with arguments, exceptions and stacks."""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterator

import pytest

from tierlog.service.security.log_filter import RedactingFilter, install_redaction, known_secrets
from tierlog.service.security.redact import REDACTED, Redactor, redact_credentials
from tierlog.service.settings.config import load_settings

KEY_ID = "ASIAQXZ7TIERLOG5TEST"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYtierlogKEY"
TOKEN = "IQoJb3JpZ2luX2VjEtierlog/session+token/Zm9vYmFyYmF6cXV4=="
SIGNATURE = "c3d3318dbe1b9f697309be8b14c52e2d616bd986605a461ce84db6d05438bb9a"
AUTHORIZATION = (
    f"AWS4-HMAC-SHA256 Credential={KEY_ID}/20261128/us-east-1/s3/aws4_request, "
    f"SignedHeaders=host;x-amz-date;x-amz-security-token, Signature={SIGNATURE}"
)

SAMPLES = {
    "botocore's prepared request": (
        "Sending http request: <AWSPreparedRequest stream_output=False, method=GET, "
        "url=http://127.0.0.1:9000/b?list-type=2, headers={'User-Agent': b'aiobotocore/3.10.0', "
        f"'X-Amz-Security-Token': b'{TOKEN}', 'Authorization': b'{AUTHORIZATION}', "
        "'amz-sdk-request': b'attempt=1'}>"
    ),
    "botocore's canonical request": (
        "CanonicalRequest:\nGET\n/b\nlist-type=2\nhost:127.0.0.1:9000\nx-amz-date:20261128T231156Z\n"
        f"x-amz-security-token:{TOKEN}\n\nhost;x-amz-date;x-amz-security-token\ne3b0c442"
    ),
    "botocore's signature": f"Signature:\n{SIGNATURE}",
    "a header line": f"Authorization: {AUTHORIZATION}",
    "a session token header line": f"X-Amz-Security-Token: {TOKEN}",
    "a presigned query string": (
        "GET https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={KEY_ID}%2F20130721%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130721T201207Z"
        f"&X-Amz-SignedHeaders=host&X-Amz-Signature={SIGNATURE}"
        "&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEtierlog%2Fsession%2Btoken%2FZm9vYmFyYmF6cXV4%3D%3D"
    ),
    "a credentials repr": (
        f"ReadOnlyCredentials(access_key='{KEY_ID}', secret_key='{SECRET}', token='{TOKEN}')"
    ),
    "a client config dict": (
        f"{{'aws_access_key_id': '{KEY_ID}', 'aws_secret_access_key': \"{SECRET}\", "
        f"'aws_session_token': '{TOKEN}'}}"
    ),
    "JSON": f'{{"password": "{SECRET}", "token": "{TOKEN}"}}',
    "a Basic header": "Authorization: Basic YnJva2VyOmJyb2tlci1zZWNyZXQ=",
    "a Bearer header in a dict": "{'Authorization': 'Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln'}",
    "a Bearer token alone": "refused token Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln from 10.0.0.1",
    "a password in a URL": "connecting to etcd://root:hunter2-secret@10.0.0.1:2379/tierlog",
    "an access key id alone": f"using key {KEY_ID} for bucket b",
}
LEAKS = (KEY_ID, SECRET, TOKEN, SIGNATURE, "IQoJb3JpZ2luX2VjEtierlog", "YnJva2Vy", "eyJhbGci", "hunter2")


@pytest.mark.parametrize("text", SAMPLES.values(), ids=SAMPLES.keys())
def test_each_shape_of_credential_is_redacted(text: str) -> None:
    redacted = redact_credentials(text)
    assert REDACTED in redacted
    assert not [leak for leak in LEAKS if leak in redacted], redacted
    assert redact_credentials(redacted) == redacted


def test_what_is_not_a_credential_is_kept() -> None:
    for text in (
        "Found credentials in environment variables.",
        'basic authentication failed; bearer realm="tierlog"',
        "ReadOnlyCredentials(access_key=None, secret_key=None, token=None)",
        "NextContinuationToken: abc, ContinuationToken='x', KeyCount: 3",
        "created topic k with 1 partitions, overrides {'segment.bytes': '1024'}",
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "https://broker1:8082/v3/clusters",
    ):
        assert redact_credentials(text) == text


def test_known_secret_values_are_redacted_as_they_are_and_percent_encoded() -> None:
    redact = Redactor([SECRET, "tiny"])
    assert redact(f"signing with {SECRET} now") == f"signing with {REDACTED} now"
    assert redact("k=wJalrXUtnFEMI%2FK7MDENG%2BbPxRfiCYtierlogKEY&x=1") == f"k={REDACTED}&x=1"
    assert redact("a tiny word") == "a tiny word"  # shorter than MIN_SECRET_CHARS: not literal


def test_known_secrets_come_from_the_environment_and_the_settings() -> None:
    environ = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
        "TIERLOG_PASSWORD": "admin-cli-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "HOME": "/root",
        "AWS_SHARED_CREDENTIALS_FILE": "/root/.aws/credentials",
        "CREDENTIALS_DIRECTORY": "/run/credentials/tierlog.service",
    }
    flags = {
        "inter.broker.username": "broker",
        "inter.broker.password": "broker-secret",
        "s3.endpoint.url": "http://minio:minio-secret-key@127.0.0.1:9000",
    }
    found = known_secrets(load_settings(flags, {}, None), environ)
    basic = base64.b64encode(b"broker:broker-secret").decode()
    assert set(found) == {
        KEY_ID,
        SECRET,
        TOKEN,
        "admin-cli-secret",
        "broker-secret",
        basic,
        "minio-secret-key",
    }


@pytest.fixture
def stream_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger with one stream handler carrying the filter, as ``tierlog serve`` sets the root up."""
    logger = logging.getLogger("tierlog.test.redaction")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    install_redaction(["broker-secret"], logger)
    yield logger, out
    logger.removeHandler(handler)


def test_the_filter_covers_arguments_a_child_logger_exceptions_and_stacks(
    stream_logger: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = stream_logger
    child = logging.getLogger("tierlog.test.redaction.botocore")  # propagates to the handler
    child.debug("Sending http request: %s", {"Authorization": f"AWS4-HMAC-SHA256 Credential={KEY_ID}/x"})
    logger.info("peer call with %(pw)s", {"pw": "broker-secret"})
    try:
        raise RuntimeError(f"token={TOKEN}")
    except RuntimeError:
        logger.exception("failed for %s", "http://u:broker-secret@peer:8082/")
    logger.warning("where", stack_info=True, extra={"unused": 1})
    text = out.getvalue()
    assert "DEBUG tierlog.test.redaction.botocore: Sending http request:" in text
    assert "RuntimeError: token=[REDACTED]" in text
    assert "peer call with [REDACTED]" in text
    assert "Stack (most recent call last)" in text
    assert not [leak for leak in (KEY_ID, TOKEN, "broker-secret") if leak in text], text


def test_a_record_whose_arguments_do_not_format_is_still_redacted() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "a %s %s", (f"Bearer {TOKEN}",), None)
    assert RedactingFilter().filter(record)
    assert TOKEN not in record.getMessage()
    assert record.args is None
