"""Fixtures of the security suites: the cluster suites' real etcd (``etcd_server``, ``etcd_uri``), reused here
for the security store on etcd."""

from __future__ import annotations

from tests.integration.cluster.conftest import etcd_server, etcd_uri

__all__ = ["etcd_server", "etcd_uri"]
