"""Replication: followers fetching from leaders, the ISR, the high watermark, ``acks=all`` and leader epochs
(Kafka's replication protocol on the etcd-backed controller). Design: ``docs/design/0010-replication.md``.

Modules: :mod:`.leader` (a leader's view of its followers: ISR decisions, high watermark, acks=all waits;
pure), :mod:`.isr` (sending ISR changes to the controller), :mod:`.client` (the HTTP calls a broker makes to
its peers), :mod:`.routes` (the leader- and controller-side HTTP routes), :mod:`.fetcher` (a follower's fetch
loop, truncation and KIP-405 bootstrap), :mod:`.manager` (becoming leader or follower as the metadata says).
"""
