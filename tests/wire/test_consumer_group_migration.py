"""Online migration between classic and consumer groups over raw requests (a broker process).

A classic group of one member (JoinGroup/SyncGroup with ConsumerProtocol
bytes) gets a ConsumerGroupHeartbeat member: it becomes a consumer group
(ListGroups type, ConsumerGroupDescribe with a classic member), the classic
member is told to rejoin by its Heartbeat and gets its share through JoinGroup
and SyncGroup; the group survives a kill -9 as one consumer group. When the
consumer member leaves, it is a classic group again. With
group.consumer.migration.policy=disabled the live classic group answers
GROUP_ID_NOT_FOUND, as before.
"""

from __future__ import annotations

import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.coordinator_records import decode_versioned, encode_versioned
from shoal.protocol.errors import ErrorCode
from shoal.protocol.messages import ConsumerProtocolSubscription
from tests.support.brokers import RawClient
from tests.support.wire import create
from tests.wire.test_consumer_group_protocol import FAST, hb

J = api_by_name("JoinGroup").request_class()
S = api_by_name("SyncGroup").request_class()
CA = api_by_name("ConsumerGroupHeartbeat").request_class()


def sub(topic: str) -> bytes:
    return encode_versioned("ConsumerProtocolSubscription", 1, ConsumerProtocolSubscription(topics=[topic]))


def join(c: RawClient, gid: str, member: str, topic: str):
    r = c.call(
        "JoinGroup",
        9,
        group_id=gid,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id=member,
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=sub(topic))],
    )
    if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        return join(c, gid, r.member_id, topic)
    return r


def sync(c: RawClient, gid: str, member: str, gen: int, assignments=()):
    r = c.call(
        "SyncGroup",
        5,
        group_id=gid,
        generation_id=gen,
        member_id=member,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[S.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments],
    )
    parts = set()
    if r.error_code == 0 and r.assignment:
        _, a = decode_versioned("ConsumerProtocolAssignment", r.assignment)
        parts = {p for tp in a.assigned_partitions for p in tp.partitions}
    return r.error_code, parts


def assignment(topic: str, parts: list[int]) -> bytes:
    from shoal.protocol.messages import ConsumerProtocolAssignment as A

    return encode_versioned(
        "ConsumerProtocolAssignment", 1, A(assigned_partitions=[A.TopicPartition(topic=topic, partitions=parts)])
    )


def heartbeat(c: RawClient, gid: str, member: str, gen: int) -> int:
    return c.call("Heartbeat", 4, group_id=gid, generation_id=gen, member_id=member).error_code


def group_type(c: RawClient, gid: str) -> str | None:
    groups = c.call("ListGroups", 5, states_filter=[], types_filter=[]).groups
    return {g.group_id: g.group_type for g in groups}.get(gid)


def classic_group(c: RawClient, gid: str, topic: str) -> tuple[str, int]:
    j = join(c, gid, "", topic)
    assert j.error_code == 0 and j.leader == j.member_id
    err, parts = sync(c, gid, j.member_id, j.generation_id, [(j.member_id, assignment(topic, [0, 1, 2, 3]))])
    assert err == 0 and parts == {0, 1, 2, 3}
    return j.member_id, j.generation_id


@pytest.mark.parametrize("kill", [False, True])
def test_live_classic_group_upgrades_and_downgrades(broker_factory, kill: bool) -> None:
    b = broker_factory(
        *FAST, "group.consumer.session.timeout.ms=45000", "group.consumer.min.session.timeout.ms=1000"
    ).start()
    with RawClient(b.port) as c:
        create(c, "mig-t", 4)
        cm, gen = classic_group(c, "mig", "mig-t")
        assert group_type(c, "mig") == "classic"
        n = hb(c, "mig", "n", 0, ["mig-t"])
        assert n.error_code == 0 and n.member_epoch == gen + 1
        assert not n.assignment.topic_partitions  # all four are still the classic member's
        assert group_type(c, "mig") == "consumer"
        d = c.call("ConsumerGroupDescribe", 1, group_ids=["mig"], include_authorized_operations=False).groups[0]
        assert {(m.member_id, m.member_type) for m in d.members} == {(cm, 0), ("n", 1)}
    if kill:
        b.kill()
        b.start()
    with RawClient(b.port) as c:
        deadline = time.monotonic() + 10
        while group_type(c, "mig") is None and time.monotonic() < deadline:
            time.sleep(0.05)  # ListGroups leaves out a __consumer_offsets partition still loading
        assert group_type(c, "mig") == "consumer"
        assert heartbeat(c, "mig", cm, gen) == ErrorCode.REBALANCE_IN_PROGRESS
        j = join(c, "mig", cm, "mig-t")  # an eager member rejoins owning nothing
        assert j.error_code == 0 and j.generation_id == gen + 1 and j.leader == ""
        err, mine = sync(c, "mig", cm, j.generation_id)
        assert err == 0 and len(mine) == 2
        n = hb(c, "mig", "n", n.member_epoch, owned={})
        theirs = set(n.assignment.topic_partitions[0].partitions)
        assert theirs == {0, 1, 2, 3} - mine
        assert heartbeat(c, "mig", cm, j.generation_id) == 0
        # the consumer member leaves: only the classic one is left and the group is classic again
        assert hb(c, "mig", "n", -1).error_code == 0
        assert group_type(c, "mig") == "classic"
        assert heartbeat(c, "mig", cm, j.generation_id + 1) == ErrorCode.REBALANCE_IN_PROGRESS
        j = join(c, "mig", cm, "mig-t")
        assert j.error_code == 0 and j.leader == cm and j.generation_id == gen + 3


def test_classic_member_joins_a_consumer_group(broker_factory) -> None:
    b = broker_factory(*FAST).start()
    with RawClient(b.port) as c:
        create(c, "mig-j", 2)
        n = hb(c, "migj", "n", 0, ["mig-j"])
        j = join(c, "migj", "", "mig-j")  # MEMBER_ID_REQUIRED, then in with the id it was given
        assert j.error_code == 0 and j.generation_id == n.member_epoch + 1
        d = c.call("ConsumerGroupDescribe", 1, group_ids=["migj"], include_authorized_operations=False).groups[0]
        assert sorted(m.member_type for m in d.members) == [0, 1]
        assert group_type(c, "migj") == "consumer"


def test_empty_consumer_group_gives_way_to_a_classic_join(broker_factory) -> None:
    b = broker_factory(*FAST).start()
    with RawClient(b.port) as c:
        create(c, "mig-e", 2)
        n = hb(c, "mige", "n", 0, ["mig-e"])
        assert hb(c, "mige", "n", -1).error_code == 0
        assert group_type(c, "mige") == "consumer"  # empty, still a consumer group
        cm, _ = classic_group(c, "mige", "mig-e")
        assert group_type(c, "mige") == "classic"
        assert n.error_code == 0 and cm
    b.kill()
    b.start()
    with RawClient(b.port) as c:
        deadline = time.monotonic() + 10
        while group_type(c, "mige") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_type(c, "mige") == "classic"


def test_policy_disabled_keeps_classic_groups_classic(broker_factory) -> None:
    b = broker_factory(*FAST, "group.consumer.migration.policy=disabled").start()
    with RawClient(b.port) as c:
        create(c, "mig-d", 4)
        classic_group(c, "migd", "mig-d")
        r = hb(c, "migd", "n", 0, ["mig-d"])
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert group_type(c, "migd") == "classic"
