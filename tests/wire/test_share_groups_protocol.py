"""Share-group membership and admin over a real socket (ShareGroupHeartbeat,
ShareGroupDescribe, ListGroups, DeleteGroups, the share-offset APIs,
FindCoordinator SHARE), including restarts that replay __consumer_offsets."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create, describe, hb

ASO = api_by_name("AlterShareGroupOffsets").request_class()
DSO = api_by_name("DescribeShareGroupOffsets").request_class()
DLO = api_by_name("DeleteShareGroupOffsets").request_class()
CP = api_by_name("CreatePartitions").request_class()

FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=100",
    "group.share.assignment.interval.ms=0",
    "group.share.min.session.timeout.ms=1500",
    "group.share.session.timeout.ms=1500",
)


@pytest.fixture
def share_broker(broker_factory):
    return broker_factory(*FAST).start()


def parts(resp) -> dict[uuid.UUID, list[int]] | None:
    if resp.assignment is None:
        return None
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}


def topic_id(c: RawClient, name: str) -> uuid.UUID:
    md = c.call("Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name=name)])
    return md.topics[0].topic_id


def wait_for_assignment(c: RawClient, gid: str, member: str, last, want, timeout: float = 10.0):
    """Heartbeat until the member's assignment equals `want` ({topic id: [partitions]}).

    `last` is the member's latest heartbeat answer (its assignment counts).
    """
    deadline = time.monotonic() + timeout
    current = parts(last)
    r = last
    if current == want:
        return r
    while time.monotonic() < deadline:
        r = hb(c, gid, member, r.member_epoch)
        assert r.error_code == 0, r
        if r.assignment is not None:
            current = parts(r)
        if current == want:
            return r
        time.sleep(0.05)
    raise AssertionError(f"{member} never got {want}; last {current}")


# -- bad input -------------------------------------------------------------------------------


def test_bad_heartbeats_get_kafka_errors(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "bad-t")
        assert hb(c, "", "m", 0, ["bad-t"]).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "", 0, ["bad-t"]).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "m", 0, None).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "m", 0, []).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "m", -2, ["bad-t"]).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "m", 0, ["bad-t"], rack="").error_code == ErrorCode.INVALID_REQUEST
        r = hb(c, "never-joined", "m", 3)
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND and r.error_message
        # Nothing above created a group.
        assert c.call("ListGroups", 5, states_filter=[], types_filter=["share"]).groups == []
        # A classic group's id is not a share group, and the other way round.
        JG = api_by_name("JoinGroup").request_class()
        c.call(
            "OffsetCommit",
            8,
            group_id="classic-g",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                api_by_name("OffsetCommit")
                .request_class()
                .OffsetCommitRequestTopic(
                    name="bad-t",
                    partitions=[
                        api_by_name("OffsetCommit")
                        .request_class()
                        .OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                    ],
                )
            ],
        )
        assert hb(c, "classic-g", "m", 0, ["bad-t"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert hb(c, "sg", "m1", 0, ["bad-t"]).error_code == 0
        j = c.call(
            "JoinGroup",
            5,
            group_id="sg",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        assert j.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        d = c.call("DescribeGroups", 5, groups=["sg"], include_authorized_operations=False).groups[0]
        assert (d.error_code, d.group_state) == (0, "Dead")
        d = c.call("DescribeGroups", 6, groups=["sg"], include_authorized_operations=False).groups[0]
        assert d.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_find_coordinator_share_keys(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        tid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        keys = [f"g:{tid}:0", "g:not-a-uuid:0", f":{tid}:0", f"g:{tid}:x", "plain"]
        r = c.call("FindCoordinator", 6, key_type=2, coordinator_keys=keys)
        codes = [x.error_code for x in r.coordinators]
        assert codes == [0] + [ErrorCode.INVALID_REQUEST] * 4
        assert r.coordinators[0].port == share_broker.port


# -- membership -------------------------------------------------------------------------------


def test_join_assignment_sharing_fencing_and_leave(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "one", 1)
        tid = topic_id(c, "one")
        r1 = hb(c, "grp", "m1", 0, ["one"])
        assert r1.error_code == 0 and r1.member_epoch >= 1 and r1.heartbeat_interval_ms == 100
        e1 = wait_for_assignment(c, "grp", "m1", r1, {tid: [0]}).member_epoch
        r2 = hb(c, "grp", "m2", 0, ["one"])
        assert r2.error_code == 0
        e2 = wait_for_assignment(c, "grp", "m2", r2, {tid: [0]}).member_epoch
        # both members hold the one partition
        d = describe(c, "grp")
        assert d.group_state == "Stable" and d.assignor_name == "simple"
        assert {m.member_id: [tp.partitions for tp in m.assignment.topic_partitions] for m in d.members} == {
            "m1": [[0]],
            "m2": [[0]],
        }
        assert all(tp.topic_name == "one" for m in d.members for tp in m.assignment.topic_partitions)
        # epoch games: the old epoch, an epoch from the future
        r = hb(c, "grp", "m1", e1)
        e1 = r.member_epoch
        assert hb(c, "grp", "m1", e1 - 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert hb(c, "grp", "m1", e1 + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert hb(c, "grp", "ghost", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # leave, then the id is unknown until it joins again with epoch 0
        left = hb(c, "grp", "m2", e2)
        left = hb(c, "grp", "m2", -1)
        assert (left.error_code, left.member_epoch) == (0, -1)
        assert hb(c, "grp", "m2", e2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert [m.member_id for m in describe(c, "grp").members] == ["m1"]
        back = hb(c, "grp", "m2", 0, ["one"])
        assert back.error_code == 0 and back.member_epoch > e2


def test_max_size(broker_factory) -> None:
    b = broker_factory(*FAST, "group.share.max.size=2").start()
    with RawClient(b.port) as c:
        create(c, "ms")
        assert hb(c, "full", "a", 0, ["ms"]).error_code == 0
        assert hb(c, "full", "b", 0, ["ms"]).error_code == 0
        assert hb(c, "full", "c", 0, ["ms"]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert len(describe(c, "full").members) == 2


def test_session_timeout_removes_a_silent_member(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "st", 2)
        tid = topic_id(c, "st")
        a = hb(c, "sess", "alive", 0, ["st"])
        hb(c, "sess", "silent", 0, ["st"])
        epoch = a.member_epoch
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = hb(c, "sess", "alive", epoch)
            assert r.error_code == 0
            epoch = r.member_epoch
            if [m.member_id for m in describe(c, "sess").members] == ["alive"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the silent member was never removed")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            epoch = hb(c, "sess", "alive", epoch).member_epoch
            (m,) = describe(c, "sess").members
            if [(tp.topic_id, tp.partitions) for tp in m.assignment.topic_partitions] == [(tid, [0, 1])]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the remaining member never got both partitions")


def test_partition_growth_is_assigned(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "grow", 1)
        tid = topic_id(c, "grow")
        r = hb(c, "gg", "m", 0, ["grow"])
        r = wait_for_assignment(c, "gg", "m", r, {tid: [0]})
        resp = c.call(
            "CreatePartitions",
            3,
            topics=[CP.CreatePartitionsTopic(name="grow", count=3, assignments=None)],
            timeout_ms=5000,
            validate_only=False,
        )
        assert resp.results[0].error_code == 0
        wait_for_assignment(c, "gg", "m", r, {tid: [0, 1, 2]})


def test_unknown_topics_are_skipped_until_they_exist(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        r = hb(c, "later", "m", 0, ["not-yet"])
        assert r.error_code == 0 and parts(r) == {}
        create(c, "not-yet", 2)
        wait_for_assignment(c, "later", "m", r, {topic_id(c, "not-yet"): [0, 1]})


# -- durability ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_groups_survive_restart(broker_factory, how: str) -> None:
    b = broker_factory(*FAST, "group.share.session.timeout.ms=30000", "group.share.max.session.timeout.ms=60000")
    b.start()
    with RawClient(b.port) as c:
        create(c, "dur", 3)
        tid = topic_id(c, "dur")
        epochs = {m: hb(c, "dg", m, 0, ["dur"]).member_epoch for m in ("m1", "m2")}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            epochs = {m: hb(c, "dg", m, e).member_epoch for m, e in epochs.items()}
            d = describe(c, "dg")
            if sum(len(tp.partitions) for m in d.members for tp in m.assignment.topic_partitions) == 3:
                break
            time.sleep(0.05)
        e2 = epochs["m2"]
        before = describe(c, "dg")
    b.kill() if how == "kill" else b.stop()
    b.start()
    with RawClient(b.port) as c:
        deadline = time.monotonic() + 10
        while True:
            after = describe(c, "dg")
            if after.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert after.error_code == 0
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
            before.group_epoch,
            before.assignment_epoch,
            before.group_state,
        )
        assert after.members == before.members
        assert sum(len(tp.partitions) for m in after.members for tp in m.assignment.topic_partitions) == 3
        assert {tp.topic_id for m in after.members for tp in m.assignment.topic_partitions} == {tid}
        # the restored member keeps its epoch
        assert hb(c, "dg", "m2", e2).error_code == 0


# -- admin ----------------------------------------------------------------------------------------


def test_list_and_delete_groups(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "ld")
        r = hb(c, "del-me", "m", 0, ["ld"])
        listed = c.call("ListGroups", 5, states_filter=[], types_filter=["share"]).groups
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == [
            ("del-me", "share", "share", "Stable")
        ]
        assert c.call("ListGroups", 5, states_filter=[], types_filter=["classic"]).groups == []
        assert c.call("ListGroups", 5, states_filter=["empty"], types_filter=[]).groups == []
        res = c.call("DeleteGroups", 2, groups_names=["del-me"]).results[0]
        assert res.error_code == ErrorCode.NON_EMPTY_GROUP
        hb(c, "del-me", "m", -1)
        assert hb(c, "del-me", "m", r.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        listed = c.call("ListGroups", 5, states_filter=["Empty"], types_filter=["share"]).groups
        assert [g.group_id for g in listed] == ["del-me"]
        res = c.call("DeleteGroups", 2, groups_names=["del-me"]).results[0]
        assert res.error_code == 0
        assert describe(c, "del-me").error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert c.call("ListGroups", 5, states_filter=[], types_filter=[]).groups == []


def test_share_offsets_admin(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "off", 2)
        tid = topic_id(c, "off")
        r = hb(c, "og", "m", 0, ["off"])
        epoch = wait_for_assignment(c, "og", "m", r, {tid: [0, 1]}).member_epoch

        def describe_offsets(topics=None):
            req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id="og", topics=topics)]
            return c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]

        d = describe_offsets()
        assert d.error_code == 0
        assert [(t.topic_name, t.topic_id) for t in d.topics] == [("off", tid)]
        assert [(p.partition_index, p.start_offset, p.error_code) for p in d.topics[0].partitions] == [
            (0, -1, 0),
            (1, -1, 0),
        ]
        d = describe_offsets([DSO.DescribeShareGroupOffsetsRequestTopic(topic_name="nope", partitions=[0])])
        assert d.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        alter = [
            ASO.AlterShareGroupOffsetsRequestTopic(
                topic_name="off",
                partitions=[ASO.AlterShareGroupOffsetsRequestPartition(partition_index=1, start_offset=7)],
            )
        ]
        a = c.call("AlterShareGroupOffsets", 0, group_id="og", topics=alter)
        assert a.error_code == ErrorCode.NON_EMPTY_GROUP
        dl = c.call(
            "DeleteShareGroupOffsets", 0, group_id="og", topics=[DLO.DeleteShareGroupOffsetsRequestTopic("off")]
        )
        assert dl.error_code == ErrorCode.NON_EMPTY_GROUP
        assert hb(c, "og", "m", -1).error_code == 0
        assert hb(c, "og", "m", epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID

        a = c.call("AlterShareGroupOffsets", 0, group_id="og", topics=alter)
        assert a.error_code == 0 and a.responses[0].partitions[0].error_code == 0
        starts = {p.partition_index: p.start_offset for p in describe_offsets().topics[0].partitions}
        assert starts == {0: -1, 1: 7}
        bad = [
            ASO.AlterShareGroupOffsetsRequestTopic(
                topic_name="off",
                partitions=[ASO.AlterShareGroupOffsetsRequestPartition(partition_index=9, start_offset=1)],
            )
        ]
        a = c.call("AlterShareGroupOffsets", 0, group_id="og", topics=bad)
        assert a.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        dl = c.call(
            "DeleteShareGroupOffsets",
            0,
            group_id="og",
            topics=[DLO.DeleteShareGroupOffsetsRequestTopic("off"), DLO.DeleteShareGroupOffsetsRequestTopic("zzz")],
        )
        assert dl.error_code == 0
        assert [(t.topic_name, t.error_code) for t in dl.responses] == [
            ("off", 0),
            ("zzz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert describe_offsets().topics == []
        # The state itself is gone at the share coordinator.
        RS = api_by_name("ReadShareGroupStateSummary").request_class()
        s = c.call(
            "ReadShareGroupStateSummary",
            1,
            group_id="og",
            topics=[RS.ReadStateSummaryData(topic_id=tid, partitions=[RS.PartitionData(partition=1, leader_epoch=0)])],
        )
        assert s.results[0].partitions[0].start_offset == -1
        # As Kafka 4.2 (KAFKA-19662): an unused group id becomes an empty share group with these offsets.
        other = c.call("AlterShareGroupOffsets", 0, group_id="missing", topics=alter)
        assert other.error_code == 0 and other.responses[0].partitions[0].error_code == 0
        assert describe(c, "missing").group_state == "Empty"


def summary_start(c: RawClient, gid: str, tid: uuid.UUID, partition: int) -> int:
    RS = api_by_name("ReadShareGroupStateSummary").request_class()
    s = c.call(
        "ReadShareGroupStateSummary",
        1,
        group_id=gid,
        topics=[
            RS.ReadStateSummaryData(topic_id=tid, partitions=[RS.PartitionData(partition=partition, leader_epoch=0)])
        ],
    )
    return s.results[0].partitions[0].state_epoch


def test_unsubscribed_topic_state_is_deleted_and_empty_group_keeps_it(share_broker) -> None:
    with RawClient(share_broker.port) as c:
        create(c, "keep", 1)
        create(c, "drop", 1)
        keep, drop = topic_id(c, "keep"), topic_id(c, "drop")
        r = hb(c, "subs", "m", 0, ["keep", "drop"])
        r = wait_for_assignment(c, "subs", "m", r, {keep: [0], drop: [0]})
        assert summary_start(c, "subs", drop, 0) > 0  # initialized: a state epoch is stored
        r = hb(c, "subs", "m", r.member_epoch, ["keep"])
        deadline = time.monotonic() + 10
        while summary_start(c, "subs", drop, 0) != 0 and time.monotonic() < deadline:
            r = hb(c, "subs", "m", r.member_epoch)
            time.sleep(0.05)
        assert summary_start(c, "subs", drop, 0) == 0  # the state of "drop" is gone
        # Leaving empties the group but keeps the state of what it still subscribed to.
        assert hb(c, "subs", "m", -1).error_code == 0
        time.sleep(0.3)
        assert summary_start(c, "subs", keep, 0) > 0
        req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id="subs", topics=None)]
        d = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
        assert [t.topic_name for t in d.topics] == ["keep"]


def test_group_config_sets_heartbeat_interval_and_session(share_broker) -> None:
    IAC = api_by_name("IncrementalAlterConfigs").request_class()
    with RawClient(share_broker.port) as c:
        create(c, "cfg")
        resp = c.call(
            "IncrementalAlterConfigs",
            1,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=ConfigResourceType.GROUP,
                    resource_name="cfg-g",
                    configs=[
                        IAC.AlterableConfig(
                            name="share.heartbeat.interval.ms", config_operation=AlterConfigOpType.SET, value="250"
                        ),
                        IAC.AlterableConfig(
                            name="share.session.timeout.ms", config_operation=AlterConfigOpType.SET, value="4000"
                        ),
                    ],
                )
            ],
            validate_only=False,
        )
        assert resp.responses[0].error_code == 0, resp
        r = hb(c, "cfg-g", "m", 0, ["cfg"])
        assert r.heartbeat_interval_ms == 250
        assert hb(c, "other-g", "m", 0, ["cfg"]).heartbeat_interval_ms == 100
        start = time.monotonic()
        while describe(c, "cfg-g").members and time.monotonic() - start < 10:
            time.sleep(0.1)
        gone_after = time.monotonic() - start
        assert describe(c, "cfg-g").members == []
        assert 3.0 <= gone_after <= 9, gone_after  # the group's 4 s session, not the broker's 1.5 s
