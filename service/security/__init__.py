"""Security: TLS listeners, authentication and Kafka-model ACL authorization on every route.

* :mod:`~tierlog.service.security.model` — principals and the ACL vocabulary (pure);
* :mod:`~tierlog.service.security.settings` — the security settings;
* :mod:`~tierlog.service.security.acl` — the authorizer's decision over a snapshot of ACLs (pure);
* :mod:`~tierlog.service.security.scram` — salted, iterated credentials as Kafka stores them (pure);
* :mod:`~tierlog.service.security.principal_rules` — ``ssl.principal.mapping.rules`` (pure);
* :mod:`~tierlog.service.security.bearer` — bearer JWTs checked against a JWKS;
* :mod:`~tierlog.service.security.security_store` — users and ACLs in the metadata store, watched into a
snapshot;
* :mod:`~tierlog.service.security.tls` — server and broker-to-broker SSL contexts, reload on SIGHUP;
* :mod:`~tierlog.service.security.authn` / :mod:`~tierlog.service.security.authz` — the HTTP middlewares;
* :mod:`~tierlog.service.security.admin_routes` — the v3 ACL and user API; ``cli`` — ``tierlog users|acls``.

``docs/security.md`` is the user's walk-through; ``docs/design/0012-security.md`` the design note.
"""
