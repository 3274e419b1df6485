"""The broker's topics and partitions: the domain every API and the cluster code call.

* :mod:`.broker`: :class:`~tierlog.service.topics.broker.Broker`, the topics this process holds, their
  lifecycle (create, delete, alter configs, add partitions) through the metadata store, and opening and
  closing their logs;
* :mod:`.topic` and :mod:`.partition`: a topic and one partition as the broker serves it (an async face
  over :class:`~tierlog.tiering.log.PartitionLog`: appends, reads, long polls, leader and follower roles);
* :mod:`.configs` and :mod:`.rules`: Kafka's topic config names and the checks a topic change must pass;
* :mod:`.producer_ids`: producer ids for idempotent producers;
* :mod:`.data_dir`: partition directories, markers and durable renames in the data directory;
* :mod:`.tasks`: background work the app owns (tracked tasks, periodic log maintenance);
* :mod:`.page_cache`: warming a file region before ``sendfile``;
* :mod:`.send_region`: sending a file region on a plaintext transport with ``sendfile``.

Nothing here imports an API package or the app.
"""
