"""Dynamic group configs (resource type GROUP): the store on its own, then over
the wire with our codec and with confluent-kafka's AdminClient, including a
broker restart and a crash after an acknowledged change."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from shoal.broker.config.group_configs import FILE_NAME, GroupConfigs
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.config.settings import ConfigSource as Source
from shoal.broker.errors import ErrorAnswer
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType as Op
from shoal.protocol.constants import ConfigResourceType
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess, RawClient

_IAC = api_by_name("IncrementalAlterConfigs").request_class()
_DC = api_by_name("DescribeConfigs").request_class()
QUIET = {"log_level": 0}


def op(name: str, value: str | None = None, operation: int = Op.SET) -> Any:
    return _IAC.AlterableConfig(name=name, config_operation=operation, value=value)


def broker_config(*overrides: str) -> BrokerConfig:
    return BrokerConfig.from_sources({}, overrides)


def store(path: Path, *overrides: str) -> GroupConfigs:
    s = GroupConfigs(path, broker_config(*overrides))
    s.load()
    return s


@contextlib.contextmanager
def rejected(code: ErrorCode, match: str | None = None) -> Iterator[None]:
    """pytest.raises for a ErrorAnswer with ``code`` whose text matches ``match``."""
    with pytest.raises(ErrorAnswer, match=match) as info:
        yield
    assert info.value.code == code, info.value


# --- the store ----------------------------------------------------------------------


def test_overrides_fall_back_to_broker_settings(tmp_path: Path) -> None:
    s = store(tmp_path, "group.share.record.lock.duration.ms=20000")
    assert s.resolved("g")["share.record.lock.duration.ms"] == 20000  # the broker's value, no override
    assert s.alter("g", [op("share.delivery.count.limit", "3")]) == {"share.delivery.count.limit": "3"}
    assert s.overrides("g") == {"share.delivery.count.limit": "3"}
    assert s.get("g", "share.delivery.count.limit") == 3
    assert s.get("g", "share.record.lock.duration.ms") == 20000
    assert s.get("other", "share.delivery.count.limit") == 5
    assert s.resolved("g")["share.renew.acknowledge.enable"] is True
    assert s.groups() == ["g"]
    s.alter("g", [op("share.delivery.count.limit", operation=Op.DELETE)])
    assert s.overrides("g") == {} and s.groups() == []
    assert s.get("g", "share.delivery.count.limit") == 5


def test_bounds_come_from_the_broker(tmp_path: Path) -> None:
    strict = store(tmp_path / "a")
    with rejected(ErrorCode.INVALID_CONFIG, r"share\.session\.timeout\.ms: .*group\.share\.max\.session\.timeout\.ms"):
        strict.alter("g", [op("share.session.timeout.ms", "80000")])
    assert strict.overrides("g") == {}
    with rejected(ErrorCode.INVALID_CONFIG, r"group\.share\.min\.record\.lock\.duration\.ms"):
        strict.alter("g", [op("share.record.lock.duration.ms", "14999")])
    with rejected(ErrorCode.INVALID_CONFIG, r"group\.consumer\.max\.heartbeat\.interval\.ms"):
        strict.alter("g", [op("consumer.heartbeat.interval.ms", "15001")])

    relaxed = store(tmp_path / "b", "group.share.max.session.timeout.ms=90000")
    relaxed.alter("g", [op("share.session.timeout.ms", "80000")])
    assert relaxed.get("g", "share.session.timeout.ms") == 80000
    with rejected(ErrorCode.INVALID_CONFIG, r"share\.session\.timeout\.ms"):
        relaxed.alter("g", [op("share.session.timeout.ms", "90001")])
    assert relaxed.get("g", "share.session.timeout.ms") == 80000


def test_auto_offset_reset_by_duration(tmp_path: Path) -> None:
    s = store(tmp_path)
    assert s.auto_offset_reset("g").strategy == "latest"
    s.alter("g", [op("share.auto.offset.reset", "by_duration:PT30M")])
    reset = s.auto_offset_reset("g")
    assert (reset.strategy, reset.duration) == ("by_duration", timedelta(minutes=30))
    for bad in ("by_duration:-PT1H", "by_duration:P1Y", "by_duration:", "soonest"):
        with rejected(ErrorCode.INVALID_CONFIG, r"^INVALID_CONFIG.*share\.auto\.offset\.reset"):
            s.alter("g", [op("share.auto.offset.reset", bad)])
    assert s.overrides("g") == {"share.auto.offset.reset": "by_duration:PT30M"}
    s.alter("g", [op("share.auto.offset.reset", "earliest")])
    assert s.auto_offset_reset("g").strategy == "earliest"


def test_heartbeat_must_stay_below_session_timeout(tmp_path: Path) -> None:
    s = store(
        tmp_path,
        "group.share.min.session.timeout.ms=1000",
        "group.share.min.heartbeat.interval.ms=1000",
    )
    s.alter("g", [op("share.heartbeat.interval.ms", "10000")])  # below the default 45 s session
    # the rule sees the stored heartbeat together with the new session timeout
    with rejected(ErrorCode.INVALID_CONFIG, r"share\.heartbeat\.interval\.ms: must be less than share\.session"):
        s.alter("g", [op("share.session.timeout.ms", "8000")])
    with rejected(ErrorCode.INVALID_CONFIG, r"share\.heartbeat\.interval\.ms"):
        s.alter("g", [op("share.session.timeout.ms", "10000")])  # equal is not below
    assert s.overrides("g") == {"share.heartbeat.interval.ms": "10000"}
    s.alter("g", [op("share.session.timeout.ms", "8000"), op("share.heartbeat.interval.ms", "2000")])
    assert (s.get("g", "share.session.timeout.ms"), s.get("g", "share.heartbeat.interval.ms")) == (8000, 2000)


def test_bad_requests(tmp_path: Path) -> None:
    s = store(tmp_path)
    with rejected(ErrorCode.INVALID_REQUEST, "Default group resources"):
        s.alter("", [op("share.delivery.count.limit", "3")])
    with rejected(ErrorCode.INVALID_REQUEST, "must not be empty"):
        s.describe("")
    with rejected(ErrorCode.INVALID_CONFIG, r"Null value.*share\.delivery\.count\.limit"):
        s.alter("g", [op("share.delivery.count.limit", None)])
    with rejected(ErrorCode.INVALID_CONFIG, r"no\.such\.config"):
        s.alter("g", [op("no.such.config", "1")])
    for operation in (Op.APPEND, Op.SUBTRACT):
        with rejected(ErrorCode.INVALID_CONFIG, "LIST"):
            s.alter("g", [op("share.isolation.level", "read_committed", operation)])
    with rejected(ErrorCode.INVALID_REQUEST, "operation 9"):
        s.alter("g", [op("share.isolation.level", "read_committed", 9)])
    # one bad op rejects the whole resource
    with rejected(ErrorCode.INVALID_CONFIG):
        s.alter("g", [op("share.delivery.count.limit", "3"), op("share.isolation.level", "dirty")])
    assert s.groups() == [] and not (tmp_path / FILE_NAME).exists()
    s.alter("g", [op("no.such.config", operation=Op.DELETE)])  # deleting what is not set is a no-op
    assert s.groups() == []


def test_validate_only_stores_nothing(tmp_path: Path) -> None:
    s = store(tmp_path)
    seen: list[str] = []
    s.add_listener(seen.append)
    assert s.alter("g", [op("share.isolation.level", "read_committed")], validate_only=True) == {
        "share.isolation.level": "read_committed"
    }
    assert s.overrides("g") == {} and s.get("g", "share.isolation.level") == "read_uncommitted"
    assert not (tmp_path / FILE_NAME).exists() and seen == []
    with rejected(ErrorCode.INVALID_CONFIG):
        s.alter("g", [op("share.isolation.level", "dirty")], validate_only=True)
    s.alter("g", [op("share.isolation.level", "read_committed")])
    assert seen == ["g"]
    s.alter("g", [op("share.isolation.level", "read_committed")])  # no change, no event
    assert seen == ["g"]


def test_changes_survive_a_new_instance(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.alter("a", [op("share.delivery.count.limit", "4"), op("share.auto.offset.reset", "by_duration:P1D")])
    s.alter("b", [op("consumer.session.timeout.ms", "50000")])
    s.alter("c", [op("share.isolation.level", "read_committed")])
    s.alter("c", [op("share.isolation.level", operation=Op.DELETE)])
    again = store(tmp_path)
    assert again.groups() == ["a", "b"]
    assert again.overrides("a") == {"share.delivery.count.limit": "4", "share.auto.offset.reset": "by_duration:P1D"}
    assert again.get("b", "consumer.session.timeout.ms") == 50000
    assert again.auto_offset_reset("a").duration == timedelta(days=1)
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temp file left behind


def test_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = store(tmp_path)
    s.alter("g", [op("share.delivery.count.limit", "4")])

    def broken(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("shoal.broker.config.group_configs.os.replace", broken)
    with rejected(ErrorCode.KAFKA_STORAGE_ERROR, "disk full"):
        s.alter("g", [op("share.delivery.count.limit", "3")])
    with rejected(ErrorCode.KAFKA_STORAGE_ERROR):
        s.alter("new", [op("share.delivery.count.limit", "3")])
    assert s.get("g", "share.delivery.count.limit") == 4
    assert s.groups() == ["g"]


def test_tightened_bounds_cap_stored_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store(tmp_path, "group.share.max.session.timeout.ms=90000").alter("g", [op("share.session.timeout.ms", "80000")])
    with caplog.at_level(logging.WARNING, logger="shoal.group_configs"):
        s = store(tmp_path)  # back at the default maximum of 60 s
        assert s.get("g", "share.session.timeout.ms") == 60000
    assert "outside the broker's bounds" in caplog.text
    entry = next(e for e in s.describe("g") if e.name == "share.session.timeout.ms")
    assert (entry.value, entry.source) == ("80000", Source.GROUP)  # described as set


def test_load_drops_entries_it_does_not_understand(tmp_path: Path) -> None:
    groups = {"g": {"share.delivery.count.limit": "4", "retired.config": "1", "share.isolation.level": "dirty"}}
    (tmp_path / FILE_NAME).write_text(json.dumps({"version": 1, "groups": groups}))
    assert store(tmp_path).overrides("g") == {"share.delivery.count.limit": "4"}
    (tmp_path / FILE_NAME).write_text("{not json")
    with pytest.raises(RuntimeError, match=FILE_NAME):
        store(tmp_path)


def test_describe_entries(tmp_path: Path) -> None:
    s = store(tmp_path, "group.share.record.lock.duration.ms=20000")
    s.alter("g", [op("share.delivery.count.limit", "3")])
    entries = {e.name: e for e in s.describe("g")}
    count = entries["share.delivery.count.limit"]
    assert (count.value, count.source, count.read_only) == ("3", Source.GROUP, False)
    assert [(x.name, x.value, x.source) for x in count.synonyms] == [
        ("share.delivery.count.limit", "3", Source.GROUP),
        ("group.share.delivery.count.limit", "5", Source.DEFAULT),
    ]
    lock = entries["share.record.lock.duration.ms"]
    assert (lock.value, lock.source.kafka_id) == ("20000", 4)  # a static broker setting
    assert {e.name for e in s.describe("g", ["share.isolation.level", "nope"])} == {"share.isolation.level"}
    unknown = {e.name: e for e in s.describe("never-seen")}
    assert unknown["share.delivery.count.limit"].value == "5"
    assert all(e.source is not Source.GROUP for e in unknown.values())


# --- over the wire ------------------------------------------------------------------


def raw_alter(c: RawClient, group: str, ops: list[Any], validate_only: bool = False, version: int = 1) -> Any:
    body = _IAC(
        resources=[_IAC.AlterConfigsResource(resource_type=ConfigResourceType.GROUP, resource_name=group, configs=ops)]
    )
    body.validate_only = validate_only
    return c.call("IncrementalAlterConfigs", version, body).responses[0]


def raw_describe(
    c: RawClient, group: str, keys: list[str] | None = None, version: int = 4, synonyms: bool = True
) -> Any:
    body = _DC(
        resources=[
            _DC.DescribeConfigsResource(
                resource_type=ConfigResourceType.GROUP, resource_name=group, configuration_keys=keys
            )
        ],
        include_synonyms=synonyms,
        include_documentation=version >= 3,
    )
    return c.call("DescribeConfigs", version, body).results[0]


def test_wire_alter_and_describe(shared_broker: BrokerProcess) -> None:
    g = "wire-alter-describe"
    with RawClient(shared_broker.port) as c:
        r = raw_alter(
            c, g, [op("share.record.lock.duration.ms", "20000"), op("share.isolation.level", "read_committed")]
        )
        assert (r.error_code, r.resource_type, r.resource_name) == (0, ConfigResourceType.GROUP, g)
        d = raw_describe(c, g)
        assert d.error_code == 0
        got = {e.name: e for e in d.configs}
        lock = got["share.record.lock.duration.ms"]
        assert (lock.value, lock.config_source, lock.read_only, lock.config_type) == ("20000", 8, False, 3)
        assert [(s.name, s.source) for s in lock.synonyms] == [
            ("share.record.lock.duration.ms", 8),
            ("group.share.record.lock.duration.ms", 5),
        ]
        assert lock.documentation
        assert (got["share.isolation.level"].value, got["share.isolation.level"].config_source) == (
            "read_committed",
            8,
        )
        assert (got["share.delivery.count.limit"].value, got["share.delivery.count.limit"].config_source) == ("5", 5)
        # version 1: no documentation; no synonyms unless asked; a key filter; [] means every key
        d1 = raw_describe(c, g, ["share.isolation.level"], version=1, synonyms=False)
        assert [(e.name, e.value, e.config_source, e.synonyms) for e in d1.configs] == [
            ("share.isolation.level", "read_committed", 8, [])
        ]
        assert len(raw_describe(c, g, []).configs) == len(d.configs)
        # IncrementalAlterConfigs v0 and a DELETE
        assert raw_alter(c, g, [op("share.isolation.level", operation=Op.DELETE)], version=0).error_code == 0
        again = {e.name: e for e in raw_describe(c, g).configs}
        assert (again["share.isolation.level"].value, again["share.isolation.level"].config_source) == (
            "read_uncommitted",
            5,
        )


def test_wire_rejections_store_nothing(shared_broker: BrokerProcess) -> None:
    g = "wire-rejections"
    with RawClient(shared_broker.port) as c:
        assert raw_alter(c, g, [op("share.delivery.count.limit", "4")]).error_code == 0
        bad = raw_alter(c, g, [op("share.session.timeout.ms", "60001"), op("share.delivery.count.limit", "3")])
        assert bad.error_code == ErrorCode.INVALID_CONFIG
        assert "share.session.timeout.ms" in bad.error_message and "group.share.max.session.timeout.ms" in (
            bad.error_message
        )
        dry = raw_alter(c, g, [op("share.delivery.count.limit", "3")], validate_only=True)
        assert dry.error_code == 0
        values = {e.name: (e.value, e.config_source) for e in raw_describe(c, g).configs}
        assert values["share.delivery.count.limit"] == ("4", 8)
        assert values["share.session.timeout.ms"] == ("45000", 5)
        empty = raw_alter(c, "", [op("share.delivery.count.limit", "3")])
        assert empty.error_code == ErrorCode.INVALID_REQUEST
        assert raw_describe(c, "").error_code == ErrorCode.INVALID_REQUEST
        unknown = raw_describe(c, "wire-no-such-group")
        assert unknown.error_code == 0 and {e.config_source for e in unknown.configs} == {5}


def test_confluent_admin_client(shared_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap, **QUIET})
    g = "confluent-group-configs"

    def alter(name: str, value: str, validate_only: bool = False) -> None:
        entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        res = ConfigResource(ResourceType.GROUP, g, incremental_configs=[entry])
        for f in admin.incremental_alter_configs([res], validate_only=validate_only).values():
            f.result(15)

    def describe() -> dict[str, Any]:
        (f,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, g)]).values()
        return f.result(15)

    alter("share.auto.offset.reset", "by_duration:PT15M")
    alter("share.delivery.count.limit", "3", validate_only=True)
    got = describe()
    assert got["share.auto.offset.reset"].value == "by_duration:PT15M"
    assert got["share.auto.offset.reset"].source == ConfigSource.GROUP_CONFIG.value
    assert got["share.delivery.count.limit"].value == "5"
    assert got["share.delivery.count.limit"].source == ConfigSource.DEFAULT_CONFIG.value
    with pytest.raises(KafkaException) as info:
        alter("share.auto.offset.reset", "by_duration:P1Y")
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG and "share.auto.offset.reset" in err.str()
    assert describe()["share.auto.offset.reset"].value == "by_duration:PT15M"


def test_configs_survive_restart_and_crash(broker_factory) -> None:
    b = broker_factory("group.share.max.session.timeout.ms=90000", process=True).start()
    g = "restart-group"
    with RawClient(b.port) as c:
        ops = [op("share.session.timeout.ms", "80000"), op("share.partition.max.record.locks", "1000")]
        assert raw_alter(c, g, ops).error_code == 0
    assert b.stop() == 0
    b.start()
    with RawClient(b.port) as c:
        values = {e.name: (e.value, e.config_source) for e in raw_describe(c, g).configs}
        assert values["share.session.timeout.ms"] == ("80000", 8)
        assert values["share.partition.max.record.locks"] == ("1000", 8)
        assert raw_alter(c, g, [op("share.partition.max.record.locks", operation=Op.DELETE)]).error_code == 0
    b.kill()  # acknowledged means on disk: a crash right after the answer keeps the change
    b.start()
    with RawClient(b.port) as c:
        values = {e.name: (e.value, e.config_source) for e in raw_describe(c, g).configs}
        assert values["share.session.timeout.ms"] == ("80000", 8)
        assert values["share.partition.max.record.locks"] == ("2000", 5)
    b.stop()
