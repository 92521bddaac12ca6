"""Share groups written as records and replayed (shoal/broker/groups/share/records.py).

Every operation's diff is encoded with the real serde, decoded again and
replayed into a fresh set of groups; the rebuilt group must equal the live one
(members, epochs, target and current assignments, state partitions).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.share.group import ShareGroup
from shoal.broker.groups.share.records import ShareGroupReplayer, diff_records, image, tombstones
from shoal.protocol.coordinator_records import CoordinatorRecord, serde

SERDE = serde("group")
SESSION = 45_000


def through_the_wire(records: list[Record]) -> list[CoordinatorRecord]:
    out = []
    for r in records:
        key = SERDE.encode_key(r.name, r.key)
        value = SERDE.encode_value(r.name, r.value, r.value_version)
        out.append(SERDE.decode(key, value))
    return out


class Log:
    """The records written so far, and a replay of them into fresh groups."""

    def __init__(self) -> None:
        self.records: list[CoordinatorRecord] = []
        self.images: dict[str, dict] = {}

    def persist(self, g: ShareGroup) -> list[Record]:
        records, img = diff_records(g, self.images.get(g.group_id, {}))
        self.images[g.group_id] = img
        self.records += through_the_wire(records)
        return records

    def replay(self) -> dict[str, ShareGroup]:
        groups: dict[str, ShareGroup] = {}
        r = ShareGroupReplayer(groups, lambda: 0)
        for rec in self.records:
            r.replay(rec)
        r.finish(groups.values())
        return groups


def test_steady_heartbeat_writes_nothing_and_join_writes_the_member() -> None:
    topics = {"a": (uuid.UUID(int=1), 2)}
    g = ShareGroup("g", 0)
    log = Log()
    r = g.heartbeat("m1", 0, None, ["a"], topics, 0, SESSION, 10)
    written = {rec.name for rec in log.persist(g)}
    assert {"ShareGroupMemberMetadata", "ShareGroupMetadata", "ShareGroupCurrentMemberAssignment"} <= written
    g.heartbeat("m1", r.member_epoch, None, None, topics, 1, SESSION, 10)
    assert log.persist(g) == []
    for tid, s in g.to_initialize(topics, 2, 30_000).items():
        g.initialized_partitions(tid, s.name, s.partitions)
    names = [rec.name for rec in log.persist(g)]
    assert names == ["ShareGroupMetadata", "ShareGroupStatePartitionMetadata"]
    rebuilt = log.replay()["g"]
    assert image(rebuilt) == image(g)


def test_leave_writes_tombstones_and_delete_removes_the_group() -> None:
    topics = {"a": (uuid.UUID(int=1), 1)}
    g = ShareGroup("g", 0)
    log = Log()
    g.heartbeat("m1", 0, None, ["a"], topics, 0, SESSION, 10)
    g.heartbeat("m2", 0, None, ["a"], topics, 0, SESSION, 10)
    log.persist(g)
    g.heartbeat("m2", -1, None, None, topics, 1, SESSION, 10)
    written = log.persist(g)
    tombs = [(r.name, r.key.member_id) for r in written if r.value is None]
    assert sorted(tombs) == [
        ("ShareGroupCurrentMemberAssignment", "m2"),
        ("ShareGroupMemberMetadata", "m2"),
        ("ShareGroupTargetAssignmentMember", "m2"),
    ]
    assert set(log.replay()["g"].members) == {"m1"}
    dead = tombstones(log.images.pop("g"))
    assert dead[-1].name == "ShareGroupMetadata" and all(r.value is None for r in dead)
    log.records += through_the_wire(dead)
    assert log.replay() == {}


MEMBERS = ["m0", "m1", "m2", "m3"]
NAMES = ["a", "b", "c"]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(MEMBERS), st.sets(st.sampled_from(NAMES), min_size=1)),
        st.tuples(st.just("hb"), st.sampled_from(MEMBERS), st.none() | st.sets(st.sampled_from(NAMES), min_size=1)),
        st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.none()),
        st.tuples(st.just("expire"), st.integers(0, 90_000), st.none()),
        st.tuples(st.just("init"), st.booleans(), st.none()),
        st.tuples(st.just("delete"), st.none(), st.none()),
        st.tuples(st.just("grow"), st.sampled_from(NAMES), st.integers(1, 4)),
        st.tuples(st.just("recreate"), st.sampled_from(NAMES), st.none()),
    ),
    max_size=40,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_replay_rebuilds_the_live_group(script) -> None:
    now = 0
    topics = {"a": (uuid.uuid4(), 2), "b": (uuid.uuid4(), 1)}
    g = ShareGroup("g", now)
    log = Log()
    for kind, x, y in script:
        if kind in ("join", "hb", "leave"):
            member = g.members.get(x)
            if kind == "join":
                g.heartbeat(x, 0, "rack" if x in ("m1", "m3") else None, sorted(y), topics, now, SESSION, 3)
            elif member is not None:
                subs = None if y is None else sorted(y)
                g.heartbeat(x, member.member_epoch if kind == "hb" else -1, None, subs, topics, now, SESSION, 3)
        elif kind == "expire":
            now += x
            g.expire(now)
        elif kind == "init":
            for tid, s in g.to_initialize(topics, now, 30_000).items():
                if x:
                    g.initialized_partitions(tid, s.name, s.partitions)
                else:
                    g.initialize_failed(tid, s.partitions)
        elif kind == "delete":
            g.deleted_topics(list(g.to_delete(topics)))
        elif kind == "grow":
            tid, count = topics.get(x, (uuid.uuid4(), 0))
            topics[x] = (tid, max(count, y))
        else:
            topics[x] = (uuid.uuid4(), topics.get(x, (None, 1))[1])
        log.persist(g)
        rebuilt = log.replay().get("g")
        assert rebuilt is not None
        assert image(rebuilt) == image(g)
        assert rebuilt.state == g.state
        assert {m: (v.member_epoch, v.assigned) for m, v in rebuilt.members.items()} == {
            m: (v.member_epoch, v.assigned) for m, v in g.members.items()
        }
