"""The table of broker settings: one row per setting, which gives everything about it (see
:class:`~tierlog.service.settings.spec.SettingSpec`).

:mod:`tierlog.service.settings.config` resolves them (flags, environment, TOML file) into one
:class:`~tierlog.service.settings.config.Settings`, whose attributes the rows fill; the cross-field rules are
in
:mod:`tierlog.service.settings.rules`. The CLI builds its flags and ``--help`` lines, and
:mod:`tierlog.service.settings.doc` the tables of ``docs/configuration.md``, from here. Each tuple below is
one table of the docs, in its order.
"""

from __future__ import annotations

from typing import Any

from tierlog.service.security.settings import SECURITY_TABLE
from tierlog.service.settings.http import CORS_TABLE
from tierlog.service.settings.spec import (
    ENV_PREFIX,
    SettingSpec,
    env_name,
    flag_name,
    host_port_or_none,
    parse_url,
)
from tierlog.service.settings.spec import bool_value as _bool
from tierlog.service.settings.spec import int_range as _int
from tierlog.service.settings.spec import path_value as _path
from tierlog.service.settings.spec import text_value as _text
from tierlog.service.settings.uris import optional_metadata_uri, parse_remote_uri
from tierlog.service.topics.configs import TOPIC_CONFIGS
from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "CLUSTER_TABLE",
    "ENV_PREFIX",
    "PROCESS_TABLE",
    "SECURITY_TABLE",
    "SETTINGS_TABLE",
    "TABLE",
    "TOPIC_DEFAULTS_TABLE",
    "SettingSpec",
    "env_name",
    "flag_name",
    "parse_url",
]

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _assignor(raw: str) -> str:
    if raw not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        raise ValueError("expected range, roundrobin, sticky or cooperative-sticky")
    return raw


def _replica_selector(raw: str) -> str:
    value = raw.strip()
    short = value.rsplit(".", 1)[-1]
    if value in ("leader", "rack-aware"):
        return value
    if short == "LeaderSelector":
        return "leader"
    if short == "RackAwareReplicaSelector":
        return "rack-aware"
    raise ValueError("expected leader or rack-aware (or Kafka's LeaderSelector, RackAwareReplicaSelector)")


def _level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return value


def _unless_empty(raw: str) -> str | None:
    return raw or None


def _topic_default(broker_name: str, topic_config: str) -> SettingSpec[str]:
    """The broker setting ``broker_name``: the default of the topic config ``topic_config``, parsed and
    validated by the topic config's own rules."""
    spec = TOPIC_CONFIGS[topic_config]

    def parse(raw: str) -> str:
        try:
            return spec.parse(broker_name, raw)
        except InvalidRequestError as err:
            raise ValueError(err.message.split(": ", 1)[-1]) from None

    return SettingSpec(
        broker_name,
        spec.default,
        f"the broker-wide default of the topic config `{topic_config}`",
        parse,
        topic_config,
    )


DATA_DIR = SettingSpec(
    "data.dir",
    "./data",
    "Directory holding the partition logs (`<topic>-<partition>/`, Kafka's layout) and the broker state file "
    "`tierlog-state.json`. Created if missing; must not be a file.",
    _path,
)
HOST = SettingSpec("host", "127.0.0.1", "Address the HTTP server binds.", _text)
PORT = SettingSpec(
    "port",
    "8082",
    "TCP port (the REST proxy port). `0` picks a free port; the chosen one is logged (`listening on "
    "http://...`).",
    _int(0, 65535),
)
ADVERTISED_URL = SettingSpec(
    "advertised.url",
    None,
    "Base URL used in the `metadata.self` links of the v3 admin API.",
    parse_url,
    shown_default="http://<host>:<port>",
)
KAFKA_LISTENER = SettingSpec(
    "kafka.listener",
    "127.0.0.1:9092",
    "Where the Kafka protocol listener binds (`HOST:PORT`), so Kafka's own clients and tools talk to this "
    "broker; `none` turns it off. Port `0` picks a free one (logged). See "
    "[kafka-protocol.md](kafka-protocol.md).",
    host_port_or_none,
)
KAFKA_ADVERTISED_LISTENER = SettingSpec(
    "kafka.advertised.listener",
    None,
    "`HOST:PORT` Kafka clients are told to connect to in Metadata answers (registered in a cluster next to "
    "the HTTP URL).",
    host_port_or_none,
    shown_default="the bound listener",
)
SOCKET_REQUEST_MAX_BYTES = SettingSpec(
    "socket.request.max.bytes",
    str(100 * 2**20),
    "Largest Kafka protocol request frame; a client that declares a larger one is disconnected and logged "
    "(Kafka's setting of the same name).",
    _int(1024, 2**31 - 1),
)
CONNECTIONS_MAX_REAUTH_MS = SettingSpec(
    "connections.max.reauth.ms",
    "0",
    "Longest a SASL session on the Kafka listener lasts before the client must re-authenticate on its "
    "connection (KIP-368; an OAUTHBEARER session also ends when its token expires); a connection that sends "
    "a request past it is closed. `0`: sessions do not expire (Kafka's setting of the same name).",
    _int(0, 2**63 - 1),
)
REMOTE_URI = SettingSpec(
    "remote.uri",
    None,
    "Where sealed segments go: a local directory (a path or `file:///path`) or `s3://bucket/prefix`. "
    "Validated at start (bucket name rules, scheme) and shown in the start-up log line.",
    parse_remote_uri,
    shown_default="<data.dir>/remote",
)
S3_ENDPOINT_URL = SettingSpec(
    "s3.endpoint.url",
    None,
    "S3 endpoint for `s3://` remote URIs (MinIO, LocalStack, moto). An `http://` or `https://` URL. Unset "
    "means AWS.",
    parse_url,
    shown_default="$AWS_ENDPOINT_URL",
)
REMOTE_UPLOAD_CONCURRENCY = SettingSpec(
    "remote.upload.concurrency",
    "4",
    "Partitions uploading sealed segments to the remote tier at the same time (each partition uploads its "
    "segments one by one, in offset order).",
    _int(1, 1024),
)
REMOTE_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.upload.interval.ms",
    "10000",
    "How often the uploader looks for work besides when a segment rolls (also how soon uploads resume after "
    "an object-store outage).",
    _int(1, 2**31 - 1),
)
REMOTE_MAX_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.max.upload.interval.ms",
    "3600000",
    "Roll the active segment of a remote topic once its oldest unuploaded data is this old, so idle "
    "partitions reach the bucket. `-1`: never.",
    _int(-1, 2**63 - 1),
)
REMOTE_LOCAL_DISK_BUDGET_BYTES = SettingSpec(
    "remote.local.disk.budget.bytes",
    "-1",
    "Bound on the local bytes of remote-enabled partitions: a produce that would pass it while uploads are "
    "behind is refused with 503 (50301, retriable). `-1`: unlimited.",
    _int(-1, 2**63 - 1),
)
REMOTE_RETRY_DEADLINE_MS = SettingSpec(
    "remote.retry.deadline.ms",
    "30000",
    "How long one object-store request is retried (throttling, 5xx, timeouts; capped jittered backoff) "
    "before the upload or read fails. A failed upload is retried on the next pass.",
    _int(0, 2**31 - 1),
)
S3_CONNECT_TIMEOUT_MS = SettingSpec(
    "s3.connect.timeout.ms",
    "10000",
    "How long one S3 request attempt waits for a TCP connection to the endpoint (like the AWS SDKs' connect "
    "timeout). A timed-out attempt counts as a retriable failure, and every request, attempts and backoff "
    "together, ends within `remote.retry.deadline.ms`.",
    _int(1, 2**31 - 1),
)
S3_READ_TIMEOUT_MS = SettingSpec(
    "s3.read.timeout.ms",
    "30000",
    "How long one S3 request attempt waits for the next bytes of a response (the AWS SDKs' socket/read "
    "timeout). An endpoint that accepts connections and never answers fails an attempt after this long; the "
    "whole request still ends within `remote.retry.deadline.ms`.",
    _int(1, 2**31 - 1),
)
REMOTE_CACHE_BYTES = SettingSpec(
    "remote.cache.bytes",
    "268435456",
    "Memory for cached chunks of remote segments (remote reads).",
    _int(0, 2**63 - 1),
)
REMOTE_LOG_READER_THREADS = SettingSpec(
    "remote.log.reader.threads",
    "8",
    "Worker threads (Kafka's name) that run the ranged GETs of remote segments on an `s3://` remote tier, "
    "each reading its body to the end; their own pool, apart from `log.io.threads` and the event loop.",
    _int(1, 1024),
)
REMOTE_UPLOAD_PART_THREADS = SettingSpec(
    "remote.upload.part.threads",
    "8",
    "Worker threads that send the parts of multipart uploads (files over 16 MiB) on an `s3://` remote tier, "
    "each reading its 8 MiB part from disk: the parts in flight, and so in memory, at once across every "
    "upload; their own pool, apart from `remote.log.reader.threads`, `log.io.threads` and the event loop.",
    _int(1, 1024),
)
REMOTE_FETCH_READAHEAD_CHUNKS = SettingSpec(
    "remote.fetch.readahead.chunks",
    "4",
    "Chunks (4 MiB) of a remote segment fetched ahead of a sequential reader: up to this many ranged GETs in "
    "flight per stream besides the one it waits for. `0`: no read-ahead.",
    _int(0, 64),
)
REMOTE_UPLOAD_BATCH_BYTES = SettingSpec(
    "remote.upload.batch.bytes",
    "67108864",
    "Consecutive sealed segments of one partition go up together, up to this many bytes, under two manifest "
    "commits per batch (not per segment): small segments cost far fewer requests.",
    _int(1, 2**63 - 1),
)
REMOTE_UPLOAD_BATCH_SEGMENTS = SettingSpec(
    "remote.upload.batch.segments", "32", "Most sealed segments in one upload batch.", _int(1, 4096)
)
REMOTE_UPLOAD_FILE_CONCURRENCY = SettingSpec(
    "remote.upload.file.concurrency",
    "4",
    "Objects of one partition's batch (segments, then their indexes) put to the object store at the same "
    "time.",
    _int(1, 256),
)
REMOTE_UPLOAD_INDEXES_PACKED = SettingSpec(
    "remote.upload.indexes.packed",
    "true",
    "Upload a segment's offset and time index as one packed `.indexes` object (one small PUT per segment "
    "instead of two; see [object-store.md](object-store.md#the-packed-index-object)). `false` writes "
    "separate `.index` and `.timeindex` objects, which brokers, Spark jobs and `tierlog tiering check` of "
    "releases before the packed layout understand: set it while such a release still runs against the bucket "
    "(a rolling upgrade), then turn it back on; once packed objects exist, do not roll back (see the upgrade "
    "notes there). Both layouts are always read.",
    _bool,
)
REMOTE_RESTORE_ON_START = SettingSpec(
    "remote.restore.on.start",
    "false",
    "At start, recreate topics the remote tier has manifests for and this broker lacks (see "
    "[tiering.md](tiering.md#restore)).",
    _bool,
)
NUM_PARTITIONS = SettingSpec(
    "num.partitions",
    "1",
    "Partitions of a topic created without a count (auto-created topics too).",
    _int(1, 100_000),
)
AUTO_CREATE_TOPICS_ENABLE = SettingSpec(
    "auto.create.topics.enable",
    "true",
    "Create an unknown topic on its first produce, with `num.partitions`. With `false`, producing to an "
    "unknown topic answers 404 / 40401.",
    _bool,
)
MAX_REQUEST_SIZE = SettingSpec(
    "max.request.size",
    "10485760",
    "Largest HTTP request body in bytes; larger bodies are answered 413 / 41301.",
    _int(1024, 2**31 - 1),
)
LOG_RETENTION_CHECK_INTERVAL_MS = SettingSpec(
    "log.retention.check.interval.ms",
    "300000",
    "How often retention runs over every partition (as Kafka).",
    _int(1, 2**63 - 1),
)
LOG_FLUSH_SCHEDULER_INTERVAL_MS = SettingSpec(
    "log.flush.scheduler.interval.ms",
    "1000",
    "How often every partition is checked for a time-based flush (`flush.ms`) and roll (`segment.ms`). "
    'Kafka\'s default is "never"; tierlog checks every second so that `flush.ms` and `segment.ms` take '
    "effect without traffic.",
    _int(1, 2**63 - 1),
)
OFFSETS_RETENTION_MINUTES = SettingSpec(
    "offsets.retention.minutes",
    "10080",
    "Committed offsets of a consumer group with no members expire this long after the later of their commit "
    "and the moment the group became empty.",
    _int(1, 2**31 - 1),
)
CONSUMER_INSTANCE_TIMEOUT_MS = SettingSpec(
    "consumer.instance.timeout.ms",
    "300000",
    "A REST Proxy v2 consumer instance unused this long is deleted (without a final commit) and leaves its "
    "group.",
    _int(1000, 2**31 - 1),
)
GROUP_DEFAULT_ASSIGNOR = SettingSpec(
    "group.default.assignor",
    "range",
    "Assignment strategy of a group whose members ask for none: `range`, `roundrobin`, `sticky` (alias "
    "`cooperative-sticky`).",
    _assignor,
)
GROUP_CONSUMER_SESSION_TIMEOUT_MS = SettingSpec(
    "group.consumer.session.timeout.ms",
    "45000",
    "A member of a KIP-848 consumer group (`group.protocol=consumer`) that sends no heartbeat for this long "
    "is removed from its group and its partitions are assigned to the others.",
    _int(1000, 30 * 60_000),
)
GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = SettingSpec(
    "group.consumer.heartbeat.interval.ms",
    "5000",
    "How often members of KIP-848 consumer groups heartbeat (the interval the coordinator answers). Shorter "
    "makes rebalances settle sooner, at the cost of more requests.",
    _int(100, 60_000),
)
LOGGING_LEVEL = SettingSpec(
    "logging.level",
    "INFO",
    "`DEBUG`, `INFO`, `WARNING` or `ERROR`. Log lines go to stderr. The HTTP access log is written only at "
    "`DEBUG`.",
    _level,
)
CONNECTIONS_MAX_IDLE_MS = SettingSpec(
    "connections.max.idle.ms",
    "600000",
    "Close a client connection that has no request in progress for this long (Kafka's setting of the same "
    "name; also the HTTP keep-alive timeout).",
    _int(100, 2**31 - 1),
)
REQUEST_READ_TIMEOUT_MS = SettingSpec(
    "request.read.timeout.ms",
    "30000",
    "Close a connection whose request line, headers and body are not all received this long after the "
    "request's first byte (a slow or stalled sender). A long poll that is waiting for data is not affected.",
    _int(100, 2**31 - 1),
)
MAX_CONNECTIONS = SettingSpec(
    "max.connections",
    "512",
    "Most client connections open at once. A connection beyond it is answered `503` with error code `50301` "
    "and closed. Keep it well below the process's file descriptor limit (`ulimit -n`): segments and indexes "
    "use descriptors too.",
    _int(1, 2**20),
)
REST_PRODUCE_MAX_RECORDS = SettingSpec(
    "rest.produce.max.records",
    "100000",
    "Most records in one REST v2 JSON produce request. The body is parsed record by record and the parse "
    "stops at record `max + 1`, answered `422` without reading the rest. A request whose records cannot fit "
    "in the target partitions' `max.message.bytes` (at least 7 bytes each, plus keys and values, "
    "uncompressed topics) is answered `413` / `41301` before any batch is built.",
    _int(1, 2**31 - 1),
)
REST_PRODUCE_CONVERSION_MAX_BYTES = SettingSpec(
    "rest.produce.conversion.max.bytes",
    "16777216",
    "Memory of REST v2 JSON produce requests being read, parsed and converted to batches at once, "
    "broker-wide. A request holds its declared `Content-Length` before its body is read (a chunked body, "
    "chunk by chunk), then an estimate of its conversion: twice the body plus 400 bytes per record (one per "
    "`{`, at most `rest.produce.max.records + 1`). A request that does not fit is answered at once with "
    "`503` / `50301` (retriable: retry with backoff); one larger than the whole budget runs only as the "
    "oldest request holding it.",
    _int(1, 2**63 - 1),
)
QUEUED_MAX_REQUEST_BYTES = SettingSpec(
    "queued.max.request.bytes",
    "67108864",
    "Bytes of `acks=0` native produce bodies validated and waiting for their background append, broker-wide "
    "(Kafka's setting of the same name). A body that does not fit is answered `503` / `50301` (retriable) "
    "and nothing is appended; the bytes are given back when the append ends, failed or not. Shutdown awaits "
    "every pending append.",
    _int(1, 2**63 - 1),
)
LOG_IO_THREADS = SettingSpec(
    "log.io.threads",
    "8",
    "Worker threads for partition log I/O: appends, local reads (including warming the pages a fetch is "
    "about to `sendfile`), flushes and retention. A REST records fetch of up to 2 MiB (256 KiB in the json "
    "format or with the pure codec) is also rendered as JSON in the thread that read it, about a millisecond "
    "of work, so the request takes one hand-over to a worker instead of two; a larger one is rendered in the "
    "default executor. Sized apart from the default executor so slow disk work cannot starve other blocking "
    "calls, and other work cannot starve the logs. Internal topics (`__consumer_offsets`: offset commits) "
    "have one worker of their own, so commits never queue behind these.",
    _int(1, 1024),
)
ACCEPT_ERROR_LOG_INTERVAL_MS = SettingSpec(
    "accept.error.log.interval.ms",
    "10000",
    "When the kernel refuses to accept a connection (`EMFILE`, `ENFILE`, `ENOBUFS`), log it at most once per "
    "this interval, with the count since the last line; `tierlog_accept_errors_total` counts every failure.",
    _int(1, 2**31 - 1),
)

BROKER_ID = SettingSpec(
    "broker.id",
    "0",
    "This broker's id, unique in its cluster. A second live broker with the same id is refused at start.",
    _int(0, 2**31 - 1),
)
BROKER_RACK = SettingSpec(
    "broker.rack",
    None,
    "Rack or zone of this broker. Replica placement spreads each partition's replicas over racks, as Kafka "
    "does.",
    _unless_empty,
)
REPLICA_SELECTOR_CLASS = SettingSpec(
    "replica.selector.class",
    "leader",
    "Which replica a consumer's Fetch is pointed to (KIP-392): `leader` (always the leader) or `rack-aware` "
    "(an in-sync replica in the consumer's `client.rack` when there is one, else the leader). Kafka's class "
    "names `LeaderSelector` and `RackAwareReplicaSelector` are accepted too.",
    _replica_selector,
)
METADATA_URI = SettingSpec(
    "metadata.uri",
    None,
    "`etcd://host:port[,host:port...]/prefix`: the etcd cluster holding brokers, the controller, topics, "
    "assignments, leaders and epochs, under the key prefix (default `tierlog`). `file:///path`: one broker "
    "on the local metadata store persisted in that file. Unset: a cluster of one on the local metadata "
    "store in `<data-dir>/cluster-metadata.json`, no etcd (an old `tierlog-state.json` is imported once; "
    "see [cluster.md](cluster.md#one-broker-a-cluster-of-one)).",
    optional_metadata_uri,
)
DEFAULT_REPLICATION_FACTOR = SettingSpec(
    "default.replication.factor",
    "1",
    "Replicas of each partition of a topic created without `replication_factor`.",
    _int(1, 32767),
)
AUTO_LEADER_REBALANCE_ENABLE = SettingSpec(
    "auto.leader.rebalance.enable",
    "true",
    "The controller moves leadership back to a partition's preferred (first) replica when that replica is "
    "alive and in sync.",
    _bool,
)
LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS = SettingSpec(
    "leader.imbalance.check.interval.seconds",
    "300",
    "How often the controller checks for partitions not led by their preferred replica.",
    _int(1, 2**31 - 1),
)
BROKER_SESSION_TIMEOUT_MS = SettingSpec(
    "broker.session.timeout.ms",
    "9000",
    "TTL of a broker's etcd lease (rounded up to whole seconds). A broker, or the controller, whose lease is "
    "not renewed within it is gone: its registration disappears and another broker may become controller.",
    _int(2000, 2**31 - 1),
)
OFFSETS_TOPIC_NUM_PARTITIONS = SettingSpec(
    "offsets.topic.num.partitions",
    "1",
    "Partitions of `__consumer_offsets` when it is first created (an existing topic keeps its count). A "
    "group's coordinator is the leader of partition `abs(hash(group_id)) % count`, Kafka's rule; in a "
    "cluster, more partitions spread group coordination over brokers. Kafka's default is 50; ours is 1 so a "
    "single broker opens one internal log.",
    _int(1, 1000),
)
BROKER_HEARTBEAT_INTERVAL_MS = SettingSpec(
    "broker.heartbeat.interval.ms",
    "500",
    "How often the lease is renewed; at most half the session timeout. A broker whose lease goes without a "
    "renewal for four intervals (at least 2 s) while a peer finds it unresponsive is fenced before its "
    "session expires (see docs/cluster.md, Failure detection). Kafka's default is 2000.",
    _int(100, 2**31 - 1),
)

REPLICA_LAG_TIME_MAX_MS = SettingSpec(
    "replica.lag.time.max.ms",
    "30000",
    "A follower that has not caught up to the leader's log end offset for this long is removed from the ISR "
    "(through the controller). It rejoins once it has caught up again.",
    _int(1, 2**31 - 1),
)
REPLICA_FETCH_MAX_BYTES = SettingSpec(
    "replica.fetch.max.bytes",
    "1048576",
    "Bytes a follower asks for in one replica fetch; at least one whole batch is always returned.",
    _int(1, 2**31 - 1),
)
REPLICA_FETCH_WAIT_MAX_MS = SettingSpec(
    "replica.fetch.wait.max.ms",
    "500",
    "How long a follower's fetch waits on the leader for new data. Keep it below `replica.lag.time.max.ms`.",
    _int(0, 2**31 - 1),
)
REPLICA_FETCH_BACKOFF_MS = SettingSpec(
    "replica.fetch.backoff.ms",
    "1000",
    "How long a follower waits after a failed fetch before trying again.",
    _int(0, 2**31 - 1),
)
REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = SettingSpec(
    "replica.high.watermark.checkpoint.interval.ms",
    "5000",
    "How often each partition's high watermark is written to its `replication-offset-checkpoint` file.",
    _int(1, 2**31 - 1),
)
PRODUCER_ID_EXPIRATION_MS = SettingSpec(
    "producer.id.expiration.ms",
    "86400000",
    "A partition forgets an idempotent producer id whose last batch's timestamp is this old (design note "
    "0011); its next batch is then accepted at any sequence, as in Kafka.",
    _int(1, 2**31 - 1),
)
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = SettingSpec(
    "producer.id.expiration.check.interval.ms",
    "600000",
    "How often every partition removes expired producer ids.",
    _int(1, 2**31 - 1),
)

PROCESS_TABLE: tuple[SettingSpec[Any], ...] = (
    DATA_DIR,
    HOST,
    PORT,
    ADVERTISED_URL,
    KAFKA_LISTENER,
    KAFKA_ADVERTISED_LISTENER,
    SOCKET_REQUEST_MAX_BYTES,
    CONNECTIONS_MAX_REAUTH_MS,
    REMOTE_URI,
    S3_ENDPOINT_URL,
    REMOTE_UPLOAD_CONCURRENCY,
    REMOTE_UPLOAD_INTERVAL_MS,
    REMOTE_UPLOAD_BATCH_BYTES,
    REMOTE_UPLOAD_BATCH_SEGMENTS,
    REMOTE_UPLOAD_PART_THREADS,
    REMOTE_UPLOAD_FILE_CONCURRENCY,
    REMOTE_UPLOAD_INDEXES_PACKED,
    REMOTE_LOG_READER_THREADS,
    REMOTE_FETCH_READAHEAD_CHUNKS,
    REMOTE_MAX_UPLOAD_INTERVAL_MS,
    REMOTE_LOCAL_DISK_BUDGET_BYTES,
    REMOTE_RETRY_DEADLINE_MS,
    S3_CONNECT_TIMEOUT_MS,
    S3_READ_TIMEOUT_MS,
    REMOTE_CACHE_BYTES,
    REMOTE_RESTORE_ON_START,
    NUM_PARTITIONS,
    AUTO_CREATE_TOPICS_ENABLE,
    MAX_REQUEST_SIZE,
    LOG_RETENTION_CHECK_INTERVAL_MS,
    LOG_FLUSH_SCHEDULER_INTERVAL_MS,
    OFFSETS_RETENTION_MINUTES,
    CONSUMER_INSTANCE_TIMEOUT_MS,
    GROUP_DEFAULT_ASSIGNOR,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    LOGGING_LEVEL,
    CONNECTIONS_MAX_IDLE_MS,
    REQUEST_READ_TIMEOUT_MS,
    MAX_CONNECTIONS,
    *CORS_TABLE,
    ACCEPT_ERROR_LOG_INTERVAL_MS,
    LOG_IO_THREADS,
    REST_PRODUCE_MAX_RECORDS,
    REST_PRODUCE_CONVERSION_MAX_BYTES,
    QUEUED_MAX_REQUEST_BYTES,
)
CLUSTER_TABLE: tuple[SettingSpec[Any], ...] = (
    METADATA_URI,
    BROKER_ID,
    BROKER_RACK,
    REPLICA_SELECTOR_CLASS,
    DEFAULT_REPLICATION_FACTOR,
    AUTO_LEADER_REBALANCE_ENABLE,
    LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS,
    BROKER_SESSION_TIMEOUT_MS,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    BROKER_HEARTBEAT_INTERVAL_MS,
    REPLICA_LAG_TIME_MAX_MS,
    REPLICA_FETCH_MAX_BYTES,
    REPLICA_FETCH_WAIT_MAX_MS,
    REPLICA_FETCH_BACKOFF_MS,
    REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
)
TOPIC_DEFAULTS_TABLE: tuple[SettingSpec[Any], ...] = (
    _topic_default("log.segment.bytes", "segment.bytes"),
    _topic_default("log.roll.ms", "segment.ms"),
    _topic_default("log.index.size.max.bytes", "segment.index.bytes"),
    _topic_default("log.index.interval.bytes", "index.interval.bytes"),
    _topic_default("log.retention.ms", "retention.ms"),
    _topic_default("log.retention.bytes", "retention.bytes"),
    _topic_default("log.local.retention.ms", "local.retention.ms"),
    _topic_default("log.local.retention.bytes", "local.retention.bytes"),
    _topic_default("log.flush.interval.messages", "flush.messages"),
    _topic_default("log.flush.interval.ms", "flush.ms"),
    _topic_default("message.max.bytes", "max.message.bytes"),
    _topic_default("log.message.timestamp.type", "message.timestamp.type"),
    _topic_default("log.cleanup.policy", "cleanup.policy"),
    _topic_default("compression.type", "compression.type"),
    _topic_default("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    _topic_default("min.insync.replicas", "min.insync.replicas"),
    _topic_default("unclean.leader.election.enable", "unclean.leader.election.enable"),
)  # fmt: skip
TABLE: tuple[SettingSpec[Any], ...] = PROCESS_TABLE + CLUSTER_TABLE + TOPIC_DEFAULTS_TABLE + SECURITY_TABLE

SETTINGS_TABLE: dict[str, SettingSpec[Any]] = {spec.name: spec for spec in TABLE}
