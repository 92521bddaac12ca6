"""A coordinator write that the log refuses leaves no trace: not in memory, not after a restart.

The trigger is a real one: a record larger than the internal topic's
max.message.bytes (a big consumer subscription, long topic names), which the
log refuses with MESSAGE_TOO_LARGE before writing a byte. Kafka's coordinators
answer such a write with UNKNOWN_SERVER_ERROR (GroupCoordinatorService's
normalization of RECORD_TOO_LARGE / MESSAGE_TOO_LARGE) and keep the state they
had before it; so does Shoal, by replaying the partition from its log.
Before: the classic group kept the failed generation in memory, the share
group kept the member that could not be written, and the heartbeat's answer
was a closed connection.
"""

from __future__ import annotations

import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create, hb
from tests.support.wire import describe as share_describe

JG = api_by_name("JoinGroup").request_class()
SG = api_by_name("SyncGroup").request_class()
OC = api_by_name("OffsetCommit").request_class()
OF = api_by_name("OffsetFetch").request_class()

SMALL_RECORDS = (
    "message.max.bytes=4096",  # __consumer_offsets takes the broker default
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=100",
    "group.share.assignment.interval.ms=0",
)


@pytest.fixture
def broker(broker_factory):
    return broker_factory(*SMALL_RECORDS).start()


def until_loaded(call, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        r = call()
        code = getattr(r, "error_code", 0)
        if (
            code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR)
            or time.monotonic() > deadline
        ):
            return r
        time.sleep(0.05)


def join(c: RawClient, gid: str, member_id: str, metadata: bytes):
    return c.send(
        "JoinGroup",
        5,
        JG(
            group_id=gid,
            session_timeout_ms=30000,
            rebalance_timeout_ms=5000,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        ),
    )


def call_join(c: RawClient, gid: str, member_id: str, metadata: bytes):
    join(c, gid, member_id, metadata)
    return c.receive("JoinGroup", 5)


def sync(c: RawClient, gid: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    return c.call(
        "SyncGroup",
        3,
        group_id=gid,
        generation_id=generation,
        member_id=member_id,
        assignments=[SG.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()],
    )


def classic_view(c: RawClient, gid: str):
    g = until_loaded(lambda: c.call("DescribeGroups", 5, groups=[gid]).groups[0])
    return g.error_code, g.group_state, sorted((m.member_id, bytes(m.member_metadata)) for m in g.members)


def committed(c: RawClient, gid: str) -> dict:
    resp = until_loaded(
        lambda: c.call("OffsetFetch", 8, groups=[OF.OffsetFetchRequestGroup(group_id=gid, topics=None)]).groups[0]
    )
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in resp.topics for p in t.partitions}


def commit(c: RawClient, gid: str, topic: str, offset: int, metadata: str, generation: int = -1, member: str = ""):
    resp = c.call(
        "OffsetCommit",
        8,
        group_id=gid,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[
            OC.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OC.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_metadata=metadata
                    )
                ],
            )
        ],
    )
    return resp.topics[0].partitions[0].error_code


def test_a_classic_group_write_that_fails_changes_nothing(broker, topic_name) -> None:
    gid = "big"
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        until_loaded(lambda: a.call("FindCoordinator", 3, key=gid, key_type=0))
        create(a, topic_name, 1)
        first = call_join(a, gid, "", b"small")
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = call_join(a, gid, first.member_id, b"small")
        member_a = first.member_id
        assert sync(a, gid, joined.generation_id, member_a, {member_a: b"p0"}).error_code == 0
        assert commit(a, gid, topic_name, 7, "m", joined.generation_id, member_a) == 0
        before = classic_view(a, gid)
        assert before == (0, "Stable", [(member_a, b"small")])

        # A second member whose subscription alone is larger than a record may be: its join
        # completes in memory, and the leader's SyncGroup then has to write it.
        id_b = call_join(b, gid, "", b"x" * 5000).member_id
        join(b, gid, id_b, b"x" * 5000)  # held until the rebalance completes
        rejoined = call_join(a, gid, member_a, b"small")
        assert rejoined.error_code == 0 and rejoined.generation_id == joined.generation_id + 1
        assert b.receive("JoinGroup", 5).error_code == 0
        failed = sync(a, gid, rejoined.generation_id, member_a, {member_a: b"p0", id_b: b""})
        assert failed.error_code == ErrorCode.UNKNOWN_SERVER_ERROR  # MESSAGE_TOO_LARGE, as Kafka normalizes it

        # The group is what the log holds: the generation that failed left nothing behind.
        assert classic_view(a, gid) == before
        assert committed(a, gid) == {(topic_name, 0): (7, "m")}
        # An offset commit that the log refuses is not applied either.
        assert (
            commit(a, gid, topic_name, 8, "y" * 4050, joined.generation_id, member_a) == ErrorCode.UNKNOWN_SERVER_ERROR
        )
        assert committed(a, gid) == {(topic_name, 0): (7, "m")}
    broker.kill()
    broker.start()
    with RawClient(broker.port) as c:
        assert classic_view(c, gid) == before
        assert committed(c, gid) == {(topic_name, 0): (7, "m")}


def test_a_share_group_write_that_fails_changes_nothing(broker) -> None:
    gid = "share-big"
    with RawClient(broker.port) as c:
        create(c, "small-topic", 1)
        r1 = until_loaded(lambda: hb(c, gid, "m1", 0, ["small-topic"]))
        assert r1.error_code == 0
        epoch = r1.member_epoch
        deadline = time.monotonic() + 10
        while True:  # until the share state is initialized and m1 holds the partition
            epoch = hb(c, gid, "m1", epoch).member_epoch
            before = share_describe(c, gid)
            if (
                before.members
                and before.members[0].assignment.topic_partitions
                and (before.assignment_epoch == before.group_epoch == before.members[0].member_epoch)
            ):
                break
            assert time.monotonic() < deadline, before
            time.sleep(0.05)
        assert [m.member_id for m in before.members] == ["m1"]

        # 20 topic names of 249 characters: this member's metadata record cannot be written.
        names = [f"{i:03d}" + "t" * 246 for i in range(20)]
        r2 = hb(c, gid, "m2", 0, names)
        assert r2.error_code == ErrorCode.UNKNOWN_SERVER_ERROR, r2  # before: the connection was closed

        after = until_loaded(lambda: share_describe(c, gid))
        assert after.error_code == 0
        assert [m.member_id for m in after.members] == ["m1"]
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert after.members == before.members
        # the member that was written goes on heartbeating at its epoch
        assert until_loaded(lambda: hb(c, gid, "m1", epoch)).error_code == 0
    broker.kill()
    broker.start()
    with RawClient(broker.port) as c:
        restored = until_loaded(lambda: share_describe(c, gid))
        assert [m.member_id for m in restored.members] == ["m1"]
        assert (restored.group_epoch, restored.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
