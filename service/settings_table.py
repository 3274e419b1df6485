"""The table of broker settings: every name, its default, its one-line meaning and its parser.

:mod:`tierlog.service.config` resolves them (flags, environment, TOML file) into one
:class:`~tierlog.service.config.Settings`; the CLI builds its flags and the docs test its rows from here.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tierlog.service.security.settings import SECURITY_TABLE
from tierlog.service.setting_spec import SettingSpec, parse_url
from tierlog.service.setting_spec import bool_value as _bool
from tierlog.service.setting_spec import int_range as _int
from tierlog.service.setting_spec import path_value as _path
from tierlog.service.setting_spec import text_value as _text
from tierlog.service.topic_configs import TOPIC_CONFIGS
from tierlog.wire.errors import InvalidRequestError

__all__ = ["ENV_PREFIX", "SETTINGS_TABLE", "TABLE", "SettingSpec", "env_name", "flag_name", "parse_url"]

T = TypeVar("T")

ENV_PREFIX = "TIERLOG_"
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _assignor(raw: str) -> str:
    if raw not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        raise ValueError("expected range, roundrobin, sticky or cooperative-sticky")
    return raw


def _level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return value


def _topic_default(topic_config: str, broker_name: str, doc: str) -> SettingSpec[str]:
    spec = TOPIC_CONFIGS[topic_config]

    def parse(raw: str) -> str:
        try:
            return spec.parse(broker_name, raw)
        except InvalidRequestError as err:
            raise ValueError(err.message.split(": ", 1)[-1]) from None

    return SettingSpec(broker_name, spec.default, doc, parse, topic_config)


DATA_DIR = SettingSpec(
    "data.dir", "./data", "directory holding the partition logs and the broker state", _path
)
HOST = SettingSpec("host", "127.0.0.1", "address the HTTP server binds", _text)
PORT = SettingSpec("port", "8082", "TCP port of the HTTP server (0 picks a free one)", _int(0, 65535))
ADVERTISED_URL = SettingSpec(
    "advertised.url", None, "base URL of v3 `metadata.self` links (default http://host:port)", parse_url
)
REMOTE_URI = SettingSpec(
    "remote.uri",
    None,
    "remote tier: a local directory (default <data.dir>/remote) or s3://bucket/prefix",
    _text,
)
S3_ENDPOINT_URL = SettingSpec(
    "s3.endpoint.url", None, "S3 endpoint for s3:// remote URIs (default $AWS_ENDPOINT_URL)", parse_url
)
REMOTE_UPLOAD_CONCURRENCY = SettingSpec(
    "remote.upload.concurrency",
    "4",
    "partitions uploading to the remote tier at the same time",
    _int(1, 1024),
)
REMOTE_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.upload.interval.ms",
    "10000",
    "how often the uploader looks for sealed segments besides when a segment rolls",
    _int(1, 2**31 - 1),
)
REMOTE_MAX_UPLOAD_INTERVAL_MS = SettingSpec(
    "remote.max.upload.interval.ms",
    "3600000",
    "roll an active segment whose oldest unuploaded data is this old (-1 never)",
    _int(-1, 2**63 - 1),
)
REMOTE_LOCAL_DISK_BUDGET_BYTES = SettingSpec(
    "remote.local.disk.budget.bytes",
    "-1",
    "refuse produce (503) to remote topics past this many local bytes while uploads are behind; -1 unlimited",
    _int(-1, 2**63 - 1),
)
REMOTE_RETRY_DEADLINE_MS = SettingSpec(
    "remote.retry.deadline.ms",
    "30000",
    "how long one object-store request is retried (capped, jittered backoff) before it fails",
    _int(0, 2**31 - 1),
)
S3_CONNECT_TIMEOUT_MS = SettingSpec(
    "s3.connect.timeout.ms",
    "10000",
    "how long one attempt waits for a TCP connection to the S3 endpoint",
    _int(1, 2**31 - 1),
)
S3_READ_TIMEOUT_MS = SettingSpec(
    "s3.read.timeout.ms",
    "30000",
    "how long one attempt waits for the next bytes of an S3 response",
    _int(1, 2**31 - 1),
)
REMOTE_CACHE_BYTES = SettingSpec(
    "remote.cache.bytes", "268435456", "memory for cached chunks of remote segments", _int(0, 2**63 - 1)
)
REMOTE_LOG_READER_THREADS = SettingSpec(
    "remote.log.reader.threads",
    "8",
    "worker threads for ranged GETs of remote segments (S3), apart from log I/O and the event loop",
    _int(1, 1024),
)
REMOTE_UPLOAD_PART_THREADS = SettingSpec(
    "remote.upload.part.threads",
    "8",
    "worker threads sending multipart upload parts (S3): the parts in flight, and in memory, at once",
    _int(1, 1024),
)
REMOTE_FETCH_READAHEAD_CHUNKS = SettingSpec(
    "remote.fetch.readahead.chunks",
    "4",
    "chunks of a remote segment fetched ahead of a sequential reader (ranged GETs in flight per stream)",
    _int(0, 64),
)
REMOTE_UPLOAD_BATCH_BYTES = SettingSpec(
    "remote.upload.batch.bytes",
    "67108864",
    "consecutive sealed segments of a partition uploaded together, up to this many bytes, under two "
    "manifest commits",
    _int(1, 2**63 - 1),
)
REMOTE_UPLOAD_BATCH_SEGMENTS = SettingSpec(
    "remote.upload.batch.segments",
    "32",
    "most sealed segments in one upload batch",
    _int(1, 4096),
)
REMOTE_UPLOAD_FILE_CONCURRENCY = SettingSpec(
    "remote.upload.file.concurrency",
    "4",
    "files of one partition's upload batch put to the object store at the same time",
    _int(1, 256),
)
REMOTE_UPLOAD_INDEXES_PACKED = SettingSpec(
    "remote.upload.indexes.packed",
    "true",
    "upload a segment's offset and time index as one .indexes object (false: separate .index and "
    ".timeindex objects, which brokers and Spark jobs of older releases read without scanning)",
    _bool,
)
REMOTE_RESTORE_ON_START = SettingSpec(
    "remote.restore.on.start",
    "false",
    "at start, recreate topics found in the remote tier that this broker does not have",
    _bool,
)
NUM_PARTITIONS = SettingSpec(
    "num.partitions", "1", "partitions of a topic created without a count", _int(1, 100_000)
)
AUTO_CREATE_TOPICS_ENABLE = SettingSpec(
    "auto.create.topics.enable", "true", "create a topic on first produce", _bool
)
MAX_REQUEST_SIZE = SettingSpec(
    "max.request.size", "10485760", "largest HTTP request body in bytes", _int(1024, 2**31 - 1)
)
LOG_RETENTION_CHECK_INTERVAL_MS = SettingSpec(
    "log.retention.check.interval.ms",
    "300000",
    "how often retention runs over every partition",
    _int(1, 2**63 - 1),
)
LOG_FLUSH_SCHEDULER_INTERVAL_MS = SettingSpec(
    "log.flush.scheduler.interval.ms",
    "1000",
    "how often flush.ms and segment.ms are checked",
    _int(1, 2**63 - 1),
)
OFFSETS_RETENTION_MINUTES = SettingSpec(
    "offsets.retention.minutes",
    "10080",
    "keep a memberless group's committed offsets this long",
    _int(1, 2**31 - 1),
)
CONSUMER_INSTANCE_TIMEOUT_MS = SettingSpec(
    "consumer.instance.timeout.ms",
    "300000",
    "delete a REST consumer instance unused this long",
    _int(1000, 2**31 - 1),
)
GROUP_DEFAULT_ASSIGNOR = SettingSpec(
    "group.default.assignor",
    "range",
    "assignment strategy of groups whose members ask for none (range, roundrobin, sticky)",
    _assignor,
)
LOGGING_LEVEL = SettingSpec(
    "logging.level", "INFO", "DEBUG, INFO, WARNING or ERROR (log lines go to stderr)", _level
)
CONNECTIONS_MAX_IDLE_MS = SettingSpec(
    "connections.max.idle.ms",
    "600000",
    "close a client connection that has no request in progress for this long",
    _int(100, 2**31 - 1),
)
REQUEST_READ_TIMEOUT_MS = SettingSpec(
    "request.read.timeout.ms",
    "30000",
    "close a connection whose request headers and body are not all received this long after its first byte",
    _int(100, 2**31 - 1),
)
MAX_CONNECTIONS = SettingSpec(
    "max.connections",
    "512",
    "most client connections open at once; more are answered 503 (50301) and closed. Keep it well "
    "below the process's file descriptor limit, which segments share",
    _int(1, 2**20),
)
REST_PRODUCE_MAX_RECORDS = SettingSpec(
    "rest.produce.max.records",
    "100000",
    "most records in one REST produce request; more are refused with 422 before any batch is built",
    _int(1, 2**31 - 1),
)
REST_PRODUCE_CONVERSION_MAX_BYTES = SettingSpec(
    "rest.produce.conversion.max.bytes",
    "16777216",
    "bytes of REST JSON produce bodies converted to batches at once; a body that does not fit is "
    "answered 503 (50301, retriable)",
    _int(1, 2**63 - 1),
)
QUEUED_MAX_REQUEST_BYTES = SettingSpec(
    "queued.max.request.bytes",
    "67108864",
    "bytes of acks=0 native produce bodies waiting for their background append; a body that does not "
    "fit is answered 503 (50301, retriable)",
    _int(1, 2**63 - 1),
)
LOG_IO_THREADS = SettingSpec(
    "log.io.threads",
    "8",
    "worker threads for partition log I/O (appends, local reads, flushes, retention), apart from other work",
    _int(1, 1024),
)
ACCEPT_ERROR_LOG_INTERVAL_MS = SettingSpec(
    "accept.error.log.interval.ms",
    "10000",
    "log failures to accept a connection (EMFILE, ENFILE) at most once per this interval",
    _int(1, 2**31 - 1),
)

BROKER_ID = SettingSpec(
    "broker.id", "0", "this broker's id in its cluster (unique per broker)", _int(0, 2**31 - 1)
)
BROKER_RACK = SettingSpec(
    "broker.rack", None, "rack (or zone) of this broker; replicas of a partition spread over racks", _text
)
METADATA_URI = SettingSpec(
    "metadata.uri",
    None,
    "cluster metadata store: etcd://host:port[,host:port...]/prefix; unset runs one broker on local metadata",
    _text,
)
DEFAULT_REPLICATION_FACTOR = SettingSpec(
    "default.replication.factor",
    "1",
    "replicas of each partition of a topic created without replication_factor",
    _int(1, 32767),
)
AUTO_LEADER_REBALANCE_ENABLE = SettingSpec(
    "auto.leader.rebalance.enable",
    "true",
    "the controller moves leadership back to each partition's preferred (first) replica when it can",
    _bool,
)
LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS = SettingSpec(
    "leader.imbalance.check.interval.seconds",
    "300",
    "how often the controller looks for partitions not led by their preferred replica",
    _int(1, 2**31 - 1),
)
BROKER_SESSION_TIMEOUT_MS = SettingSpec(
    "broker.session.timeout.ms",
    "9000",
    "a broker (and the controller) whose metadata-store lease is not renewed for this long is gone",
    _int(2000, 2**31 - 1),
)
OFFSETS_TOPIC_NUM_PARTITIONS = SettingSpec(
    "offsets.topic.num.partitions",
    "1",
    "partitions of __consumer_offsets when it is created; a group's coordinator leads partition "
    "hash(group) % count (Kafka's default is 50)",
    _int(1, 1000),
)
BROKER_HEARTBEAT_INTERVAL_MS = SettingSpec(
    "broker.heartbeat.interval.ms",
    "2000",
    "how often a broker renews its metadata-store lease",
    _int(100, 2**31 - 1),
)

REPLICA_LAG_TIME_MAX_MS = SettingSpec(
    "replica.lag.time.max.ms",
    "30000",
    "a follower that has not caught up to the leader's log end for this long leaves the ISR",
    _int(1, 2**31 - 1),
)
REPLICA_FETCH_MAX_BYTES = SettingSpec(
    "replica.fetch.max.bytes",
    "1048576",
    "bytes a follower asks for per replica fetch (at least one batch is always returned)",
    _int(1, 2**31 - 1),
)
REPLICA_FETCH_WAIT_MAX_MS = SettingSpec(
    "replica.fetch.wait.max.ms",
    "500",
    "how long a follower's fetch waits on the leader for new data; keep it below replica.lag.time.max.ms",
    _int(0, 2**31 - 1),
)
REPLICA_FETCH_BACKOFF_MS = SettingSpec(
    "replica.fetch.backoff.ms",
    "1000",
    "how long a follower waits before fetching again after an error",
    _int(0, 2**31 - 1),
)
REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = SettingSpec(
    "replica.high.watermark.checkpoint.interval.ms",
    "5000",
    "how often each partition's high watermark is written to its replication-offset-checkpoint file",
    _int(1, 2**31 - 1),
)
PRODUCER_ID_EXPIRATION_MS = SettingSpec(
    "producer.id.expiration.ms",
    "86400000",
    "a partition forgets an idempotent producer id whose last batch is older than this (batch timestamps)",
    _int(1, 2**31 - 1),
)
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = SettingSpec(
    "producer.id.expiration.check.interval.ms",
    "600000",
    "how often each partition removes expired producer ids",
    _int(1, 2**31 - 1),
)

TABLE: tuple[SettingSpec[Any], ...] = (
    DATA_DIR,
    HOST,
    PORT,
    ADVERTISED_URL,
    REMOTE_URI,
    S3_ENDPOINT_URL,
    REMOTE_UPLOAD_CONCURRENCY,
    REMOTE_UPLOAD_INTERVAL_MS,
    REMOTE_MAX_UPLOAD_INTERVAL_MS,
    REMOTE_LOCAL_DISK_BUDGET_BYTES,
    REMOTE_RETRY_DEADLINE_MS,
    S3_CONNECT_TIMEOUT_MS,
    S3_READ_TIMEOUT_MS,
    REMOTE_CACHE_BYTES,
    REMOTE_RESTORE_ON_START,
    REMOTE_FETCH_READAHEAD_CHUNKS,
    REMOTE_LOG_READER_THREADS,
    REMOTE_UPLOAD_PART_THREADS,
    REMOTE_UPLOAD_BATCH_BYTES,
    REMOTE_UPLOAD_BATCH_SEGMENTS,
    REMOTE_UPLOAD_FILE_CONCURRENCY,
    REMOTE_UPLOAD_INDEXES_PACKED,
    NUM_PARTITIONS,
    AUTO_CREATE_TOPICS_ENABLE,
    MAX_REQUEST_SIZE,
    LOG_RETENTION_CHECK_INTERVAL_MS,
    LOG_FLUSH_SCHEDULER_INTERVAL_MS,
    OFFSETS_RETENTION_MINUTES,
    CONSUMER_INSTANCE_TIMEOUT_MS,
    GROUP_DEFAULT_ASSIGNOR,
    LOGGING_LEVEL,
    CONNECTIONS_MAX_IDLE_MS,
    REQUEST_READ_TIMEOUT_MS,
    MAX_CONNECTIONS,
    ACCEPT_ERROR_LOG_INTERVAL_MS,
    LOG_IO_THREADS,
    REST_PRODUCE_MAX_RECORDS,
    REST_PRODUCE_CONVERSION_MAX_BYTES,
    QUEUED_MAX_REQUEST_BYTES,
    BROKER_ID,
    BROKER_RACK,
    METADATA_URI,
    DEFAULT_REPLICATION_FACTOR,
    AUTO_LEADER_REBALANCE_ENABLE,
    LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS,
    BROKER_SESSION_TIMEOUT_MS,
    BROKER_HEARTBEAT_INTERVAL_MS,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    REPLICA_LAG_TIME_MAX_MS,
    REPLICA_FETCH_MAX_BYTES,
    REPLICA_FETCH_WAIT_MAX_MS,
    REPLICA_FETCH_BACKOFF_MS,
    REPLICA_HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    _topic_default("min.insync.replicas", "min.insync.replicas", "default min.insync.replicas"),
    _topic_default("unclean.leader.election.enable", "unclean.leader.election.enable", "default unclean"),
    _topic_default("segment.bytes", "log.segment.bytes", "default segment.bytes"),
    _topic_default("segment.ms", "log.roll.ms", "default segment.ms"),
    _topic_default("segment.index.bytes", "log.index.size.max.bytes", "default segment.index.bytes"),
    _topic_default("index.interval.bytes", "log.index.interval.bytes", "default index.interval.bytes"),
    _topic_default("retention.ms", "log.retention.ms", "default retention.ms"),
    _topic_default("retention.bytes", "log.retention.bytes", "default retention.bytes"),
    _topic_default("local.retention.ms", "log.local.retention.ms", "default local.retention.ms"),
    _topic_default("local.retention.bytes", "log.local.retention.bytes", "default local.retention.bytes"),
    _topic_default("flush.messages", "log.flush.interval.messages", "default flush.messages"),
    _topic_default("flush.ms", "log.flush.interval.ms", "default flush.ms"),
    _topic_default("max.message.bytes", "message.max.bytes", "default max.message.bytes"),
    _topic_default("message.timestamp.type", "log.message.timestamp.type", "default message.timestamp.type"),
    _topic_default("cleanup.policy", "log.cleanup.policy", "default cleanup.policy"),
    _topic_default("compression.type", "compression.type", "default compression.type"),
    _topic_default("file.delete.delay.ms", "log.segment.delete.delay.ms", "default file.delete.delay.ms"),
)  # fmt: skip
TABLE += SECURITY_TABLE

SETTINGS_TABLE: dict[str, SettingSpec[Any]] = {spec.name: spec for spec in TABLE}


def flag_name(name: str) -> str:
    """``log.segment.bytes`` -> ``--log-segment-bytes``. Pure."""
    return "--" + name.replace(".", "-")


def env_name(name: str) -> str:
    """``log.segment.bytes`` -> ``TIERLOG_LOG_SEGMENT_BYTES``. Pure."""
    return ENV_PREFIX + name.replace(".", "_").upper()
