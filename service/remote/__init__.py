"""The broker's side of the remote tier: per-partition upload and remote reads, the broker-wide tier
(uploader task, read cache, disk budget) and restore from a bucket."""
