"""Identifiers too long to store are refused at the request boundary (#28 items 4 and 9).

A group id, member id or group instance id lands in the key of a coordinator record, whose
strings have an int16 length (32,767 bytes). Before: a 40,000-byte group id closed the
connection ("cannot encode OffsetCommitKey"), and an oversized member id joined a share group
in memory, got an assignment, and failed to encode its record. Now: INVALID_GROUP_ID for the
group id, INVALID_REQUEST for a member id, nothing changed -- in memory or after a restart.
"""

from __future__ import annotations

from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create

OC = api_by_name("OffsetCommit").request_class()
JG = api_by_name("JoinGroup").request_class()
FAST = ("offsets.topic.num.partitions=2", "share.coordinator.state.topic.num.partitions=2")
LONG = "g" * 40_000


def commit(c: RawClient, group: str, topic: str) -> int:
    r = c.call(
        "OffsetCommit", 9, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[OC.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=7, committed_leader_epoch=-1, committed_metadata=None)])],
    )  # fmt: skip
    return r.topics[0].partitions[0].error_code


def heartbeat(c: RawClient, group: str, member: str, topic: str):
    return c.call(
        "ShareGroupHeartbeat", 1, group_id=group, member_id=member, member_epoch=0, rack_id=None,
        subscribed_topic_names=[topic],
    )  # fmt: skip


def share_members(c: RawClient, group: str) -> list:
    d = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    return [] if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND else list(d.members)


def test_oversized_ids_are_refused_and_change_nothing(broker_factory) -> None:
    b = broker_factory(*FAST)
    b.start()
    with RawClient(b.port) as c:
        create(c, "t")
        assert commit(c, LONG, "t") == ErrorCode.INVALID_GROUP_ID
        assert commit(c, "g" * 32_767, "t") == 0  # the longest that can be stored is stored
        r = heartbeat(c, LONG, "m" * 22, "t")
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_GROUP_ID,
            "The group id is longer than 32767 bytes.",
        )
        r = heartbeat(c, "sg", "m" * 40_000, "t")
        assert r.error_code == ErrorCode.INVALID_REQUEST and r.member_id is None
        assert share_members(c, "sg") == []
        j = c.call(
            "JoinGroup", 6, group_id="cg", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            group_instance_id="i" * 40_000, protocol_type="consumer",
            protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )  # fmt: skip
        assert j.error_code == ErrorCode.INVALID_REQUEST
        # The connection is still there and serves the next request.
        assert c.call("ApiVersions", 3, client_software_name="t", client_software_version="1").error_code == 0
    b.stop()
    b.start()
    with RawClient(b.port) as c:
        assert share_members(c, "sg") == []
        groups = c.call("ListGroups", 4, states_filter=[]).groups
        assert all(len(g.group_id) <= 32_767 for g in groups)
        assert "cg" not in {g.group_id for g in groups}
