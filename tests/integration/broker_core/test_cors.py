"""Opt-in CORS (``http.cors.allowed.origins``): real preflights and cross-origin requests to a real broker."""

from __future__ import annotations

from .conftest import StartNode, batch

VIEWER = "https://viewer.example"
PREFLIGHT = {
    "Origin": VIEWER,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


async def test_off_by_default_no_cors_header_and_preflight_is_405(start_node: StartNode) -> None:
    node = await start_node()
    resp = await node.client.get("/topics", headers={"Origin": VIEWER})
    assert resp.status == 200
    assert not [name for name in resp.headers if name.lower().startswith("access-control-")]
    preflight = await node.client.options("/topics/orders", headers=PREFLIGHT)
    assert preflight.status == 405
    assert "Access-Control-Allow-Origin" not in preflight.headers


async def test_listed_origin_preflight_and_answers(start_node: StartNode) -> None:
    node = await start_node(http_cors_allowed_origins=f"{VIEWER}, http://localhost:3000")
    preflight = await node.client.options("/topics/orders", headers=PREFLIGHT)
    assert preflight.status == 204, await preflight.text()
    assert preflight.headers["Access-Control-Allow-Origin"] == VIEWER
    methods = set(preflight.headers["Access-Control-Allow-Methods"].split(", "))
    assert {"GET", "POST"} <= methods and not methods & {"PUT", "PATCH", "DELETE"}
    assert preflight.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert preflight.headers["Access-Control-Max-Age"] == "600"
    assert "Access-Control-Allow-Credentials" not in preflight.headers
    assert "Origin" in preflight.headers["Vary"]

    # a trailing slash routes as the path without it, for a preflight too
    assert (await node.client.options("/topics/", headers=PREFLIGHT)).status == 204

    # an ordinary answer and an error answer carry the origin; the native API's offsets are exposed
    ok = await node.client.get("/topics", headers={"Origin": VIEWER})
    assert ok.status == 200
    assert ok.headers["Access-Control-Allow-Origin"] == VIEWER
    missing = await node.client.get("/topics/nope", headers={"Origin": VIEWER})
    assert missing.status == 404
    assert missing.headers["Access-Control-Allow-Origin"] == VIEWER
    await node.create("orders")
    produced = await node.client.post(
        "/native/v1/topics/orders/partitions/0/batches",
        data=batch(b"v"),
        headers={"Origin": VIEWER, "Content-Type": "application/vnd.tierlog.batches"},
    )
    assert produced.status == 200, await produced.text()
    fetched = await node.client.get(
        "/native/v1/topics/orders/partitions/0/batches?offset=0", headers={"Origin": VIEWER}
    )
    assert fetched.status == 200
    exposed = {name.strip() for name in fetched.headers["Access-Control-Expose-Headers"].split(",")}
    assert {name.lower() for name in fetched.headers if name.lower().startswith("x-tierlog")} <= exposed

    # an origin not listed gets no CORS header, and its preflight is not answered
    other = await node.client.get("/topics", headers={"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
    assert other.headers["Vary"] == "Origin"
    refused = await node.client.options(
        "/topics/orders", headers={**PREFLIGHT, "Origin": "https://evil.example"}
    )
    assert refused.status == 405
    # a preflight to a path with no route is the 404, not a 204
    unrouted = await node.client.options("/no/such/path", headers=PREFLIGHT)
    assert unrouted.status == 404


async def test_preflight_needs_no_credentials_but_the_request_does(start_node: StartNode) -> None:
    node = await start_node(
        http_cors_allowed_origins=VIEWER,
        http_cors_allow_credentials="true",
        authentication_methods="basic",
    )
    preflight = await node.client.options(
        "/topics", headers={**PREFLIGHT, "Access-Control-Request-Method": "GET"}
    )
    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    assert preflight.headers["Access-Control-Allow-Methods"] in ("GET", "GET, HEAD")
    refused = await node.client.get("/topics", headers={"Origin": VIEWER})
    assert refused.status == 401
    assert refused.headers["Access-Control-Allow-Origin"] == VIEWER
    assert refused.headers["Access-Control-Allow-Credentials"] == "true"
    assert "www-authenticate" in refused.headers["Access-Control-Expose-Headers"].split(", ")


async def test_any_origin_answers_star_without_vary(start_node: StartNode) -> None:
    node = await start_node(http_cors_allowed_origins="*")
    resp = await node.client.get("/health", headers={"Origin": "http://anything.example:8080"})
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "Vary" not in resp.headers
