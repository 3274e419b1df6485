"""A broken object store speaks at once, against real moto_server processes: a missing bucket, bad
credentials (a second moto_server that checks them) and an unreachable endpoint are named at start in the
log, in ``/ready``'s details (readiness holds) and in the v3 cluster answer; a tiered topic is refused
through the REST and Kafka doors naming the cause; once the bucket exists, uploads resume with one
``uploads resumed`` line and ``last_error`` cleared, the failures counted and logged once per store."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.integration.broker import Client
from tests.integration.remote.servers import S3Server, free_port, run_moto
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import WAIT_S, broker_of, create_topic, produce, wait_uploaded
from tierlog.service.web.keys import METRICS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def checking_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto_server that checks credentials (moto's IAM checks on from the first request): the dummy
    test keys are an unknown access key there."""
    with run_moto(tmp_path_factory.mktemp("moto-auth"), env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as server:
        yield server


def _remote_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tierlog.remote" and text in r.getMessage()]


async def _json(client: Client, path: str) -> tuple[int, Any]:
    response = await client.get(path)
    return response.status, await response.json()


async def _create_over_rest(client: Client, topic: str) -> tuple[int, Any]:
    cluster_id = broker_of(client).cluster_id
    body = {
        "topic_name": topic,
        "partitions_count": 1,
        "configs": [{"name": "remote.storage.enable", "value": "true"}],
    }
    response = await client.post(f"/v3/clusters/{cluster_id}/topics", json=body)
    return response.status, await response.json()


def _create_over_kafka(bootstrap: str, topic: str) -> KafkaError | None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"remote.storage.enable": "true"})], request_timeout=WAIT_S
    )
    try:
        futures[topic].result(timeout=WAIT_S)
    except KafkaException as err:
        error: KafkaError = err.args[0]
        return error
    return None


async def _assert_named_at_start(client: Client, caplog: pytest.LogCaptureFixture, cause: str) -> None:
    errors = _remote_lines(caplog, "cannot be used")
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR, [r.getMessage() for r in errors]
    assert cause in errors[0].getMessage()
    status, ready = await _json(client, "/ready")
    assert status == 200 and ready["status"] == "READY"  # local data is served without the store
    assert ready["remote_store"]["usable"] is False and cause in ready["remote_store"]["problem"]
    status, cluster = await _json(client, f"/v3/clusters/{broker_of(client).cluster_id}")
    assert status == 200 and cluster["remote_store"]["usable"] is False
    assert cause in cluster["remote_store"]["problem"]


async def test_a_missing_bucket_is_named_at_start_refuses_tiered_topics_until_it_exists(
    start_broker: StartBroker, moto_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = f"tierlog-{uuid.uuid4().hex[:16]}"
    caplog.set_level(logging.INFO, logger="tierlog.remote")
    client = await start_broker(**{"remote.uri": f"s3://{bucket}/tl"})
    await _assert_named_at_start(client, caplog, "the bucket does not exist (NoSuchBucket)")

    status, body = await _create_over_rest(client, "over-rest")
    assert status == 400 and body["error_code"] == 40002
    assert "remote.storage.enable" in body["message"] and "NoSuchBucket" in body["message"]
    assert f"s3://{bucket}/tl" in body["message"]
    bootstrap = broker_of(client).kafka_endpoint or ""
    refused = await asyncio.to_thread(_create_over_kafka, bootstrap, "over-kafka")
    assert refused is not None and refused.code() == KafkaError.INVALID_CONFIG
    assert "NoSuchBucket" in refused.str()
    await broker_of(client).create_topic("local-only", 1)  # an untiered topic needs no store

    await asyncio.to_thread(
        lambda: boto3.client("s3", endpoint_url=moto_server.endpoint_url).create_bucket(Bucket=bucket)
    )
    status, body = await _create_over_rest(client, "over-rest")
    assert status == 201, body
    status, ready = await _json(client, "/ready")
    assert status == 200 and "remote_store" not in ready
    assert len(_remote_lines(caplog, "usable again")) == 1


async def test_uploads_resume_once_the_bucket_is_back_with_one_line_and_last_error_cleared(
    start_broker: StartBroker, moto_server: S3Server, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tierlog.remote")
    client = await start_broker()
    broker = broker_of(client)
    await create_topic(client, "r", **{"segment.bytes": "2048"})
    partition = broker.topic("r").partition(0)
    remote = partition.remote
    assert remote is not None and broker.remote.health.problem is None
    s3 = boto3.resource("s3", endpoint_url=moto_server.endpoint_url)
    await asyncio.to_thread(lambda: (s3.Bucket(bucket).objects.all().delete(), s3.Bucket(bucket).delete()))

    await produce(client, "r", 0, 40)  # several sealed segments, each pass fails on every one
    sealed_end = partition.log.sealed_segments()[-1].next_offset

    def failed_a_few_times() -> bool:
        broker.remote.wake()
        return remote.remote_log.failures >= 3

    async with asyncio.timeout(WAIT_S):
        await broker.remote.wait_for(failed_a_few_times)
    failing = _remote_lines(caplog, "uploads failing")
    assert len(failing) == 1 and failing[0].levelno == logging.WARNING  # one line per store, not per pass
    assert "the bucket does not exist (NoSuchBucket)" in failing[0].getMessage()
    assert remote.remote_log.last_error is not None and "NoSuchBucket" in remote.remote_log.last_error
    described = await broker.remote.describe(partition)
    assert described["upload_failures"] == remote.remote_log.failures
    status, cluster = await _json(client, f"/v3/clusters/{broker.cluster_id}")
    assert cluster["remote_store"]["uploads_failing"] is True

    await asyncio.to_thread(lambda: s3.create_bucket(Bucket=bucket))
    await wait_uploaded(client, "r", sealed_end)
    async with asyncio.timeout(WAIT_S):
        await broker.remote.wait_for(lambda: bool(_remote_lines(caplog, "uploads resumed")))
    assert len(_remote_lines(caplog, "uploads resumed")) == 1
    assert remote.remote_log.last_error is None
    described = await broker.remote.describe(partition)
    assert described["last_error"] is None and described["upload_failures"] >= 3
    status, ready = await _json(client, "/ready")
    assert status == 200 and "remote_store" not in ready
    metrics = client.app[METRICS].render()
    assert 'tierlog_remote_upload_failures_total{partition="0",topic="r"}' in metrics


async def test_bad_credentials_are_named_as_such(
    start_broker: StartBroker, checking_moto: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tierlog.remote")
    client = await start_broker(**{"s3.endpoint.url": checking_moto.endpoint_url})
    await _assert_named_at_start(client, caplog, "bad credentials")
    assert "InvalidAccessKeyId" in _remote_lines(caplog, "cannot be used")[0].getMessage()
    status, body = await _create_over_rest(client, "t")
    assert status == 400 and "InvalidAccessKeyId" in body["message"]


async def test_an_unreachable_endpoint_is_named_as_such(
    start_broker: StartBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tierlog.remote")
    nothing_there = f"http://127.0.0.1:{free_port()}"
    client = await start_broker(**{"s3.endpoint.url": nothing_there})
    await _assert_named_at_start(client, caplog, "the endpoint is unreachable")
    assert nothing_there in _remote_lines(caplog, "cannot be used")[0].getMessage()
    status, body = await _create_over_rest(client, "t")
    assert status == 400 and "unreachable" in body["message"]


async def test_a_bucket_created_later_is_seen_by_the_uploader_alone(
    start_broker: StartBroker, moto_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    """No tiered topic, no upload to prove the store back: the uploader loop checks again on its backoff."""
    bucket = f"tierlog-{uuid.uuid4().hex[:16]}"
    caplog.set_level(logging.INFO, logger="tierlog.remote")
    client = await start_broker(**{"remote.uri": f"s3://{bucket}/tl"})
    broker = broker_of(client)
    assert broker.remote.health.problem == "the bucket does not exist (NoSuchBucket)"
    await asyncio.to_thread(
        lambda: boto3.client("s3", endpoint_url=moto_server.endpoint_url).create_bucket(Bucket=bucket)
    )

    def usable() -> bool:
        broker.remote.wake()
        return broker.remote.health.problem is None

    async with asyncio.timeout(WAIT_S):
        await broker.remote.wait_for(usable)
    status, ready = await _json(client, "/ready")
    assert status == 200 and "remote_store" not in ready
    assert len(_remote_lines(caplog, "usable again")) == 1
