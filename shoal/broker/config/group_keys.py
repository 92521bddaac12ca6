"""Per-group settings: each falls back to a broker setting and is bounded by its min/max settings."""

from __future__ import annotations

from typing import Any, Final

from shoal.broker.config.keys import (
    AT_LEAST_1,
    BOOL,
    INT,
    SHOAL_ONLY,
    STR,
    Check,
    ConfigDef,
    ConfigKey,
    ConfigType,
    OneOf,
    Range,
    auto_offset_reset_problem,
    dlq_topic_problem,
)


def _group(name: str, ctype: ConfigType, default: Any, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, dynamic=True, **kw)


_GS = "group.share."
GROUP_CONFIGS: Final = ConfigDef.of(
    "group",
    _group(
        "consumer.session.timeout.ms",
        INT,
        45000,
        "Session timeout for this consumer group.",
        validator=AT_LEAST_1,
        synonym="group.consumer.session.timeout.ms",
        min_key="group.consumer.min.session.timeout.ms",
        max_key="group.consumer.max.session.timeout.ms",
    ),
    _group(
        "consumer.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval for this consumer group.",
        validator=AT_LEAST_1,
        synonym="group.consumer.heartbeat.interval.ms",
        min_key="group.consumer.min.heartbeat.interval.ms",
        max_key="group.consumer.max.heartbeat.interval.ms",
    ),
    _group(
        "share.session.timeout.ms",
        INT,
        45000,
        "Session timeout for this share group.",
        validator=AT_LEAST_1,
        synonym=_GS + "session.timeout.ms",
        min_key=_GS + "min.session.timeout.ms",
        max_key=_GS + "max.session.timeout.ms",
    ),
    _group(
        "share.heartbeat.interval.ms",
        INT,
        5000,
        "Heartbeat interval for this share group.",
        validator=AT_LEAST_1,
        synonym=_GS + "heartbeat.interval.ms",
        min_key=_GS + "min.heartbeat.interval.ms",
        max_key=_GS + "max.heartbeat.interval.ms",
    ),
    _group(
        "share.record.lock.duration.ms",
        INT,
        30000,
        "Acquisition lock duration for this share group.",
        validator=Range(1000),
        synonym=_GS + "record.lock.duration.ms",
        min_key=_GS + "min.record.lock.duration.ms",
        max_key=_GS + "max.record.lock.duration.ms",
    ),
    _group(
        "share.delivery.count.limit",
        INT,
        5,
        "Deliveries before a record is archived, for this group.",
        validator=Range(2),  # Kafka's GroupConfig: atLeast(2)
        synonym=_GS + "delivery.count.limit",
        min_key=_GS + "min.delivery.count.limit",
        max_key=_GS + "max.delivery.count.limit",
    ),
    _group(
        "share.partition.max.record.locks",
        INT,
        2000,
        "In-flight record limit per share partition.",
        validator=Range(100),  # Kafka's GroupConfig: atLeast(100)
        synonym=_GS + "partition.max.record.locks",
        min_key=_GS + "min.partition.max.record.locks",
        max_key=_GS + "max.partition.max.record.locks",
    ),
    _group(
        "share.assignment.interval.ms",
        INT,
        1000,
        "Least time between two target-assignment computations of this share group.",
        validator=Range(0),  # Kafka's GroupConfig: atLeast(0)
        synonym=_GS + "assignment.interval.ms",
        min_key=_GS + "min.assignment.interval.ms",
        max_key=_GS + "max.assignment.interval.ms",
    ),
    _group(
        "share.auto.offset.reset",
        STR,
        "latest",
        "Where a share partition starts with no state: latest, "
        "earliest, or by_duration:<ISO-8601 duration> back from now.",
        validator=Check(auto_offset_reset_problem, "[latest, earliest, by_duration:PnDTnHnMn.nS]"),
    ),
    _group(
        "share.isolation.level",
        STR,
        "read_uncommitted",
        "read_committed hides aborted transactional records from the group.",
        validator=OneOf(("read_committed", "read_uncommitted")),
    ),
    # Kafka's GroupConfig default is true (KIP-1222/KIP-1240); false answers RENEW with INVALID_RECORD_STATE.
    _group("share.renew.acknowledge.enable", BOOL, True, "Whether members may RENEW acquisition locks."),
    _group(
        "errors.deadletterqueue.topic.name",
        STR,
        "",
        "Dead-letter topic for this share group; empty means none.",
        validator=Check(dlq_topic_problem, "a topic name or empty"),
    ),
    _group(
        "errors.deadletterqueue.copy.record.enable",
        BOOL,
        False,
        "Copy the original record into the dead-letter topic, not just its context headers.",
    ),
    # Beyond Kafka (shoal/broker/share/backoff.py, key_order.py): queue features, off by default.
    _group(
        "shoal.share.redelivery.backoff.ms",
        INT,
        0,
        "Wait before a released or timed-out record of this share group may be delivered again, "
        "after its first failed delivery; 0 (Kafka's behaviour) redelivers at once.",
        validator=Range(0, 3_600_000),
        kafka_default=SHOAL_ONLY,
    ),
    _group(
        "shoal.share.redelivery.backoff.max.ms",
        INT,
        60000,
        "Longest redelivery back-off, however often a record failed.",
        validator=Range(0, 86_400_000),
        kafka_default=SHOAL_ONLY,
    ),
    _group(
        "shoal.share.redelivery.backoff.multiplier",
        ConfigType.DOUBLE,
        2.0,
        "Growth of the redelivery back-off per failed delivery: min(max, base * multiplier^(deliveries - 1)).",
        validator=Range(1.0, 100.0),
        kafka_default=SHOAL_ONLY,
    ),
    _group(
        "shoal.share.key.ordering",
        BOOL,
        False,
        "At most one record per key per partition in flight across the group's members, each key's records "
        "delivered in offset order (a released record before its key's later ones); null keys unaffected.",
        kafka_default=SHOAL_ONLY,
    ),
)

GROUP_LESS_THAN: Final = (
    ("share.heartbeat.interval.ms", "share.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"),
)
