"""The cluster: brokers, the controller and partition leadership on a metadata store (etcd in a cluster).

See ``docs/cluster.md`` for operators and ``docs/design/0008-cluster-metadata.md`` for the design.
"""
