"""The OpenAPI document is complete enough for a viewer: every operation, parameter and schema explained,
examples for request bodies, tags, servers and the security each route needs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tierlog.service.openapi import build_document
from tierlog.service.security.authz import OPEN, ROUTE_ACTIONS

DOCUMENT = build_document()
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _operations() -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    for path, item in DOCUMENT["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item, item[method]


OPERATIONS = list(_operations())
IDS = [f"{method.upper()} {path}" for path, method, _, _ in OPERATIONS]


@pytest.mark.parametrize(("path", "method", "item", "operation"), OPERATIONS, ids=IDS)
def test_every_operation_is_explained(
    path: str, method: str, item: dict[str, Any], operation: dict[str, Any]
) -> None:
    assert operation.get("summary"), "no summary"
    own = operation.get("description", "").split("Authorization (when on):")[0].strip()
    assert len(own) > 20 and own != operation["summary"], "no description of its own"
    assert operation.get("operationId"), "no operationId"
    assert operation.get("tags"), "no tag"
    for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]:
        assert parameter.get("description"), f"parameter {parameter['name']} has no description"
    for status, response in operation["responses"].items():
        assert response.get("description"), f"answer {status} has no description"
    body = operation.get("requestBody")
    if body is not None:
        assert body.get("description"), "the request body has no description"
        for media, content in body["content"].items():
            if "json" in media:
                assert "example" in content or "examples" in content, f"no example of {media}"


def test_operation_ids_are_unique_and_tags_declared() -> None:
    ids = [operation["operationId"] for _, _, _, operation in OPERATIONS]
    assert len(ids) == len(set(ids))
    declared = {tag["name"] for tag in DOCUMENT["tags"]}
    assert all(tag.get("description") for tag in DOCUMENT["tags"])
    used = {tag for _, _, _, operation in OPERATIONS for tag in operation["tags"]}
    assert used == declared


def test_every_schema_is_explained() -> None:
    for name, schema in DOCUMENT["components"]["schemas"].items():
        assert schema.get("description"), name


def test_security_schemes_and_which_routes_need_them() -> None:
    schemes = DOCUMENT["components"]["securitySchemes"]
    assert schemes["basicAuth"] == {**schemes["basicAuth"], "type": "http", "scheme": "basic"}
    assert schemes["bearerAuth"]["bearerFormat"] == "JWT"
    assert "mtls" in DOCUMENT["info"]["description"]
    assert {} in DOCUMENT["security"]  # authentication is off by default
    for path, method, _, operation in OPERATIONS:
        row = ROUTE_ACTIONS[(method.upper(), path)]
        if row is OPEN:
            assert operation["security"] == [], path
        else:
            assert operation["x-tierlog-acl"] in operation["description"], path
            assert "401" in operation["responses"], path


def test_servers_name_the_broker_first_when_served() -> None:
    assert DOCUMENT["servers"][0]["url"] == "http://127.0.0.1:8082"
    served = build_document("https://broker-1.example:8443/")
    assert served["servers"][0]["url"] == "https://broker-1.example:8443"
