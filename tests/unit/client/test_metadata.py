"""The client's view of the cluster: decoding ``GET /native/v1/metadata``, leader hints, merging answers for
some topics into the snapshot, the legacy one-broker view, and the bootstrap list."""

from __future__ import annotations

from typing import Any

import pytest

from tierlog.client.config import ConsumerConfig, ProducerConfig, bootstrap_urls
from tierlog.client.metadata import NO_LEADER, ClusterMetadata, decode_metadata, legacy_metadata
from tierlog.client.router import Router, is_routing_error
from tierlog.client.types import TopicPartition
from tierlog.wire.errors import (
    CorruptRecordError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnavailableError,
    UnknownTopicError,
)

B1, B2, B3 = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def answer(leaders: list[int], epochs: list[int] | None = None, *, live: tuple[int, ...] = (1, 2, 3)) -> Any:
    urls = {1: B1, 2: B2, 3: B3}
    return {
        "cluster_id": "c",
        "controller_id": 1,
        "controller_epoch": 3,
        "brokers": [{"broker_id": b, "url": urls[b] + "/", "rack": None} for b in live],
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": p,
                        "leader": leader,
                        "leader_epoch": (epochs or [0] * len(leaders))[p],
                        "replicas": [leader],
                        "isr": [leader],
                    }
                    for p, leader in enumerate(leaders)
                ],
            },
            {"topic": "gone", "error_code": 40401},
        ],
    }


def test_decode_maps_each_partition_to_its_leaders_url() -> None:
    meta = decode_metadata(answer([1, 2, 3, 1]), fetched_at=5.0)
    assert [meta.leader(TopicPartition("t", p)).url for p in range(4)] == [B1, B2, B3, B1]  # type: ignore[union-attr]
    assert meta.partition_count("t") == 4
    assert meta.unknown_topics == {"gone"}
    assert meta.knows("gone") and not meta.knows("other")
    assert meta.leader(TopicPartition("t", 4)) is None
    assert meta.fetched_at == 5.0 and not meta.legacy
    with pytest.raises(UnknownTopicError):
        meta.check_topic("gone")


def test_a_leader_that_is_not_a_live_broker_counts_as_none() -> None:
    meta = decode_metadata(answer([1, 3, NO_LEADER], live=(1, 2)))
    assert [meta.leader(TopicPartition("t", p)).url for p in range(3)] == [B1, "", ""]  # type: ignore[union-attr]


def test_a_one_broker_answer_is_the_broker_the_client_reached() -> None:
    doc = answer([1, 1], live=(1,))
    doc["brokers"][0]["url"] = "http://0.0.0.0:0"
    meta = decode_metadata(doc, answered_by="http://localhost:8082/")
    assert meta.leader(TopicPartition("t", 1)).url == "http://localhost:8082"  # type: ignore[union-attr]
    several = decode_metadata(answer([1, 2]), answered_by="http://localhost:8082")
    assert several.leader(TopicPartition("t", 1)).url == B2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"cluster_id": "c", "brokers": "nope"},
        {"cluster_id": "c", "brokers": [], "topics": [{"topic": "t", "partitions": [{"partition": 1}]}]},
        {
            "cluster_id": "c",
            "brokers": [],
            "topics": [{"topic": "t", "partitions": [{"partition": 1, "leader": 1}]}],
        },
        {"cluster_id": "c", "brokers": [{"broker_id": True, "url": "u"}]},
    ],
)
def test_a_malformed_answer_is_a_corrupt_record_error(doc: Any) -> None:
    with pytest.raises(CorruptRecordError):
        decode_metadata(doc)


def test_a_leader_hint_replaces_one_partition_in_a_new_snapshot() -> None:
    meta = decode_metadata(answer([1, 2, 3]), version=4)
    hinted = meta.with_leader(TopicPartition("t", 1), 3, B3, 7)
    assert hinted.version == 5 and meta.version == 4
    assert hinted.leader(TopicPartition("t", 1)).url == B3  # type: ignore[union-attr]
    assert hinted.leader(TopicPartition("t", 1)).leader_epoch == 7  # type: ignore[union-attr]
    assert meta.leader(TopicPartition("t", 1)).url == B2  # type: ignore[union-attr]
    assert meta.with_leader(TopicPartition("other", 0), 3, B3, 7) is meta
    moved = meta.with_leader(TopicPartition("t", 0), 9, "http://127.0.0.1:9009", 1)
    assert moved.is_live("http://127.0.0.1:9009")


def test_an_answer_for_some_topics_merges_over_the_snapshot() -> None:
    old = decode_metadata(answer([1, 2]))
    other = legacy_metadata(B1, {"u": 2}, ["t"], fetched_at=1.0, version=0)
    merged = old.merged(other, version=9)
    assert merged.version == 9
    assert "t" not in merged.topics and "t" in merged.unknown_topics
    assert merged.partition_count("u") == 2
    assert "gone" in merged.unknown_topics
    back = merged.merged(decode_metadata(answer([3, 3])), version=10)
    assert back.partition_count("t") == 2 and back.partition_count("u") == 2


def test_a_broker_without_the_metadata_route_leads_everything() -> None:
    meta = legacy_metadata(B1, {"t": 3}, ["nope"], fetched_at=0.0, version=1)
    assert meta.legacy
    assert {meta.leader(TopicPartition("t", p)).url for p in range(3)} == {B1}  # type: ignore[union-attr]
    assert meta.unknown_topics == {"nope"}


def test_snapshots_are_immutable() -> None:
    meta = decode_metadata(answer([1]))
    with pytest.raises(TypeError):
        meta.topics["x"] = ()  # type: ignore[index]
    assert isinstance(meta, ClusterMetadata)


@pytest.mark.parametrize(
    ("given", "urls"),
    [
        ("localhost:8082", ("http://localhost:8082",)),
        ("http://a:1, b:2,,http://a:1/", ("http://a:1", "http://b:2")),
        (["https://a:1", "b:2,c:3"], ("https://a:1", "http://b:2", "http://c:3")),
    ],
)
def test_a_bootstrap_list_is_one_url_a_comma_separated_string_or_a_list(
    given: str | list[str], urls: tuple[str, ...]
) -> None:
    assert bootstrap_urls(given) == urls
    assert ProducerConfig.from_kwargs({"bootstrap_servers": given}).bootstrap_list == urls
    assert ConsumerConfig.from_kwargs({"bootstrap_servers": given}).bootstrap_list == urls


@pytest.mark.parametrize("given", ["", [], " , ", ["ftp://a:1"], [3]])
def test_a_bad_bootstrap_list_is_refused(given: Any) -> None:
    with pytest.raises(InvalidRequestError):
        bootstrap_urls(given)


def test_routing_errors_are_the_leadership_and_connection_ones() -> None:
    from tierlog.client.errors import BrokerUnavailableError, RequestTimeoutError

    assert is_routing_error(NotLeaderOrFollowerError("x"))
    assert is_routing_error(LeaderNotAvailableError("x"))
    assert is_routing_error(BrokerUnavailableError("x"))
    assert is_routing_error(RequestTimeoutError("x"))
    assert not is_routing_error(UnavailableError("x"))
    assert not is_routing_error(UnknownTopicError("x"))


def test_a_router_needs_a_bootstrap_url_and_lists_candidates_in_order() -> None:
    with pytest.raises(ValueError):
        Router([])
    now = [100.0]
    router = Router([B1, B2 + "/"], retry_backoff_max_ms=1000, clock=lambda: now[0])
    assert router.candidates() == [B1, B2]
    router.mark_down(B1)
    assert router.candidates() == [B2, B1]
    now[0] += 1.5
    assert router.candidates() == [B1, B2]
    router.mark_up(B2)
    assert router.candidates() == [B2, B1]
    assert router.any.base_url == B2
