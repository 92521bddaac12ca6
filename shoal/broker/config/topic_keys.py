"""Per-topic settings: each overrides the broker setting it names as its synonym (Kafka's rule)."""

from __future__ import annotations

from typing import Any, Final

from shoal.broker.config.keys import (
    AT_LEAST_0,
    AT_LEAST_1,
    BOOL,
    CLEANUP,
    COMPRESSION,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    STR,
    TIMESTAMP_TYPE,
    ConfigDef,
    ConfigKey,
    ConfigType,
    Range,
)


def _topic(name: str, ctype: ConfigType, default: Any, synonym: str, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, synonym=synonym, dynamic=True, **kw)


TOPIC_CONFIGS: Final = ConfigDef.of(
    "topic",
    _topic(
        "cleanup.policy",
        LIST,
        ("delete",),
        "log.cleanup.policy",
        "delete, compact, or both.",
        validator=CLEANUP,
    ),
    _topic(
        "compression.type",
        STR,
        "producer",
        "compression.type",
        "Compression of stored batches.",
        validator=COMPRESSION,
    ),
    _topic(
        "delete.retention.ms",
        LONG,
        86400000,
        "log.cleaner.delete.retention.ms",
        "How long tombstones survive compaction.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "file.delete.delay.ms",
        LONG,
        60000,
        "log.segment.delete.delay.ms",
        "Wait before removing a deleted segment's files.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "flush.messages",
        LONG,
        LONG_MAX,
        "log.flush.interval.messages",
        "fsync after this many unsynced records.",
        validator=AT_LEAST_1,
    ),
    _topic(
        "flush.ms",
        LONG,
        LONG_MAX,
        "log.flush.interval.ms",
        "fsync at least this often; unset everywhere means fsync before acks=-1 answers.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "index.interval.bytes",
        INT,
        4096,
        "log.index.interval.bytes",
        "Offset-index entry every this many bytes.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "max.compaction.lag.ms",
        LONG,
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "Compact records once they are this old.",
        validator=AT_LEAST_1,
        min_key="min.compaction.lag.ms",
    ),
    _topic(
        "max.message.bytes",
        INT,
        1048588,
        "message.max.bytes",
        "Largest record batch accepted.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "message.timestamp.after.max.ms",
        LONG,
        3600000,
        "log.message.timestamp.after.max.ms",
        "Reject CreateTime records this far in the future.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "message.downconversion.enable",
        BOOL,
        True,
        "log.message.downconversion.enable",
        "Down-convert stored batches for Fetch v0-v3 (else those fetches get UNSUPPORTED_VERSION).",
    ),
    _topic(
        "message.timestamp.before.max.ms",
        LONG,
        LONG_MAX,
        "log.message.timestamp.before.max.ms",
        "Reject CreateTime records this far in the past.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "message.timestamp.type",
        STR,
        "CreateTime",
        "log.message.timestamp.type",
        "CreateTime or LogAppendTime.",
        validator=TIMESTAMP_TYPE,
    ),
    _topic(
        "min.compaction.lag.ms",
        LONG,
        0,
        "log.cleaner.min.compaction.lag.ms",
        "Never compact records younger than this.",
        validator=AT_LEAST_0,
    ),
    _topic(
        "min.insync.replicas",
        INT,
        1,
        "min.insync.replicas",
        "Replicas needed before acks=-1 succeeds.",
        validator=AT_LEAST_1,
    ),
    _topic(
        "retention.bytes",
        LONG,
        -1,
        "log.retention.bytes",
        "Size limit per partition (-1: none).",
        validator=Range(-1),
    ),
    _topic(
        "retention.ms",
        LONG,
        604800000,
        "log.retention.ms",
        "Age limit of segments (-1: none).",
        validator=Range(-1),
    ),
    _topic(
        "segment.bytes",
        INT,
        1073741824,
        "log.segment.bytes",
        "Roll segments at this size.",
        validator=Range(14),
    ),
    _topic(
        "segment.index.bytes",
        INT,
        10485760,
        "log.index.size.max.bytes",
        "Largest offset index file.",
        validator=Range(4),
    ),
    _topic("segment.ms", LONG, 604800000, "log.roll.ms", "Roll segments at this age.", validator=AT_LEAST_1),
    # KIP-1191: a topic serves as a share group's dead-letter topic only when its owner says so
    # (no broker setting stands behind it).
    ConfigKey(
        "errors.deadletterqueue.group.enable",
        BOOL,
        False,
        "Whether share groups may write dead-letter records to this topic.",
        dynamic=True,
    ),
)
