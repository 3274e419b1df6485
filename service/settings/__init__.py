"""The broker's settings: one declaration per setting, resolved into one immutable ``Settings``.

* :mod:`.spec`: what one row declares (name, parser, default, doc, the attribute it fills) and the shared
  parsers; :mod:`.table`: the rows; :mod:`.rules`: every rule between settings, in one list;
* :mod:`.config`: flags, environment and a config file (TOML, or Kafka's ``server.properties`` read by
  :mod:`.properties`) resolved through the table into ``Settings``;
* :mod:`.uris`: the remote and metadata URIs; :mod:`.doc`: the docs tables generated from the rows.

A new setting is one row in :mod:`.table` (security settings: ``tierlog.service.security.settings``);
its flag, environment variable, file key, default, docs row and ``Settings`` attribute follow from it.
"""
