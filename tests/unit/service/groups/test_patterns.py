"""Topic-pattern subscriptions: compiling a client's pattern and resolving it over topic names."""

from __future__ import annotations

import re

import pytest

from tierlog.service.groups.patterns import NO_TOPIC, compile_pattern, matching_topics
from tierlog.wire.errors import InvalidRequestError

NAMES = ["orders", "orders.eu", "__consumer_offsets", "payments", "orders-archive"]


def test_a_pattern_matches_whole_names_sorted_and_never_an_internal_topic() -> None:
    assert matching_topics(compile_pattern("orders.*"), NAMES) == ["orders", "orders-archive", "orders.eu"]
    assert matching_topics(compile_pattern("order"), NAMES) == []  # a prefix is not a match
    assert matching_topics(compile_pattern(".*"), NAMES) == sorted(n for n in NAMES if not n.startswith("__"))


def test_only_the_names_the_caller_may_read_are_matched() -> None:
    readable = {"orders.eu", "payments"}
    assert matching_topics(re.compile(".*"), NAMES, readable.__contains__) == ["orders.eu", "payments"]


def test_the_pattern_for_nothing_matches_no_name() -> None:
    assert matching_topics(compile_pattern(NO_TOPIC), NAMES) == []


def test_a_malformed_pattern_is_a_bad_request() -> None:
    with pytest.raises(InvalidRequestError, match="invalid topic pattern 'orders\\('"):
        compile_pattern("orders(")
