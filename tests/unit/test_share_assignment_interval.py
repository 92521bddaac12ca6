"""A share group's assignment interval (share.assignment.interval.ms, KIP-1263): the target is
recomputed at most once per interval, measured from the last computation, with a fake clock.

Also the config keys (broker default, the group override over it, the broker's min/max bounds as
IncrementalAlterConfigs reports them) and the timestamp's round trip through the group's records.
"""

from __future__ import annotations

import uuid

import pytest

from shoal.broker.config.group_configs import GroupConfigs
from shoal.broker.config.settings import BrokerConfig, ConfigError, validate_group_configs
from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.share.group import HeartbeatResult, InitState, ShareGroup
from shoal.broker.groups.share.records import ShareGroupReplayer, diff_records
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode

SESSION = 45_000
T1 = uuid.UUID(int=1)
TOPICS = {"a": (T1, 2)}
WALL0 = 1_700_000_000_000  # a wall-clock time, far from 0 ("unknown")
SERDE = serde("group")


class Clocked:
    """One share group whose two partitions are initialized, driven by a fake wall clock."""

    def __init__(self, interval_ms: int) -> None:
        self.interval = interval_ms
        self.wall = WALL0
        self.mono = 5_000  # the monotonic clock of session deadlines: unrelated to the wall clock
        self.g = ShareGroup("g", self.mono)
        self.g.initialized = {T1: InitState("a", frozenset({0, 1}))}

    def hb(self, member: str, epoch: int, subs: list[str] | None = None) -> HeartbeatResult:
        r = self.g.heartbeat(
            member,
            epoch,
            None,
            subs,
            TOPICS,
            self.mono,
            SESSION,
            10,
            assignment_interval_ms=self.interval,
            wall_ms=self.wall,
        )
        assert r.error == ErrorCode.NONE, r
        return r

    def advance(self, ms: int) -> None:
        self.wall += ms
        self.mono += ms

    def held(self, member: str) -> set[int]:
        return set(self.g.members[member].assigned.get(T1, ()))


def test_first_computation_is_immediate_and_a_join_within_the_interval_waits() -> None:
    c = Clocked(1000)
    r1 = c.hb("m1", 0, ["a"])
    assert (r1.member_epoch, r1.assignment) == (1, {T1: {0, 1}})  # no earlier computation: at once
    assert c.g.assignment_timestamp_ms == WALL0

    c.advance(10)
    r2 = c.hb("m2", 0, ["a"])
    # deferred: m2 joins at the current assignment epoch with nothing; the group epoch moved on
    assert (r2.member_epoch, r2.assignment) == (1, {})
    assert (c.g.group_epoch, c.g.assignment_epoch) == (2, 1)
    assert c.g.assignment_pending()

    c.advance(989)  # 999 ms after the computation: still inside the interval
    r1 = c.hb("m1", 1)
    assert (r1.member_epoch, r1.assignment) == (1, None)
    assert c.held("m1") == {0, 1} and c.held("m2") == set()

    c.advance(1)  # 1000 ms: the next heartbeat of any member computes the target
    r1 = c.hb("m1", 1)
    assert r1.member_epoch == 2 and r1.assignment is not None and len(r1.assignment[T1]) == 1
    assert c.g.assignment_timestamp_ms == WALL0 + 1000 and not c.g.assignment_pending()
    r2 = c.hb("m2", 1)
    assert r2.member_epoch == 2 and r2.assignment == {T1: {0, 1} - r1.assignment[T1]}


def test_zero_interval_recomputes_on_every_change() -> None:
    c = Clocked(0)
    c.hb("m1", 0, ["a"])
    r2 = c.hb("m2", 0, ["a"])  # same instant as the first computation
    assert r2.member_epoch == 2 and len(r2.assignment[T1]) == 1
    assert c.g.group_epoch == c.g.assignment_epoch == 2


def test_leaves_and_expiries_within_the_interval_wait_too() -> None:
    c = Clocked(1000)
    c.hb("m1", 0, ["a"])
    c.advance(1000)
    c.hb("m2", 0, ["a"])
    c.hb("m1", 1)
    assert c.g.assignment_epoch == 2 and c.held("m1") and c.held("m2")
    c.advance(100)
    assert c.hb("m2", 2, None).member_epoch == 2
    assert c.g.heartbeat("m2", -1, None, None, TOPICS, c.mono, SESSION, 10).member_epoch == -1
    r1 = c.hb("m1", 2)  # 100 ms after the computation: m1 keeps its half
    assert (r1.member_epoch, len(c.held("m1"))) == (2, 1)
    c.advance(900)
    r1 = c.hb("m1", 2)
    assert (r1.member_epoch, r1.assignment) == (3, {T1: {0, 1}})


def test_a_steady_group_does_not_compute_or_write_when_the_interval_ends() -> None:
    c = Clocked(1000)
    c.hb("m1", 0, ["a"])
    c.g.dirty = False
    c.advance(5000)
    assert c.hb("m1", 1).assignment is None
    assert c.g.assignment_timestamp_ms == WALL0 and not c.g.dirty  # nothing was pending


def test_an_unknown_time_of_the_last_computation_does_not_hold_the_next_one() -> None:
    c = Clocked(15_000)
    c.hb("m1", 0, ["a"])
    c.g.assignment_timestamp_ms = 0  # as replayed from records written before KIP-1263
    r2 = c.hb("m2", 0, ["a"])
    assert r2.member_epoch == 2 and len(r2.assignment[T1]) == 1


def test_the_interval_starts_at_the_new_wall_clock_time_not_the_monotonic_one() -> None:
    c = Clocked(1000)
    c.hb("m1", 0, ["a"])
    c.wall += 2000  # the wall clock moved, the monotonic clock did not: the wall clock counts
    assert c.hb("m2", 0, ["a"]).member_epoch == 2


def through_the_wire(group: ShareGroup, image: dict) -> tuple[list[CoordinatorRecord], dict]:
    records, image = diff_records(group, image)
    out = []
    for r in records:
        out.append(SERDE.decode(SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version)))
    return out, image


def test_the_time_of_the_last_computation_is_written_and_replayed() -> None:
    c = Clocked(1000)
    c.hb("m1", 0, ["a"])
    log, image = through_the_wire(c.g, {})
    (meta,) = [r for r in log if r.type.name == "ShareGroupTargetAssignmentMetadata"]
    assert (meta.value.assignment_epoch, meta.value.assignment_timestamp) == (1, WALL0)

    c.advance(10)
    c.hb("m2", 0, ["a"])  # deferred: the metadata record is not rewritten
    more, image = through_the_wire(c.g, image)
    assert "ShareGroupTargetAssignmentMetadata" not in {r.type.name for r in more}

    groups: dict[str, ShareGroup] = {}
    replayer = ShareGroupReplayer(groups, lambda: 0)
    for rec in log + more:
        replayer.replay(rec)
    replayer.finish(groups.values())
    g = groups["g"]
    assert (g.assignment_epoch, g.assignment_timestamp_ms, g.group_epoch) == (1, WALL0, 2)
    # after a restart the interval still runs from the written time
    assert not g.can_compute_target(1000, WALL0 + 999) and g.can_compute_target(1000, WALL0 + 1000)


# -- configs ---------------------------------------------------------------------------------


def test_broker_keys_kafka_defaults_and_bounds() -> None:
    b = BrokerConfig.defaults()
    assert (
        b.get("group.share.assignment.interval.ms"),
        b.get("group.share.min.assignment.interval.ms"),
        b.get("group.share.max.assignment.interval.ms"),
    ) == (1000, 0, 15000)
    assert b.group_defaults()["share.assignment.interval.ms"] == 1000
    for bad in (
        {"group.share.assignment.interval.ms": "15001"},
        {"group.share.assignment.interval.ms": "-1"},
        {"group.share.min.assignment.interval.ms": "2000"},  # the default 1000 falls below it
        {
            "group.share.max.assignment.interval.ms": "10",
            "group.share.assignment.interval.ms": "0",
            "group.share.min.assignment.interval.ms": "20",
        },
    ):
        with pytest.raises(ConfigError):
            BrokerConfig.from_sources(bad)
    assert (
        BrokerConfig.from_sources({"group.share.assignment.interval.ms": "0"}).get("group.share.assignment.interval.ms")
        == 0
    )


def test_group_value_is_bounded_by_the_broker() -> None:
    b = BrokerConfig.defaults()
    assert validate_group_configs({"share.assignment.interval.ms": "0"}, b) == {"share.assignment.interval.ms": 0}
    assert validate_group_configs({"share.assignment.interval.ms": "15000"}, b)
    for bad in ("15001", "-1", "soon"):
        with pytest.raises(ConfigError, match=r"share\.assignment\.interval\.ms"):
            validate_group_configs({"share.assignment.interval.ms": bad}, b)
    tight = BrokerConfig.from_sources(
        {"group.share.min.assignment.interval.ms": "500", "group.share.max.assignment.interval.ms": "2000"}
    )
    with pytest.raises(ConfigError, match=r"at least group.share.min.assignment.interval.ms \(500\)"):
        validate_group_configs({"share.assignment.interval.ms": "499"}, tight)
    with pytest.raises(ConfigError, match=r"at most group.share.max.assignment.interval.ms \(2000\)"):
        validate_group_configs({"share.assignment.interval.ms": "2001"}, tight)


IAC = api_by_name("IncrementalAlterConfigs").request_class()


def op(value: str) -> object:
    return IAC.AlterableConfig(name="share.assignment.interval.ms", config_operation=AlterConfigOpType.SET, value=value)


def test_group_override_beats_the_broker_value_and_out_of_bounds_is_invalid_config(tmp_path) -> None:
    broker = BrokerConfig.from_sources({"group.share.assignment.interval.ms": "0"})
    store = GroupConfigs(tmp_path, broker)
    store.load()
    assert store.get("g", "share.assignment.interval.ms") == 0  # the broker's value
    store.alter("g", [op("2500")])
    assert store.get("g", "share.assignment.interval.ms") == 2500
    assert store.get("other", "share.assignment.interval.ms") == 0
    with pytest.raises(ErrorAnswer) as e:
        store.alter("g", [op("15001")])
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert "share.assignment.interval.ms" in e.value.message and "15000" in e.value.message
    assert store.get("g", "share.assignment.interval.ms") == 2500  # the refused change left nothing

    # a broker restarted with a lower maximum caps the stored override, as Kafka does
    again = GroupConfigs(tmp_path, BrokerConfig.from_sources({"group.share.max.assignment.interval.ms": "2000"}))
    again.load()
    assert again.get("g", "share.assignment.interval.ms") == 2000
