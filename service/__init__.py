"""The broker process: one aiohttp application serving every HTTP API over the topics it holds.

Packages, each owning one role (the map and where new code goes: ``docs/design/0014-package-map.md``):

* :mod:`~tierlog.service.app`: the composition root (``create_app``), and :mod:`~tierlog.service.serve`
  the ``tierlog serve`` process around it; :mod:`~tierlog.service.openapi` assembles every API's paths;
* :mod:`~tierlog.service.web`: HTTP plumbing every API shares (app keys, the error middleware, request
  parsing, content negotiation, connections, body budgets, health and metrics routes);
* the APIs, independent of each other: :mod:`~tierlog.service.rest_v2` (Confluent REST Proxy v2),
  :mod:`~tierlog.service.admin_v3` (Confluent v3 admin), :mod:`~tierlog.service.native_api` (raw batches);
* :mod:`~tierlog.service.topics`: the broker's topics and partitions (the domain every API calls);
* :mod:`~tierlog.service.settings`: one declaration per broker setting, resolved into ``Settings``;
* :mod:`~tierlog.service.cluster`, :mod:`~tierlog.service.replication`, :mod:`~tierlog.service.groups`,
  :mod:`~tierlog.service.remote`, :mod:`~tierlog.service.security`: the cluster and controller,
  replication, consumer groups, the broker's side of the remote tier, and TLS/authentication/ACLs;
* :mod:`~tierlog.service.metrics`: the Prometheus registry (imports nothing of the broker).

Import-linter contracts in ``pyproject.toml`` keep these directions; nothing outside imports ``service``.
"""
