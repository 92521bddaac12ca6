"""Group APIs over a real socket: errors for bad input, and the admin views
(DescribeGroups, ListGroups, DeleteGroups, OffsetDelete)."""

from __future__ import annotations

import time

import pytest

from shoal.broker.coordinator.shard import partition_for
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create

JG = api_by_name("JoinGroup").request_class()
SG = api_by_name("SyncGroup").request_class()
LG = api_by_name("LeaveGroup").request_class()
OC = api_by_name("OffsetCommit").request_class()
OD = api_by_name("OffsetDelete").request_class()
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions (default)


@pytest.fixture
def groups_broker(broker_factory):
    b = broker_factory("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
    b.start()
    return b


def join(c: RawClient, gid: str, member_id: str = "", session: int = 10000, protocol_type: str = "consumer"):
    return c.call(
        "JoinGroup",
        5,
        group_id=gid,
        session_timeout_ms=session,
        rebalance_timeout_ms=10000,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"meta")],
    )


def stable_member(c: RawClient, gid: str) -> tuple[str, int]:
    first = join(c, gid)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = join(c, gid, first.member_id)
    assert joined.error_code == 0 and joined.leader == first.member_id
    s = c.call(
        "SyncGroup",
        3,
        group_id=gid,
        generation_id=joined.generation_id,
        member_id=first.member_id,
        assignments=[SG.SyncGroupRequestAssignment(member_id=first.member_id, assignment=b"assigned")],
    )
    assert s.error_code == 0 and s.assignment == b"assigned"
    return first.member_id, joined.generation_id


def test_bad_joins_get_kafka_errors(groups_broker) -> None:
    with RawClient(groups_broker.port) as c:
        _wait_loaded(c)
        assert join(c, "").error_code == ErrorCode.INVALID_GROUP_ID
        assert join(c, "g", session=10).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(c, "g", session=10**9).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(c, "g", member_id="made-up").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        member, gen = stable_member(c, "g")
        assert join(c, "g", protocol_type="connect").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        hb = c.call("Heartbeat", 3, group_id="g", generation_id=gen + 7, member_id=member)
        assert hb.error_code == ErrorCode.ILLEGAL_GENERATION
        hb = c.call("Heartbeat", 3, group_id="g", generation_id=gen, member_id=member)
        assert hb.error_code == 0  # the rejected requests changed nothing


def test_admin_views_and_deletion(groups_broker, topic_name) -> None:
    with RawClient(groups_broker.port) as c:
        _wait_loaded(c)
        create(c, topic_name, 2)
        member, gen = stable_member(c, "admin-g")
        commit = c.call(
            "OffsetCommit",
            8,
            group_id="admin-g",
            generation_id_or_member_epoch=gen,
            member_id=member,
            topics=[
                OC.OffsetCommitRequestTopic(
                    name=topic_name,
                    partitions=[OC.OffsetCommitRequestPartition(partition_index=p, committed_offset=3) for p in (0, 1)],
                )
            ],
        )
        assert all(p.error_code == 0 for t in commit.topics for p in t.partitions)
        d = c.call("DescribeGroups", 5, groups=["admin-g", "nope"]).groups
        assert (d[0].group_state, d[0].protocol_type, d[0].protocol_data) == ("Stable", "consumer", "range")
        assert [m.member_id for m in d[0].members] == [member] and d[0].members[0].member_assignment == b"assigned"
        assert d[1].group_state == "Dead"
        listed = c.call("ListGroups", 4, states_filter=["Stable"]).groups
        assert [(g.group_id, g.group_state) for g in listed] == [("admin-g", "Stable")]
        assert c.call("ListGroups", 4, states_filter=["Empty"]).groups == []
        # a live group cannot be deleted, nor can a subscribed... offset of a live group
        assert c.call("DeleteGroups", 2, groups_names=["admin-g"]).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
        left = c.call("LeaveGroup", 3, group_id="admin-g", members=[LG.MemberIdentity(member_id=member)])
        assert left.error_code == 0 and left.members[0].error_code == 0
        _until(lambda: c.call("DescribeGroups", 5, groups=["admin-g"]).groups[0].group_state == "Empty")
        od = c.call(
            "OffsetDelete",
            0,
            group_id="admin-g",
            topics=[
                OD.OffsetDeleteRequestTopic(
                    name=topic_name, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)]
                )
            ],
        )
        assert od.error_code == 0 and od.topics[0].partitions[0].error_code == 0
        fetched = _offsets(c, "admin-g")
        assert fetched == {(topic_name, 1): 3}
        assert c.call("DeleteGroups", 2, groups_names=["admin-g"]).results[0].error_code == 0
        assert _offsets(c, "admin-g") == {}
        assert c.call("DeleteGroups", 2, groups_names=["admin-g"]).results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def _offsets(c: RawClient, gid: str) -> dict:
    OF = api_by_name("OffsetFetch").request_class()
    resp = c.call("OffsetFetch", 8, groups=[OF.OffsetFetchRequestGroup(group_id=gid, topics=None)])
    return {(t.name, p.partition_index): p.committed_offset for t in resp.groups[0].topics for p in t.partitions}


def _wait_loaded(c: RawClient) -> None:
    """Until every __consumer_offsets partition has loaded, as a client retrying LOAD_IN_PROGRESS would.

    Probing one group is not enough: each group id maps to its own partition, and the
    partitions load one after another, so a test's group may still be loading when the
    probe's has finished (that made test_commit_errors_and_deleted_topics flaky under load).
    """
    _until(lambda: c.call("FindCoordinator", 3, key="probe", key_type=0).error_code == 0)
    probes: dict[int, str] = {}
    i = 0
    while len(probes) < OFFSETS_PARTITIONS:
        probes.setdefault(partition_for(f"probe-{i}", OFFSETS_PARTITIONS), f"probe-{i}")
        i += 1
    OF = api_by_name("OffsetFetch").request_class()
    for gid in probes.values():
        _until(
            lambda gid=gid: (
                c.call("OffsetFetch", 8, groups=[OF.OffsetFetchRequestGroup(group_id=gid, topics=None)])
                .groups[0]
                .error_code
                != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            )
        )


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_commit_errors_and_deleted_topics(groups_broker, topic_name) -> None:
    with RawClient(groups_broker.port) as c:
        _wait_loaded(c)
        create(c, topic_name, 1)

        def commit(topic: str, metadata: str = "", partition: int = 0):
            resp = c.call(
                "OffsetCommit",
                8,
                group_id="solo",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OC.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            OC.OffsetCommitRequestPartition(
                                partition_index=partition, committed_offset=9, committed_metadata=metadata
                            )
                        ],
                    )
                ],
            )
            return resp.topics[0].partitions[0].error_code

        assert commit(topic_name, "x" * 5000) == ErrorCode.OFFSET_METADATA_TOO_LARGE
        assert commit(topic_name + "-missing") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert commit(topic_name, partition=3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _offsets(c, "solo") == {}  # the rejected commits stored nothing
        assert commit(topic_name, "ok") == 0
        assert _offsets(c, "solo") == {(topic_name, 0): 9}
        DT = api_by_name("DeleteTopics").request_class()
        c.call("DeleteTopics", 6, topics=[DT.DeleteTopicState(name=topic_name)], timeout_ms=5000)
        _until(lambda: _offsets(c, "solo") == {})  # a deleted topic's offsets go away
