"""The Confluent REST Proxy v2 compatible API: routes, JSON/binary conversion, media types, OpenAPI."""

from tierlog.service.rest_v2.routes import OPENAPI_PATHS, setup_routes

__all__ = ["OPENAPI_PATHS", "setup_routes"]
