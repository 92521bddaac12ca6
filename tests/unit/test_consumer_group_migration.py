"""Online migration between classic and consumer groups (groups/consumer/migration.py), sans-IO.

A live classic group of two members becomes a consumer group when a
consumer-protocol member joins; the classic members keep their assignment,
are told to rejoin (REBALANCE_IN_PROGRESS), revoke, rejoin and sync to the new
target, and no partition is ever held by two members. When the consumer
member leaves the group goes back to a classic group holding the target
assignment. The conversions' records, replayed into a fresh shard through the
real serde, leave exactly one group of the id.
"""

from __future__ import annotations

import uuid

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.classic import ClassicGroup, GroupState, JoinParams, Member
from shoal.broker.groups.consumer import migration
from shoal.broker.groups.consumer.group import ConsumerGroup, HeartbeatParams
from shoal.broker.groups.consumer.records import diff_records, tombstones
from shoal.broker.groups.shard import GroupSettings, GroupShard
from shoal.protocol.coordinator_records import decode_versioned, encode_versioned, serde
from shoal.protocol.errors import ErrorCode
from shoal.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

SERDE = serde("group")
T1 = uuid.UUID(int=7)
TOPICS = {"t": (T1, 6)}
NAMES = {T1: "t"}
SESSION = 10_000


def sub(owned: dict[str, list[int]] | None = None, version: int = 1) -> bytes:
    s = ConsumerProtocolSubscription
    owned_tps = [s.TopicPartition(topic=t, partitions=ps) for t, ps in (owned or {}).items()]
    return encode_versioned("ConsumerProtocolSubscription", version, s(topics=["t"], owned_partitions=owned_tps))


def assignment(parts: list[int]) -> bytes:
    a = ConsumerProtocolAssignment
    return encode_versioned(
        "ConsumerProtocolAssignment", 1, a(assigned_partitions=[a.TopicPartition(topic="t", partitions=parts)])
    )


def partitions_of(data: bytes) -> set[int]:
    _, a = decode_versioned("ConsumerProtocolAssignment", data)
    return {p for tp in a.assigned_partitions for p in tp.partitions}


def classic_group(now: int = 0) -> ClassicGroup:
    g = ClassicGroup("g", now, 0)
    members = [
        Member(mid, None, "cli", "/h", 30_000, SESSION, "consumer", [("range", sub())], assignment(ps))
        for mid, ps in (("c1", [0, 1, 2]), ("c2", [3, 4, 5]))
    ]
    g.restore("consumer", 5, "range", "c1", members, now)
    return g


def no_partition_twice(g: ConsumerGroup) -> None:
    seen: set[tuple[uuid.UUID, int]] = set()
    for m in g.members.values():
        for parts in (m.assigned, m.revoking):
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in seen, f"{(t, p)} held twice"
                    seen.add((t, p))


def rejoin(g: ConsumerGroup, mid: str, now: int, owned: dict | None = None):
    p = JoinParams(mid, None, "cli", "/h", SESSION, 30_000, "consumer", [("range", sub(owned))], True)
    return migration.classic_join(g, p, TOPICS, now, 100)


def test_policy_flags() -> None:
    assert [migration.upgrade_enabled(p) for p in migration.POLICIES] == [True, True, False, False]
    assert [migration.downgrade_enabled(p) for p in migration.POLICIES] == [True, False, True, False]
    c = classic_group()
    assert migration.can_upgrade(c, "bidirectional", 10)
    assert not migration.can_upgrade(c, "downgrade", 10)
    assert not migration.can_upgrade(c, "disabled", 10)
    assert not migration.can_upgrade(c, "upgrade", 1)  # more members than a consumer group may hold
    c.protocol_type = "connect"
    assert not migration.can_upgrade(c, "upgrade", 10)


def test_upgrade_keeps_members_and_assignment() -> None:
    g = migration.from_classic(classic_group(), TOPICS, 100, "uniform")
    assert g.group_epoch == g.assignment_epoch == 5
    assert set(g.members) == {"c1", "c2"}
    c1 = g.members["c1"]
    assert c1.member_epoch == 5 and c1.assigned == {T1: frozenset({0, 1, 2})}
    assert c1.classic is not None and c1.classic.session_timeout_ms == SESSION
    assert c1.subscribed_names == frozenset({"t"})
    assert g.target["c2"] == {T1: frozenset({3, 4, 5})}
    assert g.state == "Stable"
    no_partition_twice(g)


def test_malformed_embedded_protocol_refuses_the_upgrade() -> None:
    c = classic_group()
    c.members["c1"].protocols = [("range", b"\x00")]
    try:
        migration.from_classic(c, TOPICS, 0, "uniform")
    except migration.MigrationError:
        pass
    else:
        raise AssertionError("a malformed subscription was accepted")


def test_classic_members_reconcile_with_a_consumer_member() -> None:
    now = 0
    g = migration.from_classic(classic_group(), TOPICS, now, "uniform")
    r = g.heartbeat(
        HeartbeatParams("n", 0, subscribed_names=["t"], owned={}, rebalance_timeout_ms=30_000), TOPICS, now, SESSION, 9
    )
    assert r.error == 0 and r.member_epoch == 6 and g.group_epoch == 6
    assert r.assignment == {}  # everything is still held by the classic members
    no_partition_twice(g)
    # the classic members learn of the rebalance from their heartbeat, and their syncs are refused
    assert migration.classic_heartbeat(g, "c1", None, 5, now) == ErrorCode.REBALANCE_IN_PROGRESS
    assert migration.classic_heartbeat(g, "c1", None, 4, now) == ErrorCode.ILLEGAL_GENERATION
    assert g.members["c1"].member_epoch == 5  # classic members reconcile on their JoinGroup
    # eager members rejoin owning nothing: they take the new epoch and what the target leaves them
    for mid in ("c1", "c2"):
        j = rejoin(g, mid, now)
        assert j.error == 0 and j.generation_id == 6 and j.leader == "" and j.protocol_name == "range"
        no_partition_twice(g)
        s = migration.classic_sync(g, mid, None, 6, "consumer", "range", NAMES, now)
        assert s.error == 0
        assert partitions_of(s.assignment) == set(g.members[mid].assigned.get(T1, ()))
        assert migration.classic_sync(g, mid, None, 5, "consumer", "range", NAMES, now).error == (
            ErrorCode.ILLEGAL_GENERATION
        )
        assert migration.classic_sync(g, mid, None, 6, "consumer", "other", NAMES, now).error == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        )
    r = g.heartbeat(HeartbeatParams("n", 6, owned={}), TOPICS, now, SESSION, 9)
    assert r.assignment is not None and len(r.assignment[T1]) == 2
    no_partition_twice(g)
    held = [len(m.assigned.get(T1, ())) for m in g.members.values()]
    assert sorted(held) == [2, 2, 2]
    assert migration.classic_heartbeat(g, "c1", None, 6, now) == ErrorCode.NONE
    g.update_state(now)
    assert g.state == "Stable"


def test_classic_join_errors() -> None:
    g = migration.from_classic(classic_group(), TOPICS, 0, "uniform")
    g.heartbeat(
        HeartbeatParams("n", 0, subscribed_names=["t"], owned={}, rebalance_timeout_ms=1), TOPICS, 0, SESSION, 9
    )
    p = JoinParams("", None, "cli", "/h", SESSION, 30_000, "consumer", [("range", sub())], True)
    r = migration.classic_join(g, p, TOPICS, 0, 100)
    assert r.error == ErrorCode.MEMBER_ID_REQUIRED and r.member_id
    assert "c3" not in g.members and r.member_id not in g.members
    p.member_id = "n"
    assert migration.classic_join(g, p, TOPICS, 0, 100).error == ErrorCode.UNKNOWN_MEMBER_ID  # a consumer member
    p.member_id, p.protocols = "", [("roundrobin", sub())]  # no protocol every classic member supports
    assert migration.classic_join(g, p, TOPICS, 0, 100).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    p.protocols, p.protocol_type = [("range", sub())], "connect"
    assert migration.classic_join(g, p, TOPICS, 0, 100).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert migration.classic_join(g, p, TOPICS, 0, 3).error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert migration.classic_leave(g, "nobody", None, 0) == ErrorCode.UNKNOWN_MEMBER_ID
    assert migration.classic_leave(g, "c2", None, 0) == ErrorCode.NONE
    assert "c2" not in g.members and g.group_epoch == 7


def test_downgrade_back_to_classic() -> None:
    g = migration.from_classic(classic_group(), TOPICS, 0, "uniform")
    g.heartbeat(
        HeartbeatParams("n", 0, subscribed_names=["t"], owned={}, rebalance_timeout_ms=1), TOPICS, 0, SESSION, 9
    )
    assert not migration.can_downgrade(g, "bidirectional", 100)  # a consumer member is still there
    g.heartbeat(HeartbeatParams("n", -1), TOPICS, 0, SESSION, 9)
    assert "n" not in g.members
    assert migration.can_downgrade(g, "bidirectional", 100)
    assert migration.can_downgrade(g, "downgrade", 100)
    assert not migration.can_downgrade(g, "upgrade", 100)
    assert not migration.can_downgrade(g, "disabled", 100)
    assert not migration.can_downgrade(g, "bidirectional", 1)  # too many for a classic group
    c = ClassicGroup("g", 0, 0)
    migration.to_classic(g, c, NAMES, 10)
    assert c.generation_id == g.group_epoch == 7
    assert c.protocol_type == "consumer" and c.protocol_name == "range"
    assert c.state == GroupState.PREPARING_REBALANCE and set(c.members) == {"c1", "c2"}
    got = {mid: partitions_of(m.assignment) for mid, m in c.members.items()}
    assert got == {mid: set(g.target[mid][T1]) for mid in ("c1", "c2")}


def _wire(records: list[Record]):
    return [
        SERDE.decode(SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version))
        for r in records
    ]


def _settings() -> GroupSettings:
    return GroupSettings(6000, 1_800_000, 100, 0, 4096, 7 * 86_400_000)


def _reload(log: list) -> GroupShard:
    shard = GroupShard(0, _settings(), lambda: 0)
    for i, rec in enumerate(log):
        shard.replay(rec, i)
    shard.finish_loading()
    return shard


def test_conversions_replay_to_one_group() -> None:
    live = GroupShard(0, _settings(), lambda: 0)
    live.loading = False
    log: list = []

    def write(records: list[Record]) -> None:
        for rec in _wire(records):
            live.replay(rec, len(log))
            log.append(rec)

    c = classic_group()
    live.groups["g"] = c
    write([live.commit_record("g", "t", 0, 42, -1, "", 0), live.group_record(c)])
    # upgrade: the classic group's tombstone and the consumer group's records in one batch
    g = migration.from_classic(c, TOPICS, 0, "uniform")
    g.heartbeat(
        HeartbeatParams("n", 0, subscribed_names=["t"], owned={}, rebalance_timeout_ms=1), TOPICS, 0, SESSION, 9
    )
    live.consumer_groups["g"] = g
    write(live.convert_empty_classic("g") + diff_records(g, {}))
    shard = _reload(log)
    assert set(shard.consumer_groups) == {"g"} and "g" not in shard.groups
    back = shard.consumer_groups["g"]
    assert set(back.members) == {"c1", "c2", "n"}
    assert back.members["c1"].classic == g.members["c1"].classic and back.members["n"].classic is None
    assert shard.committed("g")[("t", 0)].offset == 42
    # downgrade: the consumer group's tombstones and the classic group's metadata in one batch
    g.heartbeat(HeartbeatParams("n", -1), TOPICS, 0, SESSION, 9)
    del live.consumer_groups["g"]
    cl = live.group("g", create=True)
    assert cl is not None
    migration.to_classic(g, cl, NAMES, 0)
    write([*tombstones(live.consumer_images["g"]), live.group_record(cl)])
    shard = _reload(log)
    assert "g" not in shard.consumer_groups and set(shard.groups["g"].members) == {"c1", "c2"}
    assert shard.groups["g"].generation_id == g.group_epoch
    assert shard.committed("g")[("t", 0)].offset == 42


def test_static_members_switch_protocols_without_leaving() -> None:
    c = classic_group()
    c.members["c1"].group_instance_id = "i1"
    c.static_members["i1"] = "c1"
    g = migration.from_classic(c, TOPICS, 0, "uniform")
    assert g.static == {"i1": "c1"}
    # the classic static member restarts as a consumer member: it replaces the old one, no leave needed
    r = g.heartbeat(
        HeartbeatParams("k1", 0, instance_id="i1", subscribed_names=["t"], owned={}, rebalance_timeout_ms=1),
        TOPICS,
        0,
        SESSION,
        9,
    )
    assert r.error == 0 and "c1" not in g.members and g.static["i1"] == "k1"
    assert g.members["k1"].classic is None and r.assignment == {T1: frozenset({0, 1, 2})}
    no_partition_twice(g)
    # and back: a classic member with the same instance id and no member id takes k1's place
    p = JoinParams("", "i1", "cli", "/h", SESSION, 30_000, "consumer", [("range", sub())], True)
    j = migration.classic_join(g, p, TOPICS, 0, 100)
    assert j.error == 0 and j.member_id != "k1" and g.static["i1"] == j.member_id
    assert g.members[j.member_id].classic is not None and "k1" not in g.members
    no_partition_twice(g)
    # a consumer static member still active is not replaced by another consumer member
    g.heartbeat(
        HeartbeatParams("k2", 0, instance_id="i2", subscribed_names=["t"], owned={}, rebalance_timeout_ms=1),
        TOPICS,
        0,
        SESSION,
        9,
    )
    r = g.heartbeat(
        HeartbeatParams("k3", 0, instance_id="i2", subscribed_names=["t"], owned={}, rebalance_timeout_ms=1),
        TOPICS,
        0,
        SESSION,
        9,
    )
    assert r.error == ErrorCode.UNRELEASED_INSTANCE_ID


def test_classic_member_that_does_not_rejoin_or_sync_is_removed() -> None:
    g = migration.from_classic(classic_group(), TOPICS, 0, "uniform")
    for m in g.members.values():
        m.rebalance_timeout_ms = 2000
    g.heartbeat(
        HeartbeatParams("n", 0, subscribed_names=["t"], owned={}, rebalance_timeout_ms=1), TOPICS, 0, SESSION, 9
    )
    assert migration.classic_heartbeat(g, "c1", None, 5, 100) == ErrorCode.REBALANCE_IN_PROGRESS
    assert g.next_deadline_ms() == 2100  # c1's rebalance timeout, before any session ends
    p = JoinParams("c2", None, "cli", "/h", SESSION, 2000, "consumer", [("range", sub())], True)
    assert migration.classic_join(g, p, TOPICS, 200, 100).error == 0
    assert migration.classic_heartbeat(g, "c1", None, 5, 1000) == ErrorCode.REBALANCE_IN_PROGRESS  # still 2100
    assert g.expire(2099) == []
    assert g.expire(2100) == ["c1"]  # told to rejoin at 100, never did
    assert g.expire(2199) == []
    assert g.expire(2200) == ["c2"]  # joined at 200, never synced
    assert list(g.members) == ["n"]
