"""Tests for broker.config and broker.configdefs.

Expected numbers below are written out by hand from Kafka's documented
defaults, not read back from the tables, so a wrong row fails a test.
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from shoal.broker.config.keys import SAME_AS_KAFKA, SHOAL_ONLY, render_value
from shoal.broker.config.settings import (
    BROKER_CONFIGS,
    GROUP_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    describe_group_configs,
    describe_topic_configs,
    parse_iso8601_duration,
    parse_listener,
    parse_overrides,
    parse_properties,
    parse_share_auto_offset_reset,
    resolve_group_configs,
    resolve_topic_configs,
    validate_group_configs,
    validate_topic_configs,
)

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


def cfg(**values: object) -> BrokerConfig:
    """A config from a 'file' whose keys are given with underscores for dots."""
    return BrokerConfig.from_sources({k.replace("_", "."): v for k, v in values.items()})


def raises(key: str):
    """pytest.raises for a ConfigError that names ``key``."""
    return pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: ")


# --- defaults -----------------------------------------------------------------------

KAFKA_BROKER_DEFAULTS = {
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "log.segment.bytes": 1073741824,
    "log.roll.ms": None,
    "log.roll.hours": 168,
    "log.retention.ms": None,
    "log.retention.minutes": None,
    "log.retention.hours": 168,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.flush.interval.messages": LONG_MAX,
    "log.flush.interval.ms": None,
    "log.flush.scheduler.interval.ms": LONG_MAX,
    "log.index.interval.bytes": 4096,
    "log.index.size.max.bytes": 10485760,
    "log.cleanup.policy": ("delete",),
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.after.max.ms": 3600000,
    "log.cleaner.delete.retention.ms": 86400000,
    "message.max.bytes": 1048588,
    "socket.request.max.bytes": 104857600,
    "connections.max.idle.ms": 600000,
    "queued.max.requests": 500,
    "compression.type": "producer",
    "min.insync.replicas": 1,
    "offsets.topic.num.partitions": 50,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offsets.commit.timeout.ms": 5000,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.load.buffer.size": 5242880,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": INT_MAX,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2000,
    "group.share.max.size": 200,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000,
    "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.session.timeout.ms": 45000,
    "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000,
    "group.share.max.share.sessions": 2000,
    "group.share.initialize.retry.interval.ms": 30000,
    "group.share.assignors": ("simple",),
    "share.coordinator.state.topic.num.partitions": 50,
    "share.coordinator.snapshot.update.records.per.snapshot": 500,
    "share.coordinator.state.topic.segment.bytes": 104857600,
    "transactional.id.expiration.ms": 604800000,
    "producer.id.expiration.ms": 86400000,
    "max.incremental.fetch.session.cache.slots": 1000,
    "fetch.max.bytes": 57671680,
    "metrics.sample.window.ms": 30000,
    "metrics.num.samples": 2,
    "log.message.downconversion.enable": True,  # Kafka 3.x (removed in 4.0 with down-conversion)
}


@pytest.mark.parametrize("name", sorted(KAFKA_BROKER_DEFAULTS))
def test_broker_defaults_match_kafka(name: str) -> None:
    c = BrokerConfig.defaults()
    assert c.get(name) == KAFKA_BROKER_DEFAULTS[name]
    assert BROKER_CONFIGS[name].kafka_default is SAME_AS_KAFKA
    assert c.source(name) is ConfigSource.DEFAULT


def test_shoal_specific_defaults() -> None:
    c = BrokerConfig.defaults()
    assert c.listeners == ("PLAINTEXT://127.0.0.1:9092",)
    assert c.listener_host_port() == ("127.0.0.1", 9092)
    assert c.advertised_host_port() == ("127.0.0.1", 9092)
    assert c.node_id == 1
    assert c.data_dir == "./shoal-data"
    assert c.log_level == "INFO"
    assert c.group_coordinator_rebalance_protocols == ("classic", "consumer", "share")
    assert c.share_groups_enabled


def test_divergences_from_kafka_are_exactly_the_intended_ones() -> None:
    diverging = {k.name for k in BROKER_CONFIGS if k.kafka_default is not SAME_AS_KAFKA}
    assert diverging == {
        "node.id",
        "listeners",
        "log.dirs",
        "log.dir",
        "log.level",
        "log.format",
        "shoal.http.listeners",
        "shoal.legacy.api.versions.enable",
        "max.partitions",
        "max.partitions.per.request",
        "group.share.enable",
        "group.coordinator.rebalance.protocols",
        "offsets.topic.replication.factor",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "ssl.keystore.type",  # PEM: Shoal reads no JKS
        "ssl.truststore.type",
        "sasl.enabled.mechanisms",
    }
    assert BROKER_CONFIGS["log.level"].kafka_default is SHOAL_ONLY
    for k in BROKER_CONFIGS:
        if k.kafka_default not in (SAME_AS_KAFKA, SHOAL_ONLY):
            assert k.kafka_default != k.default, k.name


@pytest.mark.parametrize("table", [BROKER_CONFIGS, TOPIC_CONFIGS, GROUP_CONFIGS], ids=lambda t: t.scope)
def test_every_row_is_complete(table) -> None:
    for k in table:
        assert k.doc and k.doc[-1] in ".)", k.name
        assert k.parse(render_value(k.default)) == k.default, k.name  # defaults round-trip as text
        for ref in (k.min_key, k.max_key, k.synonym):
            if ref is not None:
                assert ref in (BROKER_CONFIGS if table is GROUP_CONFIGS or k.synonym == ref else table), ref


def test_topic_defaults_equal_kafka() -> None:
    d = TOPIC_CONFIGS.defaults()
    assert d["retention.ms"] == 604800000
    assert d["segment.ms"] == 604800000
    assert d["segment.bytes"] == 1073741824
    assert d["max.message.bytes"] == 1048588
    assert d["cleanup.policy"] == ("delete",)
    assert d["flush.messages"] == LONG_MAX
    assert d["delete.retention.ms"] == 86400000
    assert d["file.delete.delay.ms"] == 60000
    # a broker at defaults hands topics the same values
    assert BrokerConfig.defaults().topic_defaults() == d


def test_group_defaults() -> None:
    d = BrokerConfig.defaults().group_defaults()
    assert d["share.auto.offset.reset"] == "latest"
    assert d["share.isolation.level"] == "read_uncommitted"
    assert d["share.record.lock.duration.ms"] == 30000
    assert d["share.renew.acknowledge.enable"] is True
    assert d["errors.deadletterqueue.topic.name"] == ""
    assert d["errors.deadletterqueue.copy.record.enable"] is False


# --- .properties ---------------------------------------------------------------------


def test_properties_comments_and_separators() -> None:
    text = (
        "# a comment\n   ! another comment\n\na=1\nb : 2\nc    3\n  d=  spaced value  \ne\nf:=x\ng = = y\nh\t\t:\tz\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "",
        "f": "=x",
        "g": "= y",
        "h": "z",
    }


def test_properties_continuations() -> None:
    text = "list = a,\\\n        b,\\\n   c\nnext=1\n"
    assert parse_properties(text) == {"list": "a,b,c", "next": "1"}
    # an even number of backslashes is an escaped backslash, not a continuation
    assert parse_properties("p=c:\\\\\nq=2") == {"p": "c:\\", "q": "2"}
    # a continued line starting with '#' is data, not a comment
    assert parse_properties("k=v\\\n#x") == {"k": "v#x"}
    # a comment ending in a backslash does not swallow the next line
    assert parse_properties("# note \\\nk=v") == {"k": "v"}
    # a backslash right at the end of the text is dropped
    assert parse_properties("k=v\\") == {"k": "v"}
    # a continuation followed by a blank line ends the entry
    assert parse_properties("k=v\\\n\nz=1") == {"k": "v", "z": "1"}


def test_properties_escapes_and_line_endings() -> None:
    text = "tab=a\\tb\r\nnl=a\\nb\runi=\\u0041\\u00e9\nkey\\ with\\=odd\\:chars = ok\nx=\\q\\#"
    assert parse_properties(text) == {
        "tab": "a\tb",
        "nl": "a\nb",
        "uni": "A\u00e9",
        "key with=odd:chars": "ok",
        "x": "q#",
    }


def test_properties_duplicate_key_last_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


def test_properties_bad_unicode_escape() -> None:
    with pytest.raises(ConfigError, match="uXXXX"):
        parse_properties("a=\\u12G4")


def test_properties_file_feeds_broker_config(tmp_path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# Shoal\nnum.partitions = 3\nlog.dirs=/data/a,\\\n    /data/b\n", encoding="utf-8")
    c = BrokerConfig.load(path, ["num.partitions=4"])
    assert c.num_partitions == 4
    assert c.data_dirs == ("/data/a", "/data/b")
    assert c.source("log.dirs") is ConfigSource.FILE
    assert c.source("num.partitions") is ConfigSource.OVERRIDE


# --- sources and errors --------------------------------------------------------------


def test_override_beats_file() -> None:
    c = BrokerConfig.from_sources(
        {"log.segment.bytes": "1000", "num.partitions": "2"}, ["log.segment.bytes=2000", "log.segment.bytes = 3000"]
    )
    assert c.get("log.segment.bytes") == 3000
    assert c.log_segment_bytes == 3000
    assert c.source("log.segment.bytes") is ConfigSource.OVERRIDE
    assert c.num_partitions == 2
    assert c.source("num.partitions") is ConfigSource.FILE
    assert c.source("message.max.bytes") is ConfigSource.DEFAULT


def test_unknown_key() -> None:
    with raises("no.such.setting"):
        BrokerConfig.from_sources({"no.such.setting": "1"})
    with raises("typo.override"):
        BrokerConfig.from_sources({}, ["typo.override=1"])
    with raises("nope"):
        BrokerConfig.defaults().get("nope")
    with pytest.raises(AttributeError):
        _ = BrokerConfig.defaults().no_such_attribute


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "three"),
        ("num.partitions", "1.5"),
        ("num.partitions", "1_000"),
        ("num.partitions", "3000000000"),
        ("log.retention.ms", "soon"),
        ("auto.create.topics.enable", "yes"),
        ("offsets.topic.replication.factor", "40000"),
        ("log.cleanup.policy", "delete,,compact"),
    ],
)
def test_bad_type(key: str, value: str) -> None:
    with raises(key):
        BrokerConfig.from_sources({key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("log.segment.bytes", "13"),
        ("num.partitions", "0"),
        ("log.retention.hours", "-2"),
        ("group.share.max.size", "1001"),
        ("group.share.delivery.count.limit", "11"),
        ("group.share.delivery.count.limit", "1"),
        ("group.share.record.lock.duration.ms", "999"),
        ("group.share.min.record.lock.duration.ms", "999"),
        ("group.share.partition.max.record.locks", "99"),
        ("share.coordinator.snapshot.update.records.per.snapshot", "501"),
        ("log.message.timestamp.type", "createtime"),
        ("compression.type", "brotli"),
        ("log.cleanup.policy", "delete,delete"),
        ("log.cleanup.policy", "archive"),
        ("log.level", "LOUD"),
        ("group.coordinator.rebalance.protocols", "classic,queues"),
        ("group.share.assignors", "simple,other"),
        ("fetch.max.bytes", "1023"),
    ],
)
def test_out_of_bounds(key: str, value: str) -> None:
    with raises(key):
        BrokerConfig.from_sources({key: value})


def test_overrides_syntax() -> None:
    assert parse_overrides(["a=b=c", " k = v "]) == {"a": "b=c", "k": "v"}
    with raises("missing"):
        parse_overrides(["missing"])


def test_typed_values_are_accepted_too() -> None:
    c = BrokerConfig.from_sources({"num.partitions": 6, "auto.create.topics.enable": False, "log.dirs": ["/x"]})
    assert (c.num_partitions, c.auto_create_topics_enable, c.log_dirs) == (6, False, ("/x",))
    with raises("num.partitions"):
        BrokerConfig.from_sources({"num.partitions": True})


def test_log_level_is_case_insensitive() -> None:
    assert cfg(log_level="debug").log_level == "debug"


def test_error_is_a_value_error_and_pickles() -> None:
    try:
        cfg(num_partitions="x")
    except ConfigError as e:
        assert isinstance(e, ValueError)
        assert (e.key, e.value) == ("num.partitions", "x")
        again = pickle.loads(pickle.dumps(e))
        assert (again.key, again.reason, str(again)) == (e.key, e.reason, str(e))
    else:
        pytest.fail("no error")


def test_with_overrides() -> None:
    base = BrokerConfig.from_sources({"num.partitions": "3"})
    changed = base.with_overrides({"num.partitions": None, "log.retention.hours": 1})
    assert changed.num_partitions == 1
    assert changed.source("num.partitions") is ConfigSource.DEFAULT
    assert changed.retention_ms == 3_600_000
    assert base.num_partitions == 3  # the original is untouched
    with raises("bogus"):
        base.with_overrides({"bogus": 1})


# --- precedence ----------------------------------------------------------------------


def test_retention_precedence() -> None:
    assert BrokerConfig.defaults().retention_ms == 168 * 3_600_000
    assert cfg(log_retention_hours="2").retention_ms == 7_200_000
    assert cfg(log_retention_hours="2", log_retention_minutes="3").retention_ms == 180_000
    assert cfg(log_retention_hours="2", log_retention_minutes="3", log_retention_ms="4").retention_ms == 4
    assert cfg(log_retention_minutes="5").retention_ms == 300_000
    assert cfg(log_retention_hours="-1").retention_ms == -1
    assert cfg(log_retention_minutes="-1", log_retention_hours="5").retention_ms == -1
    assert cfg(log_retention_ms="-1").retention_ms == -1


def test_retention_flows_to_topics_and_describe() -> None:
    c = cfg(log_retention_minutes="10")
    assert c.topic_defaults()["retention.ms"] == 600_000
    entry = describe_topic_configs({}, c, ["retention.ms"])[0]
    assert (entry.value, entry.source) == ("600000", ConfigSource.FILE)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.minutes", "10", ConfigSource.FILE),
        ("log.retention.hours", "168", ConfigSource.DEFAULT),
    ]


def test_roll_and_flush_precedence() -> None:
    assert BrokerConfig.defaults().roll_ms == 604_800_000
    assert cfg(log_roll_hours="1").roll_ms == 3_600_000
    assert cfg(log_roll_hours="1", log_roll_ms="50").roll_ms == 50
    d = BrokerConfig.defaults()
    assert d.fsync_acks_all and d.flush_interval_ms == LONG_MAX
    timed = cfg(log_flush_interval_ms="1000")
    assert not timed.fsync_acks_all and timed.flush_interval_ms == 1000
    assert timed.topic_defaults()["flush.ms"] == 1000
    assert cfg(log_flush_scheduler_interval_ms="200").flush_interval_ms == 200


def test_log_dir_and_log_dirs() -> None:
    assert cfg(log_dir="/only").data_dirs == ("/only",)
    assert cfg(log_dir="/only", log_dirs="/a,/b").data_dirs == ("/a", "/b")
    assert cfg(log_dirs="/a").data_dir == "/a"
    with raises("log.dirs"):
        cfg(log_dirs="")


# --- listeners -----------------------------------------------------------------------


def test_listener_forms() -> None:
    assert parse_listener("PLAINTEXT://:9092").host == ""
    assert parse_listener("PLAINTEXT://:9092").is_wildcard
    v6 = parse_listener("PLAINTEXT://[::1]:9093")
    assert (v6.host, v6.port, v6.url) == ("::1", 9093, "PLAINTEXT://[::1]:9093")
    named = parse_listener("plaintext://broker-1.example.com:0")
    assert (named.name, named.host, named.port) == ("PLAINTEXT", "broker-1.example.com", 0)


@pytest.mark.parametrize(
    "url",
    [
        "PLAINTEXT://localhost",
        "PLAINTEXT://localhost:70000",
        "PLAINTEXT//localhost:9092",
        "localhost:9092",
        "PLAIN TEXT://h:1",
        "PLAINTEXT://::1:9092",
        "PLAINTEXT://[localhost]:9092",
        "PLAINTEXT://h:-1",
        "NOPE://h:1",
    ],
)
def test_malformed_listeners(url: str) -> None:
    with raises("listeners"):
        cfg(listeners=url)


def test_listener_selection_and_advertising() -> None:
    c = cfg(listeners="INTERNAL://0.0.0.0:9094", listener_security_protocol_map="INTERNAL:PLAINTEXT")
    assert c.listener_host_port() == ("0.0.0.0", 9094)  # a PLAINTEXT-protocol listener of any name
    host, port = c.advertised_host_port()
    assert host not in ("", "0.0.0.0") and port == 9094  # wildcard replaced by a host name
    explicit = cfg(listeners="PLAINTEXT://:0", advertised_listeners="PLAINTEXT://shoal.local:19092")
    assert explicit.advertised_host_port() == ("shoal.local", 19092)
    assert explicit.listener_host_port() == ("", 0)


def test_listener_rules() -> None:
    with raises("listeners"):
        cfg(listeners="PLAINTEXT://:1,PLAINTEXT://:2")
    # every security protocol of Kafka's is served (#16), on as many listeners as named
    many = cfg(
        listeners="PLAINTEXT://:9092,SSL://:9093,SASL_PLAINTEXT://:9094,SASL_SSL://:9095",
    )
    assert [e.security_protocol for e in many.endpoints] == ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    with raises("listener.security.protocol.map"):
        cfg(listeners="PLAINTEXT://:9092", listener_security_protocol_map="PLAINTEXT:GSSAPI")
    with raises("listeners") as e:
        cfg(listeners="PLAINTEXT://:9092,INTERNAL://127.0.0.1:9092", listener_security_protocol_map=_TWO)
    assert "its own port" in str(e.value)


_TWO = "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"


def test_several_listeners_and_their_own_settings() -> None:
    c = BrokerConfig.from_sources(
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9095",
            "listener.security.protocol.map": _TWO,
            "advertised.listeners": "PLAINTEXT://a.example:9092,INTERNAL://b.example:19095",
            "listener.name.internal.max.connections": "7",
        }
    )
    assert [e.name for e in c.endpoints] == ["PLAINTEXT", "INTERNAL"]
    assert (c.advertised_for("INTERNAL").host, c.advertised_for("INTERNAL").port) == ("b.example", 19095)
    assert c.advertised_listener.host == "a.example"  # the first listener's
    assert c.for_listener("INTERNAL", "max.connections") == 7
    assert c.for_listener("internal", "max.connections") == 7
    assert c.for_listener("PLAINTEXT", "max.connections") == c.get("max.connections")
    assert c.with_overrides({"log.retention.ms": 5}).for_listener("INTERNAL", "max.connections") == 7
    for bad in (
        {"listener.name.other.max.connections": "7"},  # no such listener
        {"listener.name.internal.no.such.setting": "7"},
        {"listener.name.internal.max.connections": "-5"},  # the setting's own bounds
    ):
        with pytest.raises(ConfigError):
            BrokerConfig.from_sources(
                {"listeners": "PLAINTEXT://:9092,INTERNAL://:9095", "listener.security.protocol.map": _TWO} | bad
            )
    with raises("advertised.listeners"):
        cfg(advertised_listeners="OTHER://h:1")
    with raises("advertised.listeners"):
        cfg(advertised_listeners="PLAINTEXT://0.0.0.0:9092")
    with raises("listener.security.protocol.map"):
        cfg(listener_security_protocol_map="PLAINTEXT:TLS")


# --- relations between broker settings --------------------------------------------------


def test_share_bounds_on_broker() -> None:
    with raises("group.share.heartbeat.interval.ms"):
        cfg(group_share_heartbeat_interval_ms="4000")  # below min 5000
    with raises("group.share.session.timeout.ms"):
        cfg(group_share_session_timeout_ms="70000")  # above max 60000
    with raises("group.share.delivery.count.limit"):
        cfg(group_share_max_delivery_count_limit="4")  # limit 5 > max 4
    with raises("group.share.heartbeat.interval.ms"):
        cfg(
            group_share_min_heartbeat_interval_ms="1",
            group_share_heartbeat_interval_ms="50000",
            group_share_max_heartbeat_interval_ms="60000",
        )  # heartbeat must be below session
    with raises("group.max.session.timeout.ms"):
        cfg(group_min_session_timeout_ms="10", group_max_session_timeout_ms="5")
    with raises("group.coordinator.rebalance.protocols"):
        cfg(group_coordinator_rebalance_protocols="consumer,share")


def test_tests_may_lower_share_timings() -> None:
    c = cfg(
        group_share_min_heartbeat_interval_ms="50",
        group_share_heartbeat_interval_ms="100",
        group_share_min_session_timeout_ms="500",
        group_share_session_timeout_ms="1000",
        group_share_min_record_lock_duration_ms="1000",
        group_share_record_lock_duration_ms="1000",
    )
    assert (c.group_share_heartbeat_interval_ms, c.group_share_session_timeout_ms) == (100, 1000)
    assert c.group_share_record_lock_duration_ms == 1000


# --- describe ------------------------------------------------------------------------


def test_describe_broker() -> None:
    c = BrokerConfig.from_sources({"log.retention.hours": "24"}, ["log.retention.ms=1000"])
    entries = {e.name: e for e in c.describe()}
    assert set(entries) == set(BROKER_CONFIGS.names())
    ms = entries["log.retention.ms"]
    assert (ms.value, ms.source, ms.read_only, ms.sensitive, ms.type) == (
        "1000",
        ConfigSource.OVERRIDE,
        False,
        False,
        ConfigType.LONG,
    )
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("log.retention.ms", "1000", ConfigSource.OVERRIDE),
        ("log.retention.hours", "24", ConfigSource.FILE),
        ("log.retention.hours", "168", ConfigSource.DEFAULT),
    ]
    assert entries["node.id"].read_only
    assert entries["log.cleanup.policy"].value == "delete"
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["log.roll.ms"].value is None
    assert [e.name for e in c.describe(["num.partitions", "unknown.x"])] == ["num.partitions"]
    assert (
        ConfigSource.DEFAULT.kafka_id,
        ConfigSource.FILE.kafka_id,
        ConfigSource.TOPIC.kafka_id,
        ConfigSource.GROUP.kafka_id,
    ) == (5, 4, 1, 8)
    assert ConfigType.LIST.value == 7


def test_markdown_is_derived_from_the_table() -> None:
    md = BROKER_CONFIGS.markdown()
    assert md.count("\n") == len(BROKER_CONFIGS) + 1
    assert "| log.segment.bytes | int | 1073741824 | [14,...] |" in md


# --- topic configs -------------------------------------------------------------------


def test_validate_topic_configs() -> None:
    parsed = validate_topic_configs(
        {
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "segment.bytes": "1048576",
            "max.message.bytes": None,
        }
    )
    assert parsed == {
        "cleanup.policy": ("compact", "delete"),
        "retention.ms": -1,
        "segment.bytes": 1048576,
        "max.message.bytes": None,
    }
    for key, value in [
        ("cleanup.policy", "nope"),
        ("retention.ms", "-2"),
        ("segment.bytes", "10"),
        ("message.timestamp.type", "Now"),
        ("min.insync.replicas", "0"),
        ("flush.messages", "0"),
        ("compression.type", "lzma"),
        ("segment.ms", "x"),
    ]:
        with raises(key):
            validate_topic_configs({key: value})
    with raises("retention.hours"):
        validate_topic_configs({"retention.hours": "1"})  # broker spelling, not a topic config
    with raises("max.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "50"})


def test_topic_overrides_and_describe() -> None:
    c = cfg(log_segment_bytes="5000", message_max_bytes="2000")
    resolved = resolve_topic_configs({"segment.bytes": "7000"}, c)
    assert (resolved["segment.bytes"], resolved["max.message.bytes"]) == (7000, 2000)
    entries = {e.name: e for e in describe_topic_configs({"segment.bytes": "7000"}, c)}
    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.read_only) == ("7000", ConfigSource.TOPIC, False)
    assert [(s.name, s.source) for s in seg.synonyms] == [
        ("segment.bytes", ConfigSource.TOPIC),
        ("log.segment.bytes", ConfigSource.FILE),
        ("log.segment.bytes", ConfigSource.DEFAULT),
    ]
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].source) == ("2000", ConfigSource.FILE)
    assert entries["compression.type"].source is ConfigSource.DEFAULT


# --- group configs -------------------------------------------------------------------


def test_iso8601_durations() -> None:
    assert parse_iso8601_duration("PT1H") == timedelta(hours=1)
    assert parse_iso8601_duration("P2DT3H4M") == timedelta(days=2, hours=3, minutes=4)
    assert parse_iso8601_duration("PT20.345S") == timedelta(seconds=20, milliseconds=345)
    assert parse_iso8601_duration("pt15m") == timedelta(minutes=15)
    assert parse_iso8601_duration("P1D") == timedelta(days=1)
    assert parse_iso8601_duration("PT-6H3M") == timedelta(hours=-6, minutes=3)
    assert parse_iso8601_duration("-PT6H") == timedelta(hours=-6)
    assert parse_iso8601_duration("PT-0.5S") == timedelta(milliseconds=-500)
    for bad in ("P", "PT", "P1Y", "P1M", "P1W", "1H", "PT1H30", "P1DT", "PT1.5M", ""):
        with pytest.raises(ValueError):
            parse_iso8601_duration(bad)


def test_share_auto_offset_reset() -> None:
    assert parse_share_auto_offset_reset("latest").strategy == "latest"
    assert parse_share_auto_offset_reset("EARLIEST").strategy == "earliest"
    r = parse_share_auto_offset_reset("by_duration:P1DT2H")
    assert (r.strategy, r.duration) == ("by_duration", timedelta(days=1, hours=2))
    broker = BrokerConfig.defaults()
    assert validate_group_configs({"share.auto.offset.reset": "by_duration:PT30M"}, broker) == {
        "share.auto.offset.reset": "by_duration:PT30M"
    }
    for bad in ("by_duration:-PT1H", "by_duration:", "by_duration:P1Y", "by_duration:PT", "middle", "by_duration PT1H"):
        with raises("share.auto.offset.reset"):
            validate_group_configs({"share.auto.offset.reset": bad}, broker)


def test_group_configs_bounded_by_broker() -> None:
    broker = BrokerConfig.defaults()
    ok = validate_group_configs(
        {
            "share.record.lock.duration.ms": "20000",
            "share.delivery.count.limit": "3",
            "share.isolation.level": "read_committed",
            "share.renew.acknowledge.enable": "false",
        },
        broker,
    )
    assert ok["share.record.lock.duration.ms"] == 20000 and ok["share.renew.acknowledge.enable"] is False
    for key, value in [
        ("share.record.lock.duration.ms", "14999"),
        ("share.record.lock.duration.ms", "60001"),
        ("share.heartbeat.interval.ms", "4999"),
        ("share.session.timeout.ms", "60001"),
        ("share.delivery.count.limit", "11"),
        ("share.partition.max.record.locks", "4001"),
        ("consumer.session.timeout.ms", "44999"),
        ("share.isolation.level", "dirty"),
        ("errors.deadletterqueue.topic.name", "bad name"),
        ("errors.deadletterqueue.topic.name", "__consumer_offsets"),
        ("nope.x", "1"),
    ]:
        with raises(key):
            validate_group_configs({key: value}, broker)
    # lowering the broker's minimum lets a group go lower
    relaxed = cfg(
        group_share_min_record_lock_duration_ms="1000",
        group_share_min_heartbeat_interval_ms="100",
        group_share_min_session_timeout_ms="1000",
    )
    assert validate_group_configs(
        {
            "share.record.lock.duration.ms": "1000",
            "share.heartbeat.interval.ms": "100",
            "share.session.timeout.ms": "1000",
        },
        relaxed,
    )
    with raises("share.heartbeat.interval.ms"):
        validate_group_configs({"share.heartbeat.interval.ms": "2000", "share.session.timeout.ms": "1000"}, relaxed)
    with raises("share.record.lock.duration.ms"):
        validate_group_configs({"share.record.lock.duration.ms": "999"}, relaxed)


def test_group_resolve_and_describe() -> None:
    broker = cfg(group_share_record_lock_duration_ms="20000")
    resolved = resolve_group_configs({"share.delivery.count.limit": "3"}, broker)
    assert (resolved["share.delivery.count.limit"], resolved["share.record.lock.duration.ms"]) == (3, 20000)
    entries = {e.name: e for e in describe_group_configs({"share.delivery.count.limit": "3"}, broker)}
    assert (entries["share.delivery.count.limit"].value, entries["share.delivery.count.limit"].source) == (
        "3",
        ConfigSource.GROUP,
    )
    lock = entries["share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == ("20000", ConfigSource.FILE)
    assert [s.name for s in lock.synonyms] == ["group.share.record.lock.duration.ms"] * 2
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].source) == (
        "latest",
        ConfigSource.DEFAULT,
    )


def test_queued_max_request_bytes_must_hold_the_largest_request() -> None:
    """Kafka's rule: -1 (no bound) or at least socket.request.max.bytes, so any one request fits."""
    assert BrokerConfig.from_sources({}).get("queued.max.request.bytes") == -1
    ok = BrokerConfig.from_sources({"socket.request.max.bytes": "1000", "queued.max.request.bytes": "1000"})
    assert ok.get("queued.max.request.bytes") == 1000
    for bad in ("999", "0", "-2"):
        with raises("queued.max.request.bytes"):
            BrokerConfig.from_sources({"socket.request.max.bytes": "1000", "queued.max.request.bytes": bad})
