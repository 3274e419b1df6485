"""Confluent's v3 admin API: clusters, brokers, topics, partitions and topic configs."""

from tierlog.service.admin_v3.routes import OPENAPI_PATHS, setup_routes

__all__ = ["OPENAPI_PATHS", "setup_routes"]
