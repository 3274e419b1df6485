"""Remote object keys: format, parsing round trip, sort order and validation; plus store URI parsing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.remote import layout
from tierlog.tiering.remote.factory import open_object_store, parse_store_uri
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.object_store import validate_key
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.retrying import RetryingStore
from tierlog.wire.errors import InvalidRequestError

U = uuid.UUID("5f0c2a8e-9d3b-4c1e-8f00-0123456789ab")


def test_golden_keys() -> None:
    assert (
        layout.segment_key("orders", 3, 12345, U)
        == "orders/3/00000000000000012345-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.log"
    )
    assert layout.segment_keys("orders", 3, 0, U)["timeindex"].endswith(
        "00000000000000000000-" + str(U) + ".timeindex"
    )
    assert layout.manifest_key("orders", 3, 7) == "orders/3/manifest/00000000000000000007.json"
    assert layout.partition_prefix("a.b_c-d", 0) == "a.b_c-d/0/"


topics = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in (".", ".."))


@given(
    topics,
    st.integers(0, 10_000),
    st.integers(0, 2**63 - 1),
    st.uuids(),
    st.sampled_from(layout.SEGMENT_SUFFIXES),
)
def test_segment_key_roundtrip(
    topic: str, partition: int, base: int, u: uuid.UUID, kind: layout.SegmentKind
) -> None:
    key = layout.segment_key(topic, partition, base, u, kind)
    validate_key(key)
    assert layout.parse_segment_key(key) == layout.SegmentObjectKey(topic, partition, base, u, kind)
    assert layout.parse_manifest_key(key) is None


@given(topics, st.integers(0, 10_000), st.integers(1, 2**63 - 1))
def test_manifest_key_roundtrip(topic: str, partition: int, version: int) -> None:
    key = layout.manifest_key(topic, partition, version)
    assert layout.parse_manifest_key(key) == (topic, partition, version)
    assert layout.parse_segment_key(key) is None


@given(st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=20))
def test_keys_sort_by_offset(offsets: list[int]) -> None:
    keys = [layout.segment_key("t", 0, o, U) for o in offsets]
    assert [layout.parse_segment_key(k).base_offset for k in sorted(keys)] == sorted(offsets)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "key",
    [
        "orders/3/12345-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.log",
        "orders/3/00000000000000012345-not-a-uuid.log",
        "orders/3/00000000000000012345-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.txt",
        "orders/x/00000000000000012345-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.log",
        "a/orders/3/00000000000000012345-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.log",
        "orders/3/99999999999999999999-5f0c2a8e-9d3b-4c1e-8f00-0123456789ab.log",
    ],
)
def test_foreign_keys_do_not_parse(key: str) -> None:
    assert layout.parse_segment_key(key) is None


@pytest.mark.parametrize(
    "bad", [("", 0, 0), ("a/b", 0, 0), ("..", 0, 0), ("t", -1, 0), ("t", 0, -1), ("t" * 250, 0, 0)]
)
def test_invalid_parts_are_rejected(bad: tuple[str, int, int]) -> None:
    with pytest.raises(InvalidRequestError):
        layout.segment_key(bad[0], bad[1], bad[2], U)


def test_manifest_version_must_be_positive() -> None:
    with pytest.raises(InvalidRequestError):
        layout.manifest_key("t", 0, 0)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket", ("s3", "bucket", "")),
        ("s3://bucket/", ("s3", "bucket", "")),
        ("s3://bucket/a/b/", ("s3", "bucket", "a/b")),
        ("s3a://bucket/a", ("s3", "bucket", "a")),
        ("s3://bucket/with%20space", ("s3", "bucket", "with space")),
        ("file:///var/lib/tierlog", ("file", "/var/lib/tierlog", "")),
        ("/var/lib/tierlog", ("file", "/var/lib/tierlog", "")),
    ],
)
def test_parse_store_uri(uri: str, expected: tuple[str, str, str]) -> None:
    assert parse_store_uri(uri) == expected


@pytest.mark.parametrize(
    "uri", ["", "s3://", "s3:///prefix", "gs://bucket", "file://remote-host/x", "s3://b/p?x=1"]
)
def test_bad_uris(uri: str) -> None:
    with pytest.raises(InvalidRequestError):
        parse_store_uri(uri)


async def test_open_local_store(tmp_path: Path) -> None:
    store = open_object_store(str(tmp_path / "a"), retry=None)
    assert isinstance(store, LocalObjectStore)
    wrapped = open_object_store((tmp_path / "b").as_uri())
    assert isinstance(wrapped, RetryingStore) and isinstance(wrapped.inner, LocalObjectStore)
    await wrapped.put("k", b"v")
    assert (tmp_path / "b" / "k").read_bytes() == b"v"
    with pytest.raises(InvalidRequestError):
        open_object_store(str(tmp_path), part_size=5)


async def test_open_s3_store_does_no_io() -> None:
    store = open_object_store("s3://bucket/pre/fix", endpoint_url="http://127.0.0.1:1", retry=None)
    assert isinstance(store, PrefixedStore) and store.prefix == "pre/fix"
    await store.close()
