"""The broker's own settings (server, network, storage), and the whole broker table.

``BROKER_CONFIGS`` is read from a properties file plus command-line overrides
(``settings.BrokerConfig``); the coordinators' rows are in ``coordinator_keys``.
"""

from __future__ import annotations

from typing import Final

from shoal.broker.config.coordinator_keys import COORDINATOR_KEYS
from shoal.broker.config.keys import (
    AT_LEAST_0,
    AT_LEAST_1,
    BOOL,
    CLEANUP,
    COMPRESSION,
    HIGH,
    HTTP_LISTENERS,
    INT,
    INT_MAX,
    IP_OVERRIDES,
    LIST,
    LISTENERS,
    LONG,
    LONG_MAX,
    LOW,
    MED,
    SHOAL_ONLY,
    STR,
    TIMESTAMP_TYPE,
    Check,
    ConfigDef,
    ConfigKey,
    ListOf,
    OneOf,
    Range,
    protocol_map_problem,
)
from shoal.broker.config.sasl_keys import SASL_KEYS
from shoal.broker.config.ssl_keys import SSL_KEYS

_key = ConfigKey

# The authorizer.class.name that turns ACL authorization on (Kafka's KRaft authorizer).
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _authorizer_problem(value: str) -> str | None:
    if value in ("", STANDARD_AUTHORIZER):
        return None
    return f"Shoal's only authorizer is {STANDARD_AUTHORIZER} (ACLs); leave it empty for no authorization"


def _super_users_problem(value: str) -> str | None:
    for part in value.split(";"):
        kind, sep, name = part.strip().partition(":")
        if part.strip() and not (kind and sep and name):
            return f"{part.strip()!r} is not a principal of the form User:name"
    return None


BROKER_CONFIGS: Final = ConfigDef.of(
    "broker",
    # server and network
    _key(
        "node.id",
        INT,
        1,
        "This broker's id, reported in metadata; unique within a cluster.",
        importance=HIGH,
        validator=AT_LEAST_0,
        kafka_default=-1,
    ),
    _key(
        "listeners",
        LIST,
        ("PLAINTEXT://127.0.0.1:9092",),
        "NAME://host:port addresses to accept connections on; an empty host means all "
        "interfaces, IPv6 hosts go in brackets, port 0 picks a free port. Shoal binds loopback by default.",
        importance=HIGH,
        validator=LISTENERS,
        kafka_default=("PLAINTEXT://:9092",),
    ),
    _key(
        "advertised.listeners",
        LIST,
        None,
        "Addresses given to clients in metadata. Unset: the listeners, with a wildcard host "
        "replaced by this machine's host name.",
        importance=HIGH,
        validator=LISTENERS,
    ),
    _key(
        "listener.security.protocol.map",
        STR,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Which security protocol each listener name speaks.",
        importance=LOW,
        validator=Check(protocol_map_problem, "NAME:PROTOCOL,..."),
    ),
    _key(
        "socket.request.max.bytes",
        INT,
        104857600,
        "Largest request frame accepted; bigger ones close the connection.",
        importance=HIGH,
        validator=AT_LEAST_1,
    ),
    _key(
        "connections.max.idle.ms",
        LONG,
        600000,
        "Connections silent for this long are closed.",
        importance=MED,
    ),
    _key(
        "max.connections",
        INT,
        INT_MAX,
        "Connections the broker holds at once; a connection past it is closed as it is accepted.",
        importance=MED,
        validator=AT_LEAST_0,
    ),
    _key(
        "max.connections.per.ip",
        INT,
        INT_MAX,
        "Connections one IP address may hold; past it, new ones from that address are closed as accepted.",
        importance=MED,
        validator=AT_LEAST_0,
    ),
    _key(
        "max.connections.per.ip.overrides",
        STR,
        "",
        "Per-address exceptions to max.connections.per.ip, as host:count,host:count.",
        importance=MED,
        validator=IP_OVERRIDES,
    ),
    _key(
        "queued.max.requests",
        INT,
        500,
        "Requests read from one connection but not yet answered before Shoal stops reading from it.",
        importance=HIGH,
        validator=AT_LEAST_1,
    ),
    _key(
        "queued.max.request.bytes",
        LONG,
        -1,
        "Bytes of large requests being received at once, over all connections, before Shoal stops "
        "reading from those that need more; -1: no bound. At least socket.request.max.bytes.",
        importance=MED,
    ),
    _key(
        "fetch.max.bytes",
        INT,
        57671680,
        "Upper limit on the bytes one Fetch response carries.",
        validator=Range(1024),
    ),
    _key(
        "max.incremental.fetch.session.cache.slots",
        INT,
        1000,
        "How many incremental fetch sessions the broker keeps at once.",
        validator=AT_LEAST_0,
    ),
    _key(
        "log.level",
        STR,
        "INFO",
        "Python logging level for Shoal's own loggers.",
        importance=LOW,
        validator=OneOf(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), case_insensitive=True),
        dynamic=True,
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "log.format",
        STR,
        "text",
        "How the broker's log lines look: 'text' (one readable line each) or 'json' (one object per "
        "line with time, level, logger, message and any structured fields).",
        importance=LOW,
        validator=OneOf(("text", "json"), case_insensitive=True),
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "shoal.http.listeners",
        LIST,
        ("http://127.0.0.1:9644",),
        "http://host:port addresses of the operations listener (/metrics in Prometheus form, "
        "/health/live, /health/ready); empty turns it off, port 0 picks a free port. Loopback by default.",
        importance=MED,
        validator=HTTP_LISTENERS,
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "metrics.sample.window.ms",
        LONG,
        30000,
        "Length of one sample of the windowed metrics (the event loop's idle fraction on /metrics).",
        importance=LOW,
        validator=AT_LEAST_1,
    ),
    _key(
        "metrics.num.samples",
        INT,
        2,
        "How many samples a windowed metric covers (the current, partial one included).",
        importance=LOW,
        validator=AT_LEAST_1,
    ),
    # storage
    _key(
        "log.dirs",
        LIST,
        ("./shoal-data",),
        "Directories holding partition data (Shoal uses the first).",
        importance=HIGH,
        validator=ListOf(),
        kafka_default=None,
    ),
    _key(
        "log.dir",
        STR,
        None,
        "A single data directory, used only when log.dirs is not set explicitly.",
        importance=HIGH,
        kafka_default="/tmp/kafka-logs",
    ),
    _key("num.partitions", INT, 1, "Partition count for topics created without one.", validator=AT_LEAST_1),
    _key(
        "max.partitions",
        INT,
        100000,
        "Most partitions this broker holds, internal topics included; creating more is refused "
        "(POLICY_VIOLATION), as is creating more than the open-file limit leaves room for.",
        importance=MED,
        validator=AT_LEAST_1,
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "max.partitions.per.request",
        INT,
        10000,
        "Most partitions one CreateTopics or CreatePartitions request may create (POLICY_VIOLATION past it).",
        importance=MED,
        validator=AT_LEAST_1,
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "default.replication.factor",
        INT,
        1,
        "Replication factor for topics created without one.",
        validator=AT_LEAST_1,
    ),
    _key(
        "auto.create.topics.enable",
        BOOL,
        True,
        "Create a topic when a client asks for metadata of a missing one.",
        importance=HIGH,
    ),
    _key(
        "log.segment.bytes",
        INT,
        1073741824,
        "Roll to a new segment file once the active one reaches this size.",
        importance=HIGH,
        validator=Range(14),
        dynamic=True,
    ),
    _key(
        "log.roll.ms",
        LONG,
        None,
        "Roll the active segment once its first record is this old; beats log.roll.hours.",
        importance=HIGH,
        validator=AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.roll.hours",
        INT,
        168,
        "Segment age limit in hours, used when log.roll.ms is unset.",
        importance=HIGH,
        validator=AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.retention.ms",
        LONG,
        None,
        "Delete segments older than this (-1: keep forever); beats log.retention.minutes and .hours.",
        importance=HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.minutes",
        INT,
        None,
        "Retention in minutes, used when log.retention.ms is unset.",
        importance=HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.hours",
        INT,
        168,
        "Retention in hours, used when neither ms nor minutes is set.",
        importance=HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.bytes",
        LONG,
        -1,
        "Delete old segments while a partition is larger than this (-1: no size limit).",
        importance=HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.check.interval.ms",
        LONG,
        300000,
        "How often retention is enforced.",
        validator=AT_LEAST_1,
    ),
    _key(
        "log.flush.interval.messages",
        LONG,
        LONG_MAX,
        "fsync a partition after this many unsynced records.",
        importance=HIGH,
        validator=AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.flush.interval.ms",
        LONG,
        None,
        "fsync unsynced records at least this often. Unset (the "
        "default): Shoal fsyncs a partition before acknowledging any acks=-1 produce instead.",
        importance=HIGH,
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.flush.scheduler.interval.ms",
        LONG,
        LONG_MAX,
        "How often the flusher looks for partitions due a timed fsync.",
        importance=HIGH,
        validator=AT_LEAST_0,
    ),
    _key(
        "log.index.interval.bytes",
        INT,
        4096,
        "Add an offset-index entry every this many log bytes.",
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.index.size.max.bytes",
        INT,
        10485760,
        "Largest size of one offset index file.",
        validator=Range(4),
        dynamic=True,
    ),
    _key(
        "log.cleanup.policy",
        LIST,
        ("delete",),
        "What happens to old segments: delete, compact, or both.",
        validator=CLEANUP,
        dynamic=True,
    ),
    _key(
        "log.cleaner.delete.retention.ms",
        LONG,
        86400000,
        "How long tombstones survive on compacted topics.",
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.cleaner.min.compaction.lag.ms",
        LONG,
        0,
        "Records younger than this are never compacted.",
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.cleaner.max.compaction.lag.ms",
        LONG,
        LONG_MAX,
        "Records older than this are compacted soon.",
        validator=AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.segment.delete.delay.ms",
        LONG,
        60000,
        "Wait before removing a deleted segment's files.",
        importance=HIGH,
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "shoal.legacy.api.versions.enable",
        BOOL,
        True,
        "Serve the request versions Kafka 4 removed (KIP-896: Produce v0-2, Fetch v0-3, ...) as Kafka 3.9 "
        "did; false restores Kafka 4.2's exact version table.",
        importance=MED,
        kafka_default=SHOAL_ONLY,
    ),
    _key(
        "log.message.downconversion.enable",
        BOOL,
        True,
        "Answer Fetch v0-v3 with message sets down-converted to magic 0/1 (false: UNSUPPORTED_VERSION).",
        importance=LOW,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.type",
        STR,
        "CreateTime",
        "Whether stored timestamps come from the producer (CreateTime) or the broker (LogAppendTime).",
        validator=TIMESTAMP_TYPE,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.before.max.ms",
        LONG,
        LONG_MAX,
        "Reject CreateTime records older than now minus this.",
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.after.max.ms",
        LONG,
        3600000,
        "Reject CreateTime records newer than now plus this.",
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "message.max.bytes",
        INT,
        1048588,
        "Largest record batch a partition accepts.",
        importance=HIGH,
        validator=AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "min.insync.replicas",
        INT,
        1,
        "Replicas that must hold a write before acks=-1 succeeds.",
        importance=HIGH,
        validator=AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "compression.type",
        STR,
        "producer",
        "Compression of stored batches; 'producer' keeps the producer's.",
        importance=HIGH,
        validator=COMPRESSION,
        dynamic=True,
    ),
    # authorization (ACLs)
    _key(
        "authorizer.class.name",
        STR,
        "",
        "Empty: no authorization (every request allowed). " + STANDARD_AUTHORIZER + ": ACLs decide.",
        importance=LOW,
        validator=Check(_authorizer_problem, "empty or " + STANDARD_AUTHORIZER),
    ),
    _key(
        "super.users",
        STR,
        "",
        "Principals allowed everything whatever the ACLs say, separated by semicolons (User:admin;User:ops).",
        importance=LOW,
        validator=Check(_super_users_problem, "User:a;User:b"),
    ),
    _key(
        "allow.everyone.if.no.acl.found",
        BOOL,
        False,
        "Allow an operation on a resource that no ACL names at all (else only ACLs allow).",
        importance=LOW,
    ),
    *COORDINATOR_KEYS,
    *SSL_KEYS,
    *SASL_KEYS,
)

# Pairs (a, b) where a must be strictly below b once everything is parsed.
BROKER_LESS_THAN: Final = (
    ("group.share.heartbeat.interval.ms", "group.share.session.timeout.ms"),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms"),
)

# Attribute spellings must not collide (they back BrokerConfig attribute access).
if len({k.attr for k in BROKER_CONFIGS}) != len(BROKER_CONFIGS):
    raise RuntimeError("two broker configs share an attribute spelling")
